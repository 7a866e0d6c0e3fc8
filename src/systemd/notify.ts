/**
 * systemd's readiness protocol (sd_notify(3)) for a `Type=notify` unit: datagrams of `KEY=VALUE`
 * lines sent to the socket named by NOTIFY_SOCKET.
 *
 * berthd sends them itself rather than running systemd-notify: systemd tells which unit a message
 * is from by the sender's pid, and takes it from the unit's main pid only (`NotifyAccess=main`). A
 * systemd-notify child is another pid, and one that may have exited before systemd reads its
 * message: the message races its own exit and may be dropped.
 */
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import { settledWithin } from '../kit/deadline.js';

const NOTIFY_SOCKET = 'NOTIFY_SOCKET';
const SEND_TIMEOUT_MS = 2_000;

export class ServiceNotifier {
  private constructor(
    private readonly socketPath: string,
    private readonly logger: Logger,
  ) {}

  /**
   * The notifier of the service manager that started berthd, or undefined when none asked for
   * notifications. Takes NOTIFY_SOCKET out of `env`, as sd_notify's unset_environment does, so that
   * runc, conmon and CNI plugins, which inherit berthd's environment, never notify on its behalf.
   */
  static fromEnv(env: NodeJS.ProcessEnv, logger: Logger): ServiceNotifier | undefined {
    const socket = env[NOTIFY_SOCKET];
    delete env[NOTIFY_SOCKET];
    if (!socket) return undefined;
    if (socket.startsWith('@')) {
      // node-unix-socket addresses a datagram with the whole of sun_path, so an abstract name
      // arrives padded with NULs: another name than the one the manager bound.
      logger.warn(
        { socket },
        'NOTIFY_SOCKET is an abstract socket, which berthd cannot send to: readiness is not reported',
      );
      return undefined;
    }
    if (!socket.startsWith('/')) {
      logger.warn({ socket }, 'NOTIFY_SOCKET is not an absolute path: readiness is not reported');
      return undefined;
    }
    return new ServiceNotifier(socket, logger);
  }

  /** Start-up is over: the unit becomes active and units ordered after it may start. */
  ready(status: string): Promise<void> {
    return this.send([
      ['READY', '1'],
      ['MAINPID', String(process.pid)],
      ['STATUS', status],
    ]);
  }

  /** The stop has begun: systemd shows the unit deactivating while berthd finishes. */
  stopping(status: string): Promise<void> {
    return this.send([
      ['STOPPING', '1'],
      ['STATUS', status],
    ]);
  }

  /** Never throws: a manager that cannot hear berthd is no reason to stop serving. */
  private async send(fields: [string, string][]): Promise<void> {
    const message = Buffer.from(fields.map(([key, value]) => `${key}=${value}`).join('\n'));
    try {
      // Loaded only when a service manager listens: berthd's idle memory matters.
      const { DgramSocket } = await import('node-unix-socket');
      const socket = new DgramSocket();
      try {
        const sent = new Promise<void>((resolve, reject) => {
          socket.sendTo(message, 0, message.length, this.socketPath, (err) =>
            err ? reject(err) : resolve(),
          );
        });
        // A manager that stopped reading fills its queue, and a send would wait for room forever.
        if (!(await settledWithin(sent, SEND_TIMEOUT_MS))) {
          throw new Error(`no room in its socket's queue for ${SEND_TIMEOUT_MS} ms`);
        }
      } finally {
        socket.close();
      }
    } catch (err) {
      this.logger.warn(
        { socket: this.socketPath, message: message.toString(), err: errorMessage(err) },
        'could not notify the service manager',
      );
    }
  }
}
