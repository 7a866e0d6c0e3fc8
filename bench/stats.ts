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
