/** The resources a container asks for; a pod asks in the same form (its resources and overhead). */
import type { ResourceLimits } from '../oci/container-input.js';

/** Zero means "not set" for every number, as in CRI's LinuxContainerResources. */
export interface ContainerResources extends ResourceLimits {
  /** Before clamping to what this host allows. */
  oomScoreAdj: number;
}
