/**
 * Pressure stall information (PSI) of a cgroup v2 cgroup: its cpu.pressure, memory.pressure and
 * io.pressure files, in the kernel's units, which are CRI's too (PsiData): totals in microseconds,
 * averages as the percentage of wall time stalled over the last 10, 60 and 300 seconds.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BerthError } from '../errors.js';

/** One line of a pressure file. */
export interface PressureLine {
  /** Cumulative stall time, in microseconds. */
  totalUs: bigint;
  avg10: number;
  avg60: number;
  avg300: number;
}

/**
 * "some": at least one task stalled; "full": all non-idle tasks stalled at once. A kernel that
 * has no "full" line for a resource (cpu before Linux 5.13) leaves it null.
 */
export interface Pressure {
  some: PressureLine | null;
  full: PressureLine | null;
}

export interface CgroupPressure {
  cpu: Pressure | null;
  memory: Pressure | null;
  io: Pressure | null;
}

const LINE_KINDS = new Set(['some', 'full']);

/**
 * The lines of a pressure file ("some avg10=0.12 avg60=0.00 avg300=0.00 total=3647"). Lines of
 * another kind are skipped, and so are keys a later kernel may add; a some/full line without one
 * of the four keys is an error naming `file`, not a zero.
 */
export function parsePressure(text: string, file: string): Pressure {
  const out: Pressure = { some: null, full: null };
  for (const line of text.split('\n')) {
    const [kind, ...fields] = line.trim().split(/\s+/);
    if (kind === undefined || !LINE_KINDS.has(kind)) continue;
    const values = new Map(
      fields.flatMap((f) => {
        const eq = f.indexOf('=');
        return eq > 0 ? [[f.slice(0, eq), f.slice(eq + 1)] as const] : [];
      }),
    );
    out[kind as keyof Pressure] = {
      totalUs: integer(values.get('total'), `${file}: ${kind} total`),
      avg10: percent(values.get('avg10'), `${file}: ${kind} avg10`),
      avg60: percent(values.get('avg60'), `${file}: ${kind} avg60`),
      avg300: percent(values.get('avg300'), `${file}: ${kind} avg300`),
    };
  }
  return out;
}

function integer(value: string | undefined, what: string): bigint {
  if (value === undefined || !/^\d+$/.test(value))
    throw new BerthError(`${what}: expected an unsigned integer, got "${value ?? ''}"`);
  return BigInt(value);
}

function percent(value: string | undefined, what: string): number {
  if (value === undefined || !/^\d+(\.\d+)?$/.test(value))
    throw new BerthError(`${what}: expected a percentage, got "${value ?? ''}"`);
  return Number(value);
}

/**
 * The three pressure files of the cgroup at `dir`, each null where the kernel keeps no PSI for it:
 * booted with psi=0 the files are not there, and a cgroup whose cgroup.pressure was set to 0 loses
 * them (ENOENT); older kernels answered such reads with EOPNOTSUPP. Other errors propagate, so
 * that a cgroup removed mid-read reads as gone.
 */
export async function readCgroupPressure(dir: string): Promise<CgroupPressure> {
  const [cpu, memory, io] = await Promise.all(
    ['cpu.pressure', 'memory.pressure', 'io.pressure'].map((file) => readPressureFile(dir, file)),
  );
  return { cpu: cpu ?? null, memory: memory ?? null, io: io ?? null };
}

async function readPressureFile(dir: string, file: string): Promise<Pressure | null> {
  try {
    return parsePressure(await readFile(join(dir, file), 'utf8'), file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException | null)?.code;
    if (code === 'ENOENT' || code === 'EOPNOTSUPP') return null;
    throw err;
  }
}
