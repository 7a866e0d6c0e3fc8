import { createHash } from 'node:crypto';

import { InvalidDigestError } from './errors.js';

const SHA256 = /^sha256:([0-9a-f]{64})$/;

/** The hex part of a sha256 digest, which names files in the store. Throws InvalidDigestError. */
export function digestHex(digest: string): string {
  const hex = SHA256.exec(digest)?.[1];
  if (hex === undefined) throw new InvalidDigestError(digest);
  return hex;
}

export function isDigestHex(name: string): boolean {
  return /^[0-9a-f]{64}$/.test(name);
}

export function sha256Digest(bytes: Uint8Array): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}
