/**
 * crun as a second runtime handler of a test berthd (`--runtime-handler crun=PATH:ROOT`), for the
 * RuntimeClass scenarios. crun 1.8 (Debian 12's) refuses a hybrid cgroup host whose unified
 * hierarchy has any controller ("cgroups in hybrid mode not supported, drop all controllers from
 * cgroupv2"; this host's has hugetlb, which no v1 hierarchy takes); there the handler is a wrapper
 * that runs crun in a mount namespace of its own without /sys/fs/cgroup/unified, where crun sees
 * the v1 host it supports. Mounts from the host still reach that namespace (slave propagation).
 */
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { findProgram, run } from '../../src/exec.js';

const UNIFIED = '/sys/fs/cgroup/unified';

export interface CrunHandler {
  /** The handler's name, a RuntimeClass's `handler`. */
  name: 'crun';
  /** What berthd is started with to serve it. */
  berthArgs: string[];
  /** Containers crun's root holds: those berth ran with crun. */
  containers(): Promise<string[]>;
  /** Deletes what crun still holds and the handler's dir. */
  remove(): Promise<void>;
}

/** The crun handler in `dir` (made here, removed by remove()); null where crun is not installed. */
export async function writeCrunHandler(dir: string): Promise<CrunHandler | null> {
  const crun = await findProgram('crun').catch(() => null);
  if (crun === null) return null;
  const root = join(dir, 'root');
  await mkdir(root, { recursive: true });
  let path = crun;
  if (await hybridWithControllers()) {
    path = join(dir, 'crun');
    const unshare = await findProgram('unshare');
    await writeFile(
      path,
      [
        '#!/bin/sh',
        '# crun in a mount namespace without the unified cgroup hierarchy (see test/harness/crun.ts).',
        `exec '${unshare}' --mount --propagation slave -- /bin/sh -c 'umount -l ${UNIFIED} && exec "$0" "$@"' '${crun}' "$@"`,
        '',
      ].join('\n'),
    );
    await chmod(path, 0o755);
  }
  const list = async (): Promise<string[]> => {
    const { stdout } = await run(crun, ['--root', root, 'list', '-q'], { timeoutMs: 10_000 });
    return stdout.split('\n').filter(Boolean);
  };
  return {
    name: 'crun',
    berthArgs: ['--runtime-handler', `crun=${path}:${root}`],
    containers: list,
    async remove() {
      for (const id of await list().catch(() => [] as string[])) {
        await run(path, ['--root', root, 'delete', '--force', id], { timeoutMs: 10_000 }).catch(() => {});
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function hybridWithControllers(): Promise<boolean> {
  if (!existsSync(join(UNIFIED, 'cgroup.controllers'))) return false;
  return (await readFile(join(UNIFIED, 'cgroup.controllers'), 'utf8')).trim() !== '';
}
