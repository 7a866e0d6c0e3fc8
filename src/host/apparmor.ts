/**
 * AppArmor on the host: loading berth's default profile at start-up and asking which profiles the
 * kernel has loaded. The profile is replaced on every start (`apparmor_parser --replace`), which
 * loads it when missing and brings a changed text into force, containers already under it
 * included, for about 0.2 s of parsing: no record of what was loaded before can go stale, and a
 * profile removed by hand (apparmor_parser -R) is back at the next start. berthd does not start
 * when the profile cannot be loaded: RuntimeDefault containers would otherwise run unconfined
 * while kubelet believes them confined.
 */
import { readFile } from 'node:fs/promises';
import { FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import { findProgram, run } from '../exec.js';
import { APPARMOR_LOCALHOST_FIELD, type AppArmorHost } from '../oci/apparmor.js';
import { DEFAULT_APPARMOR_PROFILE, defaultAppArmorProfile } from '../oci/apparmor-profile.js';

/** One line per loaded profile: `name (mode)`. */
const LOADED_PROFILES = '/sys/kernel/security/apparmor/profiles';

/** Loads berth's default profile where AppArmor is enabled; throws, saying why, when it cannot. */
export async function setUpAppArmor(
  probed: AppArmorHost,
  opts: { timeoutMs: number },
): Promise<AppArmorHost> {
  const { enabled } = probed;
  if (!enabled) return probed;
  let parser: string;
  try {
    parser = await findProgram('apparmor_parser');
  } catch {
    throw new FailedPreconditionError(
      `AppArmor is enabled, but apparmor_parser is not installed (package apparmor): berth cannot load its default profile "${DEFAULT_APPARMOR_PROFILE}"`,
    );
  }
  try {
    // The text on stdin: nothing is written to the host's /etc/apparmor.d, or left behind.
    await run(parser, ['--replace'], { timeoutMs: opts.timeoutMs, input: defaultAppArmorProfile() });
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new FailedPreconditionError(
      `AppArmor is enabled, but berth's default profile "${DEFAULT_APPARMOR_PROFILE}" did not load: ${why}`,
    );
  }
  if (!(await loadedProfiles()).has(DEFAULT_APPARMOR_PROFILE)) {
    throw new FailedPreconditionError(
      `apparmor_parser loaded "${DEFAULT_APPARMOR_PROFILE}", but ${LOADED_PROFILES} does not list it`,
    );
  }
  return { enabled, defaultProfile: DEFAULT_APPARMOR_PROFILE };
}

/**
 * A Localhost profile must be loaded: runc would fail the create with a message naming neither
 * the field nor the profile.
 */
export async function requireLoadedProfile(name: string): Promise<void> {
  if (!(await loadedProfiles()).has(name)) {
    throw new InvalidArgumentError(
      APPARMOR_LOCALHOST_FIELD,
      `AppArmor profile "${name}" is not loaded on this host (see ${LOADED_PROFILES})`,
    );
  }
}

async function loadedProfiles(): Promise<Set<string>> {
  const text = await readFile(LOADED_PROFILES, 'utf8').catch(() => '');
  return new Set(text.split('\n').flatMap((line) => profileNameOf(line) ?? []));
}

/** "name (enforce)" → "name"; a name may itself hold spaces and parentheses. */
export function profileNameOf(line: string): string | null {
  return /^(.+) \([a-z_]+\)$/.exec(line)?.[1] ?? null;
}
