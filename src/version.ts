import { readFileSync } from 'node:fs';

/** The version in package.json, read once: dist/src/version.js and src/version.ts both sit two levels down. */
export const BERTH_VERSION: string = (() => {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as unknown;
  if (typeof pkg === 'object' && pkg !== null && 'version' in pkg && typeof pkg.version === 'string') {
    return pkg.version;
  }
  throw new Error('package.json has no version');
})();
