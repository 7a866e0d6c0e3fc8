/** The configuration's types, for the rest of the daemon; the table in settings.ts defines them. */
import type { BerthConfig } from './settings.js';

export type { BerthConfig } from './settings.js';
export type LogLevel = BerthConfig['logLevel'];
