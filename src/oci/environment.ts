import { FailedPreconditionError } from '../errors.js';

/**
 * A container's environment, from the config and from the image alike: far more than any real
 * one, and below what execve itself takes (all of argv and envp share a quarter of the stack
 * limit, 2 MiB by default).
 */
export const MAX_ENV_ENTRIES = 16_384;
export const MAX_ENV_BYTES = 1024 * 1024;

/**
 * The image's Env within those bounds, or a FailedPreconditionError naming `image`: a config of a
 * million entries made runc take longer than its deadline, and the process could never be
 * exec'd with them anyway.
 */
export function checkImageEnv(env: readonly string[] | null | undefined, image: string): void {
  if (!env) return;
  if (env.length > MAX_ENV_ENTRIES) {
    throw new FailedPreconditionError(
      `image ${image}: its Env has ${env.length} entries, more than the ${MAX_ENV_ENTRIES} a container may have`,
    );
  }
  let bytes = 0;
  for (const entry of env) {
    // Each entry as execve copies it: its bytes and a NUL.
    bytes += Buffer.byteLength(entry) + 1;
    if (bytes > MAX_ENV_BYTES) {
      throw new FailedPreconditionError(
        `image ${image}: its Env holds more than the ${MAX_ENV_BYTES / 1024} KiB a container may have`,
      );
    }
  }
}
