import { BerthError, InvalidArgumentError, errorMessage } from '../errors.js';

/** Not a digest berth can store: only `sha256:<64 lowercase hex>`, which also keeps paths inside the store. */
export class InvalidDigestError extends InvalidArgumentError {
  override name = 'InvalidDigestError';
  constructor(readonly digest: string) {
    super('digest', `${JSON.stringify(digest)} is not sha256:<64 lowercase hex>`);
  }
}

/** The bytes received hash to something else than the descriptor promised. */
export class DigestMismatchError extends BerthError {
  override name = 'DigestMismatchError';
  constructor(
    readonly expected: string,
    readonly actual: string,
  ) {
    super(`content digest mismatch: expected ${expected}, got ${actual}`);
  }
}

/** The bytes received are more or fewer than the descriptor promised. */
export class SizeMismatchError extends BerthError {
  override name = 'SizeMismatchError';
  constructor(
    readonly digest: string,
    readonly expected: number,
    /** Bytes seen; when `exceeded`, reading stopped there, so the source had at least this many. */
    readonly actual: number,
    readonly exceeded: boolean,
  ) {
    super(
      `content size mismatch for ${digest}: expected ${expected} bytes, got ${exceeded ? 'more than ' + String(expected) : actual}`,
    );
  }
}

/** A container root filesystem could not be set up or torn down. */
export class RootfsError extends BerthError {
  override name = 'RootfsError';
  constructor(
    readonly containerId: string,
    what: string,
    override readonly cause: unknown,
  ) {
    super(`${what} rootfs of container ${containerId}: ${errorMessage(cause)}`);
  }
}
