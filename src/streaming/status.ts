/**
 * The status object that ends an exec or attach on its error stream. From v4 of the remotecommand
 * protocol it is a JSON metav1.Status; kubectl and crictl turn a NonZeroExitCode failure into
 * their own exit code. Older protocols carry only the message text, and nothing on success.
 */
export interface RemoteStatus {
  metadata: Record<string, never>;
  status: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  details?: { causes: { reason?: string; message: string }[] };
  code?: number;
}

export function successStatus(): RemoteStatus {
  return { metadata: {}, status: 'Success' };
}

export function exitCodeStatus(exitCode: number): RemoteStatus {
  return {
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: exit status ${exitCode}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
  };
}

export function internalErrorStatus(message: string): RemoteStatus {
  return {
    metadata: {},
    status: 'Failure',
    message: `Internal error occurred: ${message}`,
    reason: 'InternalError',
    details: { causes: [{ message }] },
    code: 500,
  };
}

/** The bytes written on the error stream for a protocol: JSON from v4 on, else text (none on success). */
export function encodeStatus(status: RemoteStatus, jsonStatus: boolean): Buffer {
  if (jsonStatus) return Buffer.from(JSON.stringify(status));
  return Buffer.from(status.status === 'Success' ? '' : (status.message ?? ''));
}
