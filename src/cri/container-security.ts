/**
 * CreateContainer's security context: capabilities, user and groups, namespaces, masked paths and
 * the seccomp and AppArmor profiles, each refused naming its field.
 */
import { InvalidArgumentError } from '../errors.js';
import type { ContainerNamespaces, ContainerSecurity, ContainerUserNamespace } from '../model/container.js';
import type { SecurityProfile } from '../oci/container-input.js';
import type { Received } from './messages.js';
import { toContainerUserNamespace } from './userns.js';
import {
  boundedList,
  int64Id,
  namespaceMode,
  requireSafeName,
  supplementalGroups,
  supplementalGroupsPolicy,
} from './validate.js';
import { absolutePath, capabilityName, profileName, userName } from './validate-container.js';

/** Linux has 41 capabilities: a longer list can only repeat them. */
const MAX_CAPABILITIES = 64;
/** kubelet's default masked and read-only paths are a dozen. */
const MAX_PATHS = 1024;

const SECURITY = 'config.linux.security_context';
const NAMESPACE_OPTIONS = `${SECURITY}.namespace_options`;

export function toSecurity(sc: Received<'LinuxContainerSecurityContext'> | null): ContainerSecurity {
  const caps = sc?.capabilities ?? null;
  const capList = (name: string, list: string[] | undefined): string[] => {
    const field = `${SECURITY}.capabilities.${name}`;
    return boundedList(field, list ?? [], MAX_CAPABILITIES).map((c, i) =>
      capabilityName(`${field}[${i}]`, c),
    );
  };

  const runAsUser = sc?.run_as_user ? int64Id(`${SECURITY}.run_as_user.value`, sc.run_as_user.value) : null;
  const runAsUsername = userName(`${SECURITY}.run_as_username`, sc?.run_as_username ?? '');
  if (runAsUser !== null && runAsUsername) {
    throw new InvalidArgumentError(
      `${SECURITY}.run_as_username`,
      'must not be set together with run_as_user',
    );
  }
  // The CRI: "run_as_group should only be specified when run_as_user or run_as_username is
  // specified; otherwise, the runtime MUST error."
  if (sc?.run_as_group && runAsUser === null && !runAsUsername) {
    throw new InvalidArgumentError(`${SECURITY}.run_as_group`, 'requires run_as_user or run_as_username');
  }
  const runAsGroup = sc?.run_as_group
    ? int64Id(`${SECURITY}.run_as_group.value`, sc.run_as_group.value)
    : null;

  return {
    addCapabilities: capList('add_capabilities', caps?.add_capabilities),
    dropCapabilities: capList('drop_capabilities', caps?.drop_capabilities),
    addAmbientCapabilities: capList('add_ambient_capabilities', caps?.add_ambient_capabilities),
    privileged: sc?.privileged ?? false,
    namespaces: toNamespaces(sc?.namespace_options ?? null),
    runAsUser,
    runAsUsername,
    runAsGroup,
    readonlyRootfs: sc?.readonly_rootfs ?? false,
    supplementalGroups: supplementalGroups(`${SECURITY}.supplemental_groups`, sc?.supplemental_groups ?? []),
    // kubelet copies the pod's policy into every container's context: the container's decides.
    supplementalGroupsPolicy: supplementalGroupsPolicy(
      `${SECURITY}.supplemental_groups_policy`,
      sc?.supplemental_groups_policy ?? 'Merge',
    ),
    noNewPrivs: sc?.no_new_privs ?? false,
    maskedPaths: pathList(`${SECURITY}.masked_paths`, sc?.masked_paths ?? []),
    readonlyPaths: pathList(`${SECURITY}.readonly_paths`, sc?.readonly_paths ?? []),
    seccomp: toProfile('seccomp', sc?.seccomp ?? null, sc?.seccomp_profile_path ?? ''),
    apparmor: toProfile('apparmor', sc?.apparmor ?? null, sc?.apparmor_profile ?? ''),
  };
}

/**
 * proto3 cannot tell an empty repeated field from an absent one, so [] means "the runtime's
 * defaults" (null), as in containerd; the domain clears them for privileged containers.
 */
function pathList(field: string, paths: string[]): string[] | null {
  if (paths.length === 0) return null;
  return boundedList(field, paths, MAX_PATHS).map((p, i) => absolutePath(`${field}[${i}]`, p, true));
}

/** The user namespace a CreateContainer asks for (see ContainerUserNamespace). */
export function containerUserNamespace(req: Received<'CreateContainerRequest'>): ContainerUserNamespace {
  return toContainerUserNamespace(
    NAMESPACE_OPTIONS,
    req.config?.linux?.security_context?.namespace_options?.userns_options,
  );
}

function toNamespaces(options: Received<'NamespaceOption'> | null): ContainerNamespaces {
  const base = NAMESPACE_OPTIONS;
  const mode = (name: 'network' | 'pid' | 'ipc') => {
    const m = namespaceMode(`${base}.${name}`, options?.[name] ?? '');
    // kubelet only targets another container's pid namespace (ephemeral debug containers).
    if (m === 'TARGET' && name !== 'pid') {
      throw new InvalidArgumentError(`${base}.${name}`, 'TARGET is only valid for the pid namespace');
    }
    return m;
  };
  const pid = mode('pid');
  // Read here so that a malformed one fails with the rest of the config; the CRI handler reads it
  // again for the pod's check (containerUserNamespace).
  toContainerUserNamespace(base, options?.userns_options);
  return {
    network: mode('network'),
    pid,
    ipc: mode('ipc'),
    targetId: pid === 'TARGET' ? requireSafeName(`${base}.target_id`, options?.target_id) : '',
  };
}

type ProfileKind = 'seccomp' | 'apparmor';

const LOCALHOST_PREFIX = 'localhost/';

/**
 * The SecurityProfile message wins over the deprecated string when both are sent. With neither:
 * seccomp is Unconfined (the CRI: "Default: '', which is identical with unconfined"; containerd
 * applies no filter; kubelet always sends one, RuntimeDefault when SeccompDefault is on) and
 * AppArmor is RuntimeDefault (the CRI: runtime/default is "equivalent to not specifying a profile";
 * containerd, like berth, applies its default profile when the host has AppArmor).
 */
function toProfile(
  kind: ProfileKind,
  profile: Received<'SecurityProfile'> | null,
  legacy: string,
): SecurityProfile {
  if (profile) return fromSecurityProfile(kind, `${SECURITY}.${kind}`, profile);
  const legacyField = kind === 'seccomp' ? 'seccomp_profile_path' : 'apparmor_profile';
  const fromLegacy = fromLegacyProfile(kind, `${SECURITY}.${legacyField}`, legacy);
  if (fromLegacy) return fromLegacy;
  return kind === 'seccomp' ? { kind: 'Unconfined' } : { kind: 'RuntimeDefault' };
}

function fromSecurityProfile(
  kind: ProfileKind,
  field: string,
  profile: Received<'SecurityProfile'>,
): SecurityProfile {
  const type = profile.profile_type || 'RuntimeDefault';
  switch (type) {
    case 'RuntimeDefault':
    case 'Unconfined':
      if (profile.localhost_ref) {
        throw new InvalidArgumentError(
          `${field}.localhost_ref`,
          'must only be set with profile_type Localhost',
        );
      }
      return { kind: type };
    case 'Localhost':
      return { kind: 'Localhost', path: localhostRef(kind, `${field}.localhost_ref`, profile.localhost_ref) };
    default:
      throw new InvalidArgumentError(`${field}.profile_type`, `unknown profile type "${type}"`);
  }
}

/** The deprecated strings: "", "unconfined", "runtime/default", "docker/default", "localhost/<ref>". */
function fromLegacyProfile(kind: ProfileKind, field: string, value: string): SecurityProfile | null {
  if (!value) return null;
  if (value === 'unconfined') return { kind: 'Unconfined' };
  if (value === 'runtime/default' || value === 'docker/default') return { kind: 'RuntimeDefault' };
  if (value.startsWith(LOCALHOST_PREFIX))
    return { kind: 'Localhost', path: localhostRef(kind, field, value) };
  throw new InvalidArgumentError(
    field,
    `unknown profile "${value}" (expected runtime/default, unconfined or localhost/<profile>)`,
  );
}

/**
 * Seccomp: an absolute path to a JSON profile on the host (kubelet resolves it under its seccomp
 * root). AppArmor: the name of a loaded profile. Either may still carry the old "localhost/" prefix.
 */
function localhostRef(kind: ProfileKind, field: string, ref: string): string {
  const value = ref.startsWith(LOCALHOST_PREFIX) ? ref.slice(LOCALHOST_PREFIX.length) : ref;
  return kind === 'seccomp' ? absolutePath(field, value, false) : profileName(field, value);
}
