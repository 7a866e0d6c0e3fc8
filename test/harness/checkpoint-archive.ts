/**
 * Checkpoint archives of a test berthd's running containers, in the layout CheckpointContainer
 * writes (CRI-O's): config.dump, spec.dump, checkpoint/ (criu's images, the container left
 * running), rootfs-diff.tar (the overlay's upper dir, whiteouts left out), deleted.files (the
 * whiteouts' paths) and dump.log. Made here with runc and tar from what berthd keeps on disk, for
 * the restore tests.
 */
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/exec.js';
import type { TestDaemon } from './daemon.js';
import { containerStatus } from './pods.js';

/** criu of a small busybox container takes seconds, more under emulation: a bound for a hang. */
const CHECKPOINT_TIMEOUT_MS = 120_000;
const TAR_TIMEOUT_MS = 60_000;

export async function makeCheckpointArchive(
  daemon: TestDaemon,
  containerId: string,
  location: string,
): Promise<void> {
  const containerDir = join(daemon.rootDir, 'containers', containerId);
  const upper = join(containerDir, 'upper');
  const status = await containerStatus(daemon.cri, containerId);
  const dir = await mkdtemp(join(tmpdir(), 'berth-checkpoint-'));
  try {
    // prettier-ignore
    await run('runc', [
      '--root', daemon.runcRoot,
      'checkpoint', '--leave-running',
      '--image-path', join(dir, 'checkpoint'),
      '--work-path', join(dir, 'work'),
      containerId,
    ], { timeoutMs: CHECKPOINT_TIMEOUT_MS });
    const config = {
      id: containerId,
      name: status.metadata?.name ?? '',
      rootfsImage: status.image?.image ?? '',
      rootfsImageRef: status.image_ref,
      rootfsImageName: status.image?.image ?? '',
      runtime: 'runc',
      createdTime: new Date(Number(BigInt(status.created_at) / 1_000_000n)).toISOString(),
      checkpointedTime: new Date().toISOString(),
    };
    await writeFile(join(dir, 'config.dump'), JSON.stringify(config));
    await copyFile(join(containerDir, 'bundle', 'config.json'), join(dir, 'spec.dump'));
    await copyFile(join(dir, 'work', 'dump.log'), join(dir, 'dump.log'));
    // Overlay whiteouts are 0:0 character devices: deleted.files lists them instead.
    const kept = await run('find', [upper, '-mindepth', '1', '!', '-type', 'c', '-printf', '%P\\n'], {
      timeoutMs: TAR_TIMEOUT_MS,
    });
    const deleted = await run('find', [upper, '-mindepth', '1', '-type', 'c', '-printf', '/%P\\n'], {
      timeoutMs: TAR_TIMEOUT_MS,
    });
    await writeFile(join(dir, 'kept.list'), kept.stdout);
    await writeFile(join(dir, 'deleted.files'), JSON.stringify(deleted.stdout.split('\n').filter(Boolean)));
    // prettier-ignore
    await run('tar', [
      '-C', upper, '--no-recursion', '-cf', join(dir, 'rootfs-diff.tar'), '-T', join(dir, 'kept.list'),
    ], { timeoutMs: TAR_TIMEOUT_MS });
    // prettier-ignore
    await run('tar', [
      '-C', dir, '-cf', location,
      'config.dump', 'spec.dump', 'checkpoint', 'rootfs-diff.tar', 'deleted.files', 'dump.log',
    ], { timeoutMs: TAR_TIMEOUT_MS });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
