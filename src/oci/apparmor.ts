/**
 * The AppArmor profile a container's process gets. Where the host has AppArmor, RuntimeDefault
 * (also what berth reads from a request naming no profile, as containerd treats it) is berth's own
 * default profile, which berthd loads at start-up (host/apparmor.ts); Localhost is a profile the
 * host has loaded, by name; Unconfined is none. Privileged containers run unconfined whatever
 * they ask (oci/container.ts leaves the profile out), and so does the pod's infra process, as
 * containerd leaves its sandbox container: the CRI gives a pod no AppArmor profile of its own.
 * An exec'd process runs under the container's profile, which it takes from the container's spec.
 *
 * Without AppArmor on the host, RuntimeDefault and Unconfined both mean no profile (the CRI:
 * runtime/default "is equivalent to not specifying a profile"), while a named profile is refused
 * rather than silently not applied, as containerd does.
 */
import { FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import type { SecurityProfile } from './container-input.js';

/** Where a Localhost profile is named, whichever of the two request fields carried it. */
export const APPARMOR_LOCALHOST_FIELD = 'config.linux.security_context.apparmor.localhost_ref';

export interface AppArmorHost {
  enabled: boolean;
  /** The profile RuntimeDefault means, once loaded; null where AppArmor is off. */
  defaultProfile: string | null;
  /** Why it is off though the kernel module is on (host/features.ts); absent otherwise. */
  reason?: string;
}

/** The profile name for the spec's process.apparmorProfile, or null for none. */
export function apparmorProfile(profile: SecurityProfile, host: AppArmorHost): string | null {
  switch (profile.kind) {
    case 'Unconfined':
      return null;
    case 'RuntimeDefault':
      if (!host.enabled) return null;
      // Start-up loads it or fails; a host without it must not pass for confined.
      if (host.defaultProfile === null) {
        throw new FailedPreconditionError("AppArmor is enabled but berth's default profile is not loaded");
      }
      return host.defaultProfile;
    case 'Localhost':
      if (!host.enabled) {
        throw new InvalidArgumentError(APPARMOR_LOCALHOST_FIELD, 'AppArmor is not enabled on this host');
      }
      return profile.path;
  }
}
