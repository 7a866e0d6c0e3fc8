import { BerthError } from '../errors.js';

/** A setting, flag or config file berthd refuses; the message names the flag, or the file and key. */
export class ConfigError extends BerthError {
  override name = 'ConfigError';
}
