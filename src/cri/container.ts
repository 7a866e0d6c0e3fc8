/** The container RPCs: each translates its request (container-spec.ts) and its answer (container-status.ts). */
import { DeadlineExceededError, InvalidArgumentError } from '../errors.js';
import type { ContainerService } from '../container/service.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import { jsonInfo } from './messages.js';
import { toCmd, toContainerSpec, toResources } from './container-spec.js';
import { toListFilter, toStatsFilter, toWireContainer, toWireContainerStatus } from './container-status.js';
import { containerUserNamespace } from './container-security.js';
import { toWireStats } from './stats.js';
import { requireId } from './validate.js';
import { seconds } from './validate-container.js';

export function containerHandlers({ lifecycle, exec, stats, views }: ContainerService) {
  return {
    CreateContainer: async (req) => {
      const spec = toContainerSpec(req);
      return { container_id: await lifecycle.create(req.pod_sandbox_id, spec, containerUserNamespace(req)) };
    },
    StartContainer: async (req) => {
      await lifecycle.start(requireId('container_id', req.container_id));
      return {};
    },
    StopContainer: async (req) => {
      const id = requireId('container_id', req.container_id);
      await lifecycle.stop(id, seconds('timeout', req.timeout));
      return {};
    },
    RemoveContainer: async (req) => {
      await lifecycle.remove(requireId('container_id', req.container_id));
      return {};
    },
    ListContainers: async (req) => ({
      containers: views.list(toListFilter(req)).map(toWireContainer),
    }),
    ContainerStatus: async (req) => {
      const { view, info } = await views.status(requireId('container_id', req.container_id), req.verbose);
      return {
        status: toWireContainerStatus(view),
        info: jsonInfo('info', req.verbose ? info : undefined),
      };
    },
    UpdateContainerResources: async (req) => {
      const id = requireId('container_id', req.container_id);
      // Windows resources are ignored; without Linux ones there is nothing berth could apply.
      if (!req.linux) throw new InvalidArgumentError('linux', 'is required');
      await lifecycle.updateResources(id, toResources('linux', req.linux));
      return {};
    },
    ReopenContainerLog: async (req) => {
      await lifecycle.reopenLog(requireId('container_id', req.container_id));
      return {};
    },
    ExecSync: async (req, { signal }) => {
      const id = requireId('container_id', req.container_id);
      const cmd = toCmd(req.cmd);
      const timeout = seconds('timeout', req.timeout);
      const result = await exec.execSync(id, cmd, timeout, signal);
      // kubelet turns DEADLINE_EXCEEDED, and only that code, into a probe TimeoutError, which the
      // prober counts as a failed probe. An exit code (e.g. 124) would pass for the command's own
      // failure, and any other error code makes the prober discard the result altogether. containerd
      // answers a timed-out ExecSync the same way ("timeout Ns exceeded: context deadline exceeded").
      if (result.timedOut) {
        throw new DeadlineExceededError(
          `timeout ${timeout}s exceeded: command ${JSON.stringify(cmd)} timed out and was killed`,
        );
      }
      return { stdout: result.stdout, stderr: result.stderr, exit_code: result.exitCode };
    },
    ContainerStats: async (req) => ({
      stats: toWireStats(await stats.stats(requireId('container_id', req.container_id))),
    }),
    ListContainerStats: async (req, { signal }) => ({
      stats: (await stats.listStats(toStatsFilter(req), signal)).map(toWireStats),
    }),
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}
