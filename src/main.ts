#!/usr/bin/env node
import { ConfigError } from './config/error.js';
import { loadConfig } from './config/load.js';
import { errorMessage } from './errors.js';
import { DAEMON_UMASK } from './file-modes.js';
import { createLogger } from './log.js';
import { ServiceNotifier } from './systemd/notify.js';

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
  // Before anything is created or spawned: whatever umask berthd was started under (000 from a
  // careless unit or shell), what it and its children make gets the usual modes.
  process.umask(DAEMON_UMASK);
  const logger = createLogger(config.logLevel);
  if (process.getuid?.() !== 0)
    logger.warn('berthd is not running as root: netns, mounts and runc will fail');

  // A request must never take the daemon down; anything that escapes a handler is logged instead.
  process.on('unhandledRejection', (reason) =>
    logger.error({ err: errorMessage(reason) }, 'unhandled rejection'),
  );

  // Read before start-up spawns anything, which would inherit it.
  const notifier = ServiceNotifier.fromEnv(process.env, logger);

  // Loaded only to run: --help and friends answer without loading gRPC, SQLite and the rest.
  const { startDaemon } = await import('./daemon.js');
  const daemon = await startDaemon(config, logger, {
    ...(process.env.BERTH_TEST_PAUSE_BEFORE_STEP
      ? { pauseBeforeStep: process.env.BERTH_TEST_PAUSE_BEFORE_STEP }
      : {}),
  });
  // The socket is bound and start-up recovery is done: calls are served from here on.
  await notifier?.ready(`serving CRI on ${config.socket}`);

  const signal = await nextStopSignal();
  logger.info({ signal, timeoutMs: config.shutdownTimeoutMs }, 'shutting down; pods keep running');
  const toldStopping = notifier?.stopping('stopping: finishing the calls in flight');
  const force = new AbortController();
  void nextStopSignal().then((again) => {
    logger.warn({ signal: again }, 'second stop signal: stopping at once');
    force.abort();
  });
  // Calls cancelled at the timeout are part of a clean stop; clean-up abandoned is not.
  const cleanedUp = await daemon.close({ graceMs: config.shutdownTimeoutMs, force: force.signal });
  await toldStopping;
  return cleanedUp ? 0 : 1;
}

const STOP_SIGNALS = ['SIGTERM', 'SIGINT'] as const;

/** The next SIGTERM or SIGINT; until then, they no longer kill berthd. */
function nextStopSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const stop = (signal: NodeJS.Signals): void => {
      for (const name of STOP_SIGNALS) process.off(name, stop);
      resolve(signal);
    };
    for (const name of STOP_SIGNALS) process.on(name, stop);
  });
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`berthd: ${errorMessage(err)}\n`);
    process.exit(1);
  },
);
