/**
 * A container's CDI edits applied to its OCI spec, as the CDI spec describes them: env entries
 * replace the image's and the config's of the same name; device nodes join the spec's devices
 * (replacing one at the same path) with a cgroup rule allowing them; mounts are added and all
 * mounts ordered parents first; hooks join the spec's; extra groups join the process's. Device
 * numbers and modes the spec leaves out are read from the host's node. A bind mount of one of
 * berth's own files is refused as a CRI mount of it is.
 */
import { realpath } from 'node:fs/promises';
import { deviceFromPath } from '../oci/devices.js';
import { refuseOwnSource } from '../oci/mounts.js';
import type { LinuxDevice, LinuxDeviceCgroup, Mount, Spec } from '../oci/spec.js';
import type { CdiEdits } from './registry.js';
import type { CdiDeviceNode } from './spec.js';

/** `forbiddenSources`: berth's own files (real paths), as the CRI mounts' guard has them. */
export async function applyCdiEdits(
  spec: Spec,
  { parts }: CdiEdits,
  forbiddenSources: readonly string[],
): Promise<Spec> {
  if (parts.length === 0) return spec;
  const process = spec.process ? { ...spec.process, user: { ...spec.process.user } } : undefined;
  const linux = { ...spec.linux, resources: { ...spec.linux?.resources } };
  let env = process?.env ?? [];
  let devices = linux.devices ?? [];
  const rules = linux.resources.devices ?? [];
  const mounts = [...(spec.mounts ?? [])];
  const hooks = { ...spec.hooks };
  const gids = process?.user.additionalGids ?? [];
  for (const { source, edits } of parts) {
    env = edits.env.reduce(setEnv, env);
    for (const [i, node] of edits.deviceNodes.entries()) {
      const found = await deviceNode(node, `CDI device ${source}: deviceNodes[${i}].hostPath`);
      devices = [...devices.filter((d) => d.path !== found.device.path), found.device];
      if (found.rule) rules.push(found.rule);
    }
    for (const [i, m] of edits.mounts.entries()) {
      const mount = toMount(m);
      await refuseOwnBind(mount, `CDI device ${source}: mounts[${i}].hostPath`, forbiddenSources);
      mounts.push(mount);
    }
    for (const hook of edits.hooks) {
      hooks[hook.hookName] = [
        ...(hooks[hook.hookName] ?? []),
        {
          path: hook.path,
          args: hook.args,
          env: hook.env,
          ...(hook.timeout === undefined ? {} : { timeout: hook.timeout }),
        },
      ];
    }
    for (const gid of edits.additionalGids) if (!gids.includes(gid)) gids.push(gid);
  }
  linux.devices = devices;
  linux.resources.devices = rules;
  return {
    ...spec,
    ...(process ? { process: { ...process, env, user: { ...process.user, additionalGids: gids } } } : {}),
    linux,
    mounts: parentsFirst(mounts),
    ...(Object.keys(hooks).length > 0 ? { hooks } : {}),
  };
}

function setEnv(env: string[], entry: string): string[] {
  const name = entry.slice(0, entry.indexOf('=') + 1);
  return [...env.filter((e) => !e.startsWith(name)), entry];
}

async function deviceNode(
  node: CdiDeviceNode,
  field: string,
): Promise<{ device: LinuxDevice; rule: LinuxDeviceCgroup | null }> {
  const given = { type: node.type, major: node.major, minor: node.minor };
  const complete = node.type === 'p' || (node.type && node.major !== undefined && node.minor !== undefined);
  const host = complete ? null : await deviceFromPath(node.hostPath, node.path, node.permissions, field);
  const fromHost = host?.devices[0];
  const device: LinuxDevice = {
    path: node.path,
    type: given.type ?? fromHost?.type ?? 'c',
    major: given.major ?? fromHost?.major ?? 0,
    minor: given.minor ?? fromHost?.minor ?? 0,
    ...pick(fromHost, node),
  };
  // A fifo has no device numbers for the device cgroup to allow.
  const rule: LinuxDeviceCgroup | null =
    device.type === 'p'
      ? null
      : {
          allow: true,
          type: device.type === 'u' ? 'c' : device.type,
          major: device.major,
          minor: device.minor,
          access: node.permissions,
        };
  return { device, rule };
}

/** fileMode, uid and gid as the spec gives them, else as the host's node has them. */
function pick(host: LinuxDevice | undefined, node: CdiDeviceNode): Partial<LinuxDevice> {
  const out: Partial<LinuxDevice> = {};
  for (const key of ['fileMode', 'uid', 'gid'] as const) {
    const value = node[key] ?? host?.[key];
    if (value !== undefined) out[key] = value;
  }
  return out;
}

function toMount(m: { hostPath: string; containerPath: string; type?: string; options: string[] }): Mount {
  const type = m.type ?? 'bind';
  const needsBind = type === 'bind' && !m.options.includes('bind') && !m.options.includes('rbind');
  return {
    destination: m.containerPath,
    type,
    source: m.hostPath,
    options: needsBind ? [...m.options, 'bind'] : m.options,
  };
}

/** A bind mount's source that resolves to one of berth's own files is refused. */
async function refuseOwnBind(mount: Mount, field: string, forbidden: readonly string[]): Promise<void> {
  const options = mount.options ?? [];
  if (mount.source === undefined || !(options.includes('bind') || options.includes('rbind'))) return;
  // A source that is missing fails the create at runc, naming it.
  const real = await realpath(mount.source).catch(() => null);
  if (real !== null) refuseOwnSource(field, mount.source, real, forbidden);
}

/** Stable: mounts of equal depth keep their order, and a parent always precedes what is mounted in it. */
function parentsFirst(mounts: Mount[]): Mount[] {
  const depth = (m: Mount): number => m.destination.split('/').filter(Boolean).length;
  return mounts
    .map((m, i) => ({ m, i }))
    .sort((a, b) => depth(a.m) - depth(b.m) || a.i - b.i)
    .map(({ m }) => m);
}
