import { BerthError } from '../errors.js';

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'VERSION';

export interface CniErrorInfo {
  command: CniCommand;
  network: string;
  /** Plugin type; absent when the error is about the whole list (e.g. aggregated DEL failures). */
  plugin?: string;
  /** CNI error code from the plugin's error JSON (e.g. 7 = invalid network config), when it sent one. */
  code?: number;
  details?: string;
  /** The plugin did not answer within its deadline. */
  timedOut?: boolean;
}

/** A CNI plugin invocation failed. Message always names the plugin, network and what the plugin said. */
export class CniError extends BerthError {
  override name = 'CniError';
  readonly command: CniCommand;
  readonly network: string;
  readonly plugin: string | undefined;
  readonly code: number | undefined;
  readonly details: string | undefined;
  readonly timedOut: boolean;

  constructor(info: CniErrorInfo, problem: string) {
    const who = info.plugin === undefined ? '' : ` plugin "${info.plugin}"`;
    const code = info.code === undefined ? '' : ` (code ${info.code})`;
    const details = info.details ? `: ${info.details}` : '';
    super(`CNI ${info.command}${who} for network "${info.network}" failed${code}: ${problem}${details}`);
    this.command = info.command;
    this.network = info.network;
    this.plugin = info.plugin;
    this.code = info.code;
    this.details = info.details;
    this.timedOut = info.timedOut ?? false;
  }
}

/** DEL keeps going past a failing plugin; this carries every failure so none is hidden. */
