/**
 * The AppArmor profile a container's process gets. berth ships and loads no AppArmor profile of
 * its own yet, so RuntimeDefault applies none: on a host with AppArmor enabled such a container
 * runs without AppArmor confinement (containerd and CRI-O would apply their default profile;
 * berthd says so at start-up). A Localhost profile is one the host has loaded, and runc applies
 * it (failing the create when it is not loaded). Without AppArmor on the host, RuntimeDefault and
 * Unconfined both mean no profile (the CRI: runtime/default "is equivalent to not specifying a
 * profile", which is also what berth reads from a request naming none), while a named profile is
 * refused rather than silently not applied, as containerd does.
 */
import { InvalidArgumentError } from '../errors.js';
import type { SecurityProfile } from './container-input.js';

/** The profile name for the spec's process.apparmorProfile, or null for none. */
export function apparmorProfile(profile: SecurityProfile, hostHasAppArmor: boolean): string | null {
  if (profile.kind !== 'Localhost') return null;
  if (!hostHasAppArmor) {
    throw new InvalidArgumentError(
      'config.linux.security_context.apparmor.localhost_ref',
      'AppArmor is not enabled on this host',
    );
  }
  return profile.path;
}
