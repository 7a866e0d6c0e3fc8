/**
 * Exec, Attach and PortForward: each validates its request, checks that the container is running
 * (or the pod ready), and answers with a single-use URL on berth's streaming server, where the
 * client then runs the session. Nothing runs until the client connects.
 */
import type { ContainerService } from '../container/service.js';
import { InvalidArgumentError } from '../errors.js';
import type { SandboxService } from '../sandbox/service.js';
import type { StreamRequest } from '../streaming/types.js';
import { toCmd } from './container-spec.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import type { Received } from './messages.js';
import { boundedList, requireId } from './validate.js';

/** The streaming server, as the RPCs see it: it turns a validated request into a URL. */
export interface StreamUrls {
  url(request: StreamRequest): string;
}

export function streamingHandlers(
  { exec }: Pick<ContainerService, 'exec'>,
  sandboxes: SandboxService,
  streams: StreamUrls,
) {
  return {
    Exec: async (req) => {
      const id = requireId('container_id', req.container_id);
      const cmd = toCmd(req.cmd);
      const flags = streamFlags(req);
      return { url: streams.url({ kind: 'exec', containerId: exec.runningId(id), cmd, ...flags }) };
    },
    Attach: async (req) => {
      const id = requireId('container_id', req.container_id);
      const flags = streamFlags(req);
      return { url: streams.url({ kind: 'attach', containerId: exec.runningId(id), ...flags }) };
    },
    PortForward: async (req) => {
      const id = requireId('pod_sandbox_id', req.pod_sandbox_id);
      const ports = boundedList('port', req.port, MAX_FORWARDED_PORTS).map((p, i) => {
        if (!Number.isInteger(p) || p < 1 || p > 65535) {
          throw new InvalidArgumentError(`port[${i}]`, `${p} is not a port number (1-65535)`);
        }
        return p;
      });
      return { url: streams.url({ kind: 'portforward', podSandboxId: sandboxes.readyId(id), ports }) };
    },
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}

/** kubectl port-forward forwards the few ports named on its command line; each is held until the URL is used. */
const MAX_FORWARDED_PORTS = 1024;

type StreamFlags = Pick<Received<'ExecRequest'>, 'tty' | 'stdin' | 'stdout' | 'stderr'>;

/** kubelet's streaming package refuses the same combinations. */
function streamFlags(req: StreamFlags): StreamFlags {
  if (req.tty && req.stderr) {
    throw new InvalidArgumentError('stderr', 'must be false with tty: a terminal has one output stream');
  }
  if (!req.stdin && !req.stdout && !req.stderr) {
    throw new InvalidArgumentError('stdin', 'one of stdin, stdout or stderr must be set');
  }
  return { tty: req.tty, stdin: req.stdin, stdout: req.stdout, stderr: req.stderr };
}
