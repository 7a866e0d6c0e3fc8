/** The host's mount table below a test's own directories. */
import { run } from '../../src/exec.js';
import { readMountInfo } from '../../src/mounts/mountinfo.js';

/** Mount points strictly below `dir`, in mount table order. */
export async function mountPointsBelow(dir: string): Promise<string[]> {
  return (await readMountInfo()).map((m) => m.mountPoint).filter((p) => p.startsWith(`${dir}/`));
}

/** Lazily unmounts everything below `dir`, deepest first so that no mount hides another. */
export async function unmountAllBelow(dir: string): Promise<void> {
  const deepestFirst = (await mountPointsBelow(dir)).sort((a, b) => b.length - a.length);
  for (const target of deepestFirst)
    await run('umount', ['-l', target], { timeoutMs: 10_000 }).catch(() => {});
}
