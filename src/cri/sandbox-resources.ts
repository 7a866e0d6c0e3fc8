/**
 * A pod's resources as a whole: LinuxPodSandboxConfig's resources and overhead at RunPodSandbox,
 * and UpdatePodSandboxResources, which kubelet sends on an in-place resize of a pod with
 * pod-level resources (best-effort: kubelet falls back when a runtime answers UNIMPLEMENTED).
 */
import { InvalidArgumentError } from '../errors.js';
import type { ContainerResources } from '../model/container.js';
import type { PodResources } from '../model/sandbox.js';
import type { SandboxService } from '../sandbox/service.js';
import { toResources } from './container-spec.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import type { Received } from './messages.js';
import { requireId } from './validate.js';

export function sandboxResourcesHandlers(sandboxes: SandboxService) {
  return {
    UpdatePodSandboxResources: async (req) => {
      const id = requireId('pod_sandbox_id', req.pod_sandbox_id);
      const asked = toPodResources('', req.resources, req.overhead) ?? { resources: null, overhead: null };
      await sandboxes.updateResources(id, asked);
      return {};
    },
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}

/**
 * The pod's resources and overhead, each checked as a container's are (`prefix` leads the field
 * names in errors); null when neither was sent.
 */
export function toPodResources(
  prefix: string,
  resources: Received<'LinuxContainerResources'> | null | undefined,
  overhead: Received<'LinuxContainerResources'> | null | undefined,
): PodResources | null {
  if (!resources && !overhead) return null;
  return {
    resources: resources ? withPeriod(`${prefix}resources`, resources) : null,
    overhead: overhead ? withPeriod(`${prefix}overhead`, overhead) : null,
  };
}

/**
 * A container's quota without a period gets runc's default one; a pod's quotas are added up
 * over one period, and kubelet always sends the period it meant.
 */
function withPeriod(field: string, r: Received<'LinuxContainerResources'>): ContainerResources {
  const limits = toResources(field, r);
  if (limits.cpuQuota > 0 && limits.cpuPeriod === 0) {
    throw new InvalidArgumentError(`${field}.cpu_period`, `is required with cpu_quota (${limits.cpuQuota})`);
  }
  return limits;
}
