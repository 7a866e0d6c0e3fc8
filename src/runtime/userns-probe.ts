/**
 * Whether a handler's runtime can run a container that joins a pinned user namespace by path, as a
 * user-namespaced pod's containers do: tried once, when the handler is opened, with a container of
 * the infra rootfs that prints catatonit's version and ends (~100 ms). Its other namespaces are
 * new, so owned by the joined one, which lets it mount /proc and /sys as a pod's containers will.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { errorMessage } from '../errors.js';
import { PASSABLE_DIR, PRIVATE_FILE } from '../file-modes.js';
import { withScratchDir } from '../mounts/scratch.js';
import { MountFlags, mountSyscall } from '../mounts/syscalls.js';
import { createPinnedUserns } from '../netns/userns.js';
import type { IdMapping } from '../oci/userns.js';
import { OCI_VERSION, type Spec } from '../oci/spec.js';
import { joinUserNamespace, type PodUserNamespace } from '../oci/userns.js';
import type { Runc } from './runc.js';

export interface UsernsProbeOptions {
  /** The infra rootfs (catatonit), reached through a bind in the scratch dir. */
  rootfs: string;
  /**
   * Where the scratch dirs go: every dir on the way must be passable, since runc sets the rootfs
   * up as the namespace's root, which is nobody on the host.
   */
  scratchParent: string;
  timeoutMs: number;
}

/** Where the probe's namespace maps root: any id does. */
const PROBE_MAPPING: IdMapping[] = [{ containerId: 0, hostId: 65536, length: 65536 }];

/** catatonit --version says this. */
const EXPECTED_OUTPUT = /catatonit/;

/** null when the runtime joined the namespace and ran the process; otherwise why not. */
export function probeUsernsJoin(runc: Runc, opts: UsernsProbeOptions): Promise<string | null> {
  return withScratchDir(
    { parent: opts.scratchParent, prefix: 'userns-', mode: PASSABLE_DIR, mounts: ['rootfs', 'userns'] },
    async (dir) => {
      try {
        const userns: PodUserNamespace = {
          path: join(dir, 'userns'),
          uids: PROBE_MAPPING,
          gids: PROBE_MAPPING,
        };
        await createPinnedUserns(userns, opts.timeoutMs);
        const rootfs = join(dir, 'rootfs');
        await mkdir(rootfs);
        await mountSyscall({
          source: opts.rootfs,
          target: rootfs,
          fstype: null,
          flags: MountFlags.BIND,
          data: null,
        });
        // The bind keeps its source mount's flags: a root dir on a noexec filesystem (a test's in
        // /run) would fail the probe, though containers' rootfs are overlays of their own. runc
        // cannot clear noexec in a container of its own user namespace (the flag is locked
        // there), so it is cleared here, as root.
        await mountSyscall({
          source: 'none',
          target: rootfs,
          fstype: null,
          flags:
            MountFlags.BIND | MountFlags.REMOUNT | MountFlags.RDONLY | MountFlags.NOSUID | MountFlags.NODEV,
          data: null,
        });
        await writeFile(join(dir, 'config.json'), JSON.stringify(probeSpec(rootfs, userns)), {
          mode: PRIVATE_FILE,
        });
        const said = await runc.runToEnd(`berth-userns-probe-${randomBytes(6).toString('hex')}`, dir);
        return EXPECTED_OUTPUT.test(said) ? null : `the probe container printed ${JSON.stringify(said)}`;
      } catch (err) {
        return errorMessage(err);
      }
    },
  );
}

function probeSpec(rootfs: string, userns: PodUserNamespace): Spec {
  const { namespace, uidMappings, gidMappings } = joinUserNamespace(userns);
  return {
    ociVersion: OCI_VERSION,
    process: {
      user: { uid: 0, gid: 0 },
      args: ['/catatonit', '--version'],
      cwd: '/',
      env: ['PATH=/'],
      noNewPrivileges: true,
    },
    root: { path: rootfs, readonly: true },
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      // runc makes the device nodes here: the namespace's root may not write the image's /dev.
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'mode=755', 'size=64k'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
    ],
    linux: {
      namespaces: [
        namespace,
        ...(['mount', 'pid', 'ipc', 'uts', 'network'] as const).map((type) => ({ type })),
      ],
      uidMappings,
      gidMappings,
    },
  };
}
