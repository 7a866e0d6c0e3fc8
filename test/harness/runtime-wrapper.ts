/**
 * A stand-in for runc that berthd is pointed at with --runtime: a shell script that does its own
 * thing first (holds a verb, fails one), then hands every call to the real runc.
 */
import { chmod, writeFile } from 'node:fs/promises';
import { findProgram } from '../../src/exec.js';

/** Writes the wrapper to `path`: `prelude` (sh lines, "$@" being runc's arguments), then runc. */
export async function writeRuncWrapper(path: string, prelude: readonly string[]): Promise<string> {
  const runc = await findProgram('runc');
  await writeFile(path, ['#!/bin/sh', ...prelude, `exec '${runc}' "$@"`, ''].join('\n'));
  await chmod(path, 0o755);
  return path;
}
