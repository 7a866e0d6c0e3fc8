/** Linux namespaces as tests compare them. */
import { stat } from 'node:fs/promises';

/**
 * The namespace's inode number, following a pin or a /proc/PID/ns/* link to the nsfs inode. Two
 * paths refer to the same namespace exactly when these are equal (nsfs has one device).
 */
export async function nsInode(path: string): Promise<bigint> {
  return (await stat(path, { bigint: true })).ino;
}
