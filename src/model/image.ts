/**
 * An image's config blob (OCI image-spec and Docker schema 2), as far as berth reads it. The image
 * record (src/store) carries it parsed, so that containers and image status read fields, not JSON.
 */

/** The runtime part of an image config (`config` in the JSON). */
export interface ImageRuntimeConfig {
  User?: string;
  Env?: string[];
  Entrypoint?: string[] | null;
  Cmd?: string[] | null;
  WorkingDir?: string;
  StopSignal?: string;
  Labels?: Record<string, string> | null;
  ExposedPorts?: Record<string, unknown>;
  Volumes?: Record<string, unknown>;
}

export interface ImageConfig {
  architecture: string;
  os: string;
  variant?: string;
  created?: string;
  config?: ImageRuntimeConfig;
  rootfs: { type: string; diff_ids: string[] };
}
