/**
 * File operations Node's fs lacks (mknod, setxattr), done by host programs with argument arrays.
 * Each costs a process, which is fine: layers hold few device nodes, whiteouts and xattrs.
 */
import { ExecError } from '../errors.js';
import { run } from '../exec.js';

export type NodeKind = 'char' | 'block' | 'fifo';

const MKNOD_TYPE: Readonly<Record<NodeKind, string>> = { char: 'c', block: 'b', fifo: 'p' };

/** Creates a device node or FIFO; `path` must not exist. */
export async function mknod(
  path: string,
  kind: NodeKind,
  mode: number,
  major: number,
  minor: number,
  timeoutMs: number,
): Promise<void> {
  const args = ['-m', (mode & 0o7777).toString(8), path, MKNOD_TYPE[kind]];
  if (kind !== 'fifo') args.push(String(major), String(minor));
  await run('mknod', args, { timeoutMs });
}

/** Sets an extended attribute on `path` itself, never on what a symlink points to. */
export async function setXattr(path: string, name: string, value: Buffer, timeoutMs: number): Promise<void> {
  // setfattr interprets values ("0x..", "0s..", quotes): base64 says exactly these bytes. An empty
  // base64 value is silently not set, hence the bare empty string for it.
  const encoded = value.length === 0 ? '' : `0s${value.toString('base64')}`;
  await run('setfattr', ['-h', '-n', name, '-v', encoded, path], { timeoutMs });
}

/** The errno behind a failed host program, as far as its message tells. */
export function hostErrno(err: unknown): 'EPERM' | 'ENOTSUP' | undefined {
  if (!(err instanceof ExecError)) return undefined;
  if (err.stderr.includes('Operation not permitted')) return 'EPERM';
  if (err.stderr.includes('Operation not supported')) return 'ENOTSUP';
  return undefined;
}
