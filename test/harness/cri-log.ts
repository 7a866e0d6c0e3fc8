/**
 * The CRI container log format, as conmon's k8s-file driver writes it and the tests read it back:
 *
 *   <RFC3339Nano timestamp> <stdout|stderr> <P|F> <message>\n
 *
 * F closes a line the container ended with a newline (the newline itself is not in the message).
 * P is a piece of a longer line: conmon cuts at each read from the container's pipe (at most
 * 8 KiB), so a long line arrives as P pieces followed by one F piece, and their messages
 * concatenate to the line. Output left without a final newline when the container exits ends
 * with a P piece and no F. conmon stamps local time with a numeric offset
 * (`2024-05-01T10:00:00.123456789+00:00`), all nine fraction digits kept.
 */

export type LogStream = 'stdout' | 'stderr';

export interface CriLogEntry {
  /** As written, e.g. `2024-05-01T10:00:00.123456789+00:00`. */
  timestamp: string;
  stream: LogStream;
  /** A P piece: the line continues in the next entry of the same stream. */
  partial: boolean;
  message: string;
}

const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/;

/** One line of a CRI log file (without its newline), or null when it is not in that format. */
export function parseCriLogLine(line: string): CriLogEntry | null {
  const [timestamp, stream, tag] = line.split(' ', 3);
  if (timestamp === undefined || stream === undefined || tag === undefined) return null;
  if (!TIMESTAMP.test(timestamp) || Number.isNaN(Date.parse(timestamp))) return null;
  if (stream !== 'stdout' && stream !== 'stderr') return null;
  if (tag !== 'P' && tag !== 'F') return null;
  const message = line.slice(timestamp.length + stream.length + tag.length + 3);
  return { timestamp, stream, partial: tag === 'P', message };
}
