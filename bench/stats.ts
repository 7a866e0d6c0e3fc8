export interface Figures {
  median: number;
  p99: number;
}

export function figures(samples: number[]): Figures {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number): number =>
    sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? NaN;
  return { median: at(0.5), p99: at(0.99) };
}

export async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const start = process.hrtime.bigint();
  const value = await fn();
  return [value, Number(process.hrtime.bigint() - start) / 1e6];
}

export function line(label: string, f: Figures): string {
  return `${label.padEnd(26)} median ${f.median.toFixed(1).padStart(7)} ms   p99 ${f.p99.toFixed(1).padStart(7)} ms`;
}

export function mean(samples: number[]): number {
  return samples.length === 0 ? NaN : samples.reduce((a, b) => a + b, 0) / samples.length;
}

/** Figures per key over many `{ step: ms }` records (e.g. berthd's logged stepsMs). */
export function figuresByKey(records: Record<string, number>[]): Map<string, Figures> {
  const samples = new Map<string, number[]>();
  for (const record of records) {
    for (const [key, value] of Object.entries(record)) samples.set(key, [...(samples.get(key) ?? []), value]);
  }
  return new Map([...samples].map(([key, values]) => [key, figures(values)]));
}
