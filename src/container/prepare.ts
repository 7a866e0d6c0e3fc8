/**
 * Everything CreateContainer must learn from the host before the OCI spec can be written: the
 * user from the image's files, mount sources (idmapped volumes staged, src/container/volumes.ts),
 * devices (CDI's too), the seccomp profile, whether a Localhost AppArmor profile is loaded, the pod's files * (src/sandbox/files.ts writes them). The spec itself is built by the pure src/oci/container.ts.
 */
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { applyCdiEdits } from '../cdi/apply.js';
import type { CdiRegistry } from '../cdi/registry.js';
import type { CgroupManager } from '../cgroups/index.js';
import { requireLoadedProfile } from '../host/apparmor.js';
import type { HostFeatures } from '../host/features.js';
import type { ImageRuntimeConfig } from '../model/image.js';
import type { ContainerSpec } from '../model/container.js';
import type { SecurityProfile } from '../oci/container-input.js';
import type { Sandbox } from '../model/sandbox.js';
import { apparmorProfile, type AppArmorHost } from '../oci/apparmor.js';
import { allCapabilities, containerCapabilities } from '../oci/capabilities.js';
import { buildContainerSpec, processCwd } from '../oci/container.js';
import { deviceFromPath, hostDevices } from '../oci/devices.js';
import { checkImageEnv } from '../oci/environment.js';
import { resolveMounts } from '../oci/mounts.js';
import { clampOomScoreAdj } from '../oci/oom.js';
import { defaultSeccompProfile, loadSeccompProfile } from '../oci/seccomp.js';
import type { LinuxDevice, LinuxDeviceCgroup, Seccomp, Spec } from '../oci/spec.js';
import { makeDirInRoot } from '../oci/rootfs-files.js';
import { resolveUser, type ResolvedUser } from '../oci/user.js';
import { ensureHostsFile, HOSTNAME_FILE, RESOLV_CONF, SHM_DIR } from '../sandbox/files.js';
import { requireInfraRunning } from '../sandbox/infra.js';
import { namespacePins, podNamespacePaths } from '../sandbox/namespaces.js';
import type { PodUserNamespace } from '../oci/userns.js';
import { checkIdsMapped } from './userns.js';
import { stageIdmappedMounts } from './volumes.js';

export interface PrepareInput {
  containerId: string;
  spec: ContainerSpec;
  sandbox: Sandbox;
  image: { name: string; config: ImageRuntimeConfig };
  rootfsPath: string;
  cgroupsPath: string;
  targetPid: number | null;
  /** berth's own places, which a container's hostPath mounts must keep out of. */
  guard: { noCreateUnder: string[]; forbiddenSources: string[] };
  /** Which resources the host can apply. */
  cgroups: CgroupManager;
  host: Pick<HostFeatures, 'appArmor'>;
  cdi: CdiRegistry;
  /** Where the container's idmapped volumes are staged (imagestore/rootfs.ts volumesDir). */
  volumesDir: string;
  /** Bounds the making of a user namespace for a volume's mapping. */
  timeoutMs: number;
}

export interface PreparedSpec {
  spec: Spec;
  user: ResolvedUser;
  /** Things the operator should hear about (e.g. a host mount made shared). */
  notes: string[];
}

export async function prepareSpec(input: PrepareInput): Promise<PreparedSpec> {
  const { sandbox } = input;
  checkImageEnv(input.image.config.Env, input.image.name);
  const resources = input.cgroups.supportedResources(input.spec.resources, 'config.linux.resources');
  const spec = {
    ...input.spec,
    resources,
    // The unit's properties are the driver's to set, never the request's.
    annotations: input.cgroups.specAnnotations(input.spec.annotations, resources.unified),
  };
  // An infra's namespaces are joined through its /proc entries: a dead infra would fail late, and
  // a later process given its pid would have its namespaces joined.
  await requireInfraRunning(sandbox);
  const [user, , mounts, devices, hosts, shm, cdi] = await Promise.all([
    resolveUser(input.rootfsPath, spec.security, input.image.config.User),
    makeWorkingDir(input.rootfsPath, spec, input.image.config),
    resolveMounts(spec.mounts, input.guard),
    resolveDevices(spec),
    ensureHostsFile(sandbox),
    podShm(sandbox),
    input.cdi.resolve(spec.cdiDevices.map((name) => ({ name, field: 'config.CDI_devices' }))),
  ]);
  checkIdsMapped(spec.security, user, sandbox);
  const staged = await stageIdmappedMounts(
    mounts.mounts,
    spec.mounts.map((m) => m.idmap),
    { dir: input.volumesDir, podUserns: podUserNamespace(sandbox), timeoutMs: input.timeoutMs },
  );
  const capabilities = containerCapabilities(spec.security, await allCapabilities());
  const built = buildContainerSpec({
    containerId: input.containerId,
    sandboxId: sandbox.id,
    spec,
    sandbox: sandbox.spec,
    image: input.image,
    rootfsPath: input.rootfsPath,
    capabilities,
    user,
    podNamespaces: podNamespacePaths(sandbox),
    targetPid: input.targetPid,
    sandboxFiles: {
      resolvConf: join(sandbox.sandboxDir, RESOLV_CONF),
      hostname: join(sandbox.sandboxDir, HOSTNAME_FILE),
      hosts,
      ...shm,
    },
    cgroupsPath: input.cgroupsPath,
    // As Docker, Podman, containerd and CRI-O do on v2; v1 bind mounts the container's cgroups.
    cgroupNamespace: input.cgroups.host.version === 'v2',
    oomScoreAdj: clampOomScoreAdj(spec.resources.oomScoreAdj),
    seccomp: spec.security.privileged ? null : await seccompFor(spec.security.seccomp, capabilities.set),
    apparmorProfile: await appArmorFor(spec.security.apparmor, input.host.appArmor),
    devices: devices.devices,
    deviceRules: devices.rules,
    mounts: staged,
  });
  return { spec: await applyCdiEdits(built, cdi), user, notes: mounts.notes };
}

/** The pod's pinned user namespace and its mappings; null for a pod in the host's. */
function podUserNamespace(sandbox: Sandbox): PodUserNamespace | null {
  const path = namespacePins(sandbox).user;
  const mappings = sandbox.spec.userNamespace;
  return path === null || mappings === null ? null : { path, ...mappings };
}

/**
 * runc makes a missing cwd itself, but inside the container, where a symlink in the image that
 * leads to a directory not there yet makes it fail ("mkdir /work: file exists"). As CRI-O does,
 * the cwd is made here, resolved inside the rootfs: what runc then finds is a directory. A link
 * loop or a file in the way is the image's (or the config's) fault, and said so.
 */
async function makeWorkingDir(rootfs: string, spec: ContainerSpec, image: ImageRuntimeConfig): Promise<void> {
  const cwd = processCwd(spec, image);
  const from = spec.workingDir ? 'config.working_dir' : "the image's WorkingDir";
  await makeDirInRoot(rootfs, cwd, `working dir ${JSON.stringify(cwd)} (${from})`);
}

/**
 * The pod's shared /dev/shm. Containers are only created in READY sandboxes, whose shm is mounted
 * when the dir exists (pods from before berth mounted one have no dir): no mount table read here.
 */
async function podShm(sandbox: Sandbox): Promise<{ shm?: string }> {
  const path = join(sandbox.sandboxDir, SHM_DIR);
  return (await exists(path)) ? { shm: path } : {};
}

async function resolveDevices(
  spec: ContainerSpec,
): Promise<{ devices: LinuxDevice[]; rules: LinuxDeviceCgroup[] }> {
  if (spec.security.privileged) return { devices: await hostDevices(), rules: [] };
  const devices: LinuxDevice[] = [];
  const rules: LinuxDeviceCgroup[] = [];
  for (const [i, d] of spec.devices.entries()) {
    const found = await deviceFromPath(
      d.hostPath,
      d.containerPath,
      d.permissions,
      `config.devices[${i}].host_path`,
    );
    devices.push(...found.devices);
    rules.push(...found.rules);
  }
  return { devices, rules };
}

async function seccompFor(
  profile: SecurityProfile,
  capabilities: readonly string[],
): Promise<Seccomp | null> {
  switch (profile.kind) {
    case 'Unconfined':
      return null;
    case 'RuntimeDefault':
      return defaultSeccompProfile(capabilities);
    case 'Localhost':
      return loadSeccompProfile(profile.path);
  }
}

/**
 * A Localhost profile is looked for among the loaded ones even for a privileged container, which
 * runs unconfined: the request is refused the same way whatever else it asks.
 */
async function appArmorFor(profile: SecurityProfile, host: AppArmorHost): Promise<string | null> {
  const name = apparmorProfile(profile, host);
  if (profile.kind === 'Localhost' && name !== null) await requireLoadedProfile(name);
  return name;
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
