/**
 * Image references as the kubelet and crictl write them, normalised the way Docker's
 * distribution/reference does, so that `busybox`, `docker.io/busybox` and
 * `index.docker.io/library/busybox:latest` all name the same image.
 */
import { InvalidArgumentError } from '../errors.js';

export interface ImageReference {
  /** Registry host, with port when given: `docker.io`, `registry.k8s.io`, `127.0.0.1:5000`, `[::1]:5000`. */
  registry: string;
  /** Path inside the registry: `library/busybox`. */
  repository: string;
  /** `latest` when neither a tag nor a digest was given; null for a digest-only reference. */
  tag: string | null;
  /** `sha256:<hex>`. When both are given the digest is what gets pulled; the tag only names it. */
  digest: string | null;
}

export const DOCKER_HUB = 'docker.io';
const LEGACY_DOCKER_HUB = 'index.docker.io';
const OFFICIAL_NAMESPACE = 'library';
const DEFAULT_TAG = 'latest';
/** distribution caps the whole name (registry/repository) at 255 characters. */
const MAX_NAME_LENGTH = 255;

const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
// Brackets only around plain IPv6: no zone ids, no embedded IPv4 (as distribution).
const DOMAIN_RE = new RegExp(
  `^(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?$`,
);
// One period, one or two underscores, or any number of dashes between lowercase alphanumerics.
const PATH_COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG_RE = /^\w[\w.-]{0,127}$/;
const IMAGE_ID_RE = /^[a-f0-9]{64}$/;
/** Digest algorithms berth can verify, with the length of their hex encoding. */
const DIGEST_HEX_LENGTH: Readonly<Record<string, number>> = { sha256: 64, sha512: 128 };

/** Whether `s` is a registry host as references write it: `docker.io`, `127.0.0.1:5000`, `[::1]:5000`. */
export function isRegistryHost(s: string): boolean {
  return DOMAIN_RE.test(s);
}

/** Whether `s` is a digest berth can verify: `sha256:<64 lowercase hex>` (or sha512). */
export function isDigest(s: string): boolean {
  return digestProblem(s) === null;
}

/**
 * Parses and normalises an image reference. Throws InvalidArgumentError(field, ...) that says what
 * is wrong, e.g. `image: repository name "library/Busybox" must be lowercase`.
 */
export function parseReference(s: string, field = 'image'): ImageReference {
  const fail = (problem: string): never => {
    throw new InvalidArgumentError(field, problem);
  };
  if (s === '') fail('image reference is empty');
  if (s.trim() !== s) fail(`image reference "${s}" has leading or trailing whitespace`);
  // A bare 64-hex string is an image id, and would otherwise parse as docker.io/library/<hex>.
  if (IMAGE_ID_RE.test(s)) fail(`"${s}" is an image id, not a reference; prefix it with "sha256:"`);
  if (isDigest(s)) fail(`"${s}" is a bare digest, not a reference; write <name>@${s}`);

  let rest = s;
  let digest: string | null = null;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    const problem = digestProblem(digest);
    if (problem !== null) fail(`reference "${s}": ${problem}`);
  }

  // A tag is a ":" after the last "/": any earlier ":" is the registry's port.
  let tag: string | null = null;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG_RE.test(tag)) {
      fail(`reference "${s}": invalid tag "${tag}" (letters, digits, "_", "." and "-", at most 128)`);
    }
  }

  const { registry, repository } = splitRegistry(rest);
  if (repository.toLowerCase() !== repository) {
    fail(`reference "${s}": repository name "${repository}" must be lowercase`);
  }
  if (!DOMAIN_RE.test(registry)) fail(`reference "${s}": invalid registry host "${registry}"`);
  if (repository === '') fail(`reference "${s}": repository name is empty`);
  for (const component of repository.split('/')) {
    if (!PATH_COMPONENT_RE.test(component)) {
      fail(
        `reference "${s}": invalid repository name "${repository}" (path components are lowercase ` +
          'letters and digits, separated by ".", "_", "__" or dashes)',
      );
    }
  }
  const name = `${registry}/${repository}`;
  if (name.length > MAX_NAME_LENGTH) {
    fail(`reference "${s}": name is longer than ${MAX_NAME_LENGTH} characters`);
  }

  if (tag === null && digest === null) tag = DEFAULT_TAG;
  return { registry, repository, tag, digest };
}

/**
 * Splits `name` (no tag, no digest) into registry and repository. The first path element is a
 * registry only if it looks like a host: `localhost`, or contains "." or ":", or has uppercase
 * letters (repositories can't). Anything else is a Docker Hub repository.
 */
function splitRegistry(name: string): { registry: string; repository: string } {
  const slash = name.indexOf('/');
  if (slash < 0) return { registry: DOCKER_HUB, repository: `${OFFICIAL_NAMESPACE}/${name}` };
  const first = name.slice(0, slash);
  const remainder = name.slice(slash + 1);
  let registry: string;
  let repository: string;
  if (first === 'localhost' || /[.:]/.test(first) || first.toLowerCase() !== first) {
    registry = first === LEGACY_DOCKER_HUB ? DOCKER_HUB : first;
    repository = remainder;
  } else {
    registry = DOCKER_HUB;
    repository = name;
  }
  // Official images live under library/ on Docker Hub only: docker.io/busybox is library/busybox.
  if (registry === DOCKER_HUB && !repository.includes('/') && repository !== '') {
    repository = `${OFFICIAL_NAMESPACE}/${repository}`;
  }
  return { registry, repository };
}

function digestProblem(digest: string): string | null {
  const colon = digest.indexOf(':');
  if (colon < 0) return `invalid digest "${digest}" (expected <algorithm>:<hex>)`;
  const algorithm = digest.slice(0, colon);
  const hex = digest.slice(colon + 1);
  const length = DIGEST_HEX_LENGTH[algorithm];
  if (length === undefined) return `unsupported digest algorithm "${algorithm}" (sha256 or sha512)`;
  if (hex.length !== length || !/^[a-f0-9]+$/.test(hex)) {
    return `invalid ${algorithm} digest "${digest}" (expected ${length} lowercase hex digits)`;
  }
  return null;
}

/** `registry/repository`, e.g. `docker.io/library/busybox`. */
export function referenceName(r: ImageReference): string {
  return `${r.registry}/${r.repository}`;
}

/** The full form: `docker.io/library/busybox:latest`, `...@sha256:...` or `...:1@sha256:...`. */
export function formatReference(r: ImageReference): string {
  return `${referenceName(r)}${r.tag !== null ? `:${r.tag}` : ''}${r.digest !== null ? `@${r.digest}` : ''}`;
}

/** The repo tag an image is listed under (`docker.io/library/busybox:latest`); null without a tag. */
export function repoTag(r: ImageReference): string | null {
  return r.tag === null ? null : `${referenceName(r)}:${r.tag}`;
}

/** The repo digest of a pulled image: the name with the manifest's digest, never the tag. */
export function repoDigest(r: ImageReference, manifestDigest: string): string {
  return `${referenceName(r)}@${manifestDigest}`;
}
