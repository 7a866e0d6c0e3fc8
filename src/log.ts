import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/** JSON lines on stderr: stdout stays free for anything a caller pipes. */
export function createLogger(level: LevelWithSilent): Logger {
  return pino({ level, base: { name: 'berthd' } }, pino.destination(2));
}
