/**
 * The checkpoint archive's layout, the one CRI-O writes and checkpointctl reads, so that other
 * tools can open berth's archives and berth theirs: CheckpointContainer writes it
 * (checkpoint/service.ts), a restore reads it (container/checkpoint-archive.ts). An uncompressed
 * tar with, at its root:
 *
 *   config.dump      the container's identity and image (ConfigDump)
 *   spec.dump        its OCI config.json, as runc ran it
 *   checkpoint/      criu's images
 *   rootfs-diff.tar  the files its writable layer added or changed
 *   deleted.files    the image files it deleted, as a JSON array
 *   dump.log         criu's log of the dump
 *   container.log    its CRI log, when it has one
 */
export const ARCHIVE_FILES = {
  config: 'config.dump',
  spec: 'spec.dump',
  checkpoint: 'checkpoint',
  rootfsDiff: 'rootfs-diff.tar',
  deleted: 'deleted.files',
  dumpLog: 'dump.log',
  containerLog: 'container.log',
} as const;

/** checkpointctl's ContainerConfig, with its key names. */
export interface ConfigDump {
  id: string;
  name: string;
  /** The image as the container's request named it. */
  rootfsImage: string;
  /** The image id, "sha256:…". */
  rootfsImageRef: string;
  /** The image's name (a repo tag or digest), or what the request named when the image has none. */
  rootfsImageName: string;
  /** The runtime handler's name. */
  runtime: string;
  /** RFC 3339. */
  createdTime: string;
  checkpointedTime: string;
}
