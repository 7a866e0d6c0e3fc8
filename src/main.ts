#!/usr/bin/env node
import { ConfigError } from './config/error.js';
import { loadConfig } from './config/load.js';
import { errorMessage } from './errors.js';
import { createLogger } from './log.js';

async function main(): Promise<number> {
  let loaded;
  try {
    loaded = loadConfig(process.argv.slice(2));
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`berthd: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (loaded.kind !== 'run') {
    process.stdout.write(`${loaded.text}\n`);
    return 0;
  }
  const config = loaded.config;
  const logger = createLogger(config.logLevel);
  if (process.getuid?.() !== 0)
    logger.warn('berthd is not running as root: netns, mounts and runc will fail');

  // A request must never take the daemon down; anything that escapes a handler is logged instead.
  process.on('unhandledRejection', (reason) =>
    logger.error({ err: errorMessage(reason) }, 'unhandled rejection'),
  );

  // Loaded only to run: --help and friends answer without loading gRPC, SQLite and the rest.
  const { startDaemon } = await import('./daemon.js');
  const daemon = await startDaemon(config, logger, {
    ...(process.env.BERTH_TEST_PAUSE_BEFORE_STEP
      ? { pauseBeforeStep: process.env.BERTH_TEST_PAUSE_BEFORE_STEP }
      : {}),
  });
  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      logger.info({ signal }, 'shutting down; pods keep running');
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  await daemon.close();
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`berthd: ${errorMessage(err)}\n`);
    process.exit(1);
  },
);
