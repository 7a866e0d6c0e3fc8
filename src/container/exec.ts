import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FailedPreconditionError, errorMessage } from '../errors.js';
import type { Container } from '../model/container.js';
import { EXEC_SYNC_OUTPUT_CAP, type ExecStreamIo, type ExecSyncResult } from '../runtime/index.js';
import type { Process, Spec } from '../oci/spec.js';
import { runtimeOf, type ContainerServiceDeps } from './context.js';
import { findRunning } from './lookup.js';
import { timerMs } from './timer.js';

/** Processes run in a running container besides its own (ExecSync, streaming exec), and attaching to its own. */
export class ContainerExec {
  constructor(private readonly deps: ContainerServiceDeps) {}

  /** A timeout is a result (timedOut), not an error: src/cri decides what kubelet must see. */
  async execSync(
    idOrPrefix: string,
    cmd: string[],
    timeoutSeconds: number,
    signal?: AbortSignal,
  ): Promise<ExecSyncResult> {
    const container = findRunning(this.deps.store, idOrPrefix);
    const process = await execProcess(container, cmd);
    return runtimeOf(this.deps, container).execSync(container.id, process, {
      timeoutMs: timerMs(timeoutSeconds),
      maxOutputBytes: EXEC_SYNC_OUTPUT_CAP,
      ...(signal ? { signal } : {}),
    });
  }

  /** The full id of a running container, for the streaming RPCs to validate before they hand out a URL. */
  runningId(idOrPrefix: string): string {
    return findRunning(this.deps.store, idOrPrefix).id;
  }

  /** A streaming exec: as ExecSync, with the client's streams and terminal. Resolves with the exit code. */
  async execStream(idOrPrefix: string, cmd: string[], io: ExecStreamIo): Promise<number> {
    const container = findRunning(this.deps.store, idOrPrefix);
    const process = await execProcess(container, cmd);
    return runtimeOf(this.deps, container).execStream(container.id, process, io);
  }

  /** Joins the container's own stdio (held by conmon) until its output ends, the client leaves, or (without stdin_once) the client's stdin ends. */
  async attach(idOrPrefix: string, io: ExecStreamIo): Promise<void> {
    const { logger } = this.deps;
    const container = findRunning(this.deps.store, idOrPrefix);
    const runtime = runtimeOf(this.deps, container);
    const { spec } = container;
    const onResize = (size: { width: number; height: number }): void => {
      runtime.resizeTerminal(container, size).catch((err: unknown) => {
        logger.debug({ container: container.id, err: errorMessage(err) }, 'terminal resize failed');
      });
    };
    if (spec.tty) {
      if (io.resize.current) onResize(io.resize.current);
      io.resize.on('resize', onResize);
    }
    try {
      await runtime.attach(
        container.id,
        { ...io, stdin: spec.stdin ? io.stdin : null },
        { closeStdinOnEnd: spec.stdinOnce && !spec.tty },
      );
    } finally {
      io.resize.off('resize', onResize);
    }
  }
}

/** The container's own process (user, env, cwd, capabilities…) running `cmd` instead. */
async function execProcess(container: Container, cmd: string[]): Promise<Process> {
  const spec = JSON.parse(await readFile(join(container.bundleDir, 'config.json'), 'utf8')) as Spec;
  if (!spec.process) throw new FailedPreconditionError(`container ${container.id} has no process spec`);
  return { ...spec.process, args: cmd, terminal: false };
}
