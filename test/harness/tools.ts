/** The CRI tools a developer's machine and CI have beside the project (../shared/tools), if any. */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * `name` from $`envVar`, else from the shared tools beside the project; null where there is neither
 * (a user's clone has no ../shared, and the suites that need the tool skip saying so).
 */
export function sharedTool(envVar: string, name: string): string | null {
  const candidates = [
    process.env[envVar],
    fileURLToPath(new URL(`../../../../shared/tools/${name}`, import.meta.url)),
  ];
  return candidates.find((c): c is string => Boolean(c) && existsSync(c as string)) ?? null;
}

/** The `skip` reason of a suite that needs the tool. */
export function toolSkip(tool: string | null, envVar: string, name: string): string | false {
  return tool ? false : `${name} not found: set $${envVar} or provide ../shared/tools/${name}`;
}
