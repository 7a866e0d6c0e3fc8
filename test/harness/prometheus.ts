/** Prometheus text exposition format (0.0.4), as tests read berthd's /metrics. */

export interface Sample {
  /** As written, with any _bucket, _sum or _count suffix. */
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of an exposition; comments (# HELP, # TYPE) and blank lines are skipped. */
export function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const sample = parseSampleLine(line);
    if (!sample) throw new Error(`line ${index + 1} is not a sample: ${raw}`);
    samples.push(sample);
  }
  return samples;
}

/** The samples named `name` whose labels include every one of `labels`. */
export function samplesOf(
  samples: readonly Sample[],
  name: string,
  labels: Record<string, string> = {},
): Sample[] {
  return samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([key, value]) => s.labels[key] === value),
  );
}

/** The one sample named `name` with exactly these labels (le included); undefined when there is none. */
export function valueOf(
  samples: readonly Sample[],
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const wanted = Object.keys(labels).length;
  return samplesOf(samples, name, labels).find((s) => Object.keys(s.labels).length === wanted)?.value;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)/y;

function parseSampleLine(line: string): Sample | undefined {
  const m = SAMPLE.exec(line);
  if (!m) return undefined;
  const [, name = '', labelText = '', valueText = ''] = m;
  const labels = parseLabels(labelText);
  const value = parseValue(valueText);
  if (labels === undefined || value === undefined) return undefined;
  return { name, labels, value };
}

function parseLabels(text: string): Record<string, string> | undefined {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const m = LABEL.exec(text);
    if (!m) return text.slice(LABEL.lastIndex).trim() === '' ? labels : undefined;
    const [, key = '', escaped = ''] = m;
    labels[key] = escaped.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return labels;
}

/** As Prometheus reads values (Go's ParseFloat): NaN and Inf in any case; prom-client writes "Nan". */
function parseValue(text: string): number | undefined {
  const special = text.toLowerCase();
  if (special === '+inf' || special === 'inf') return Infinity;
  if (special === '-inf') return -Infinity;
  if (special === 'nan') return NaN;
  const value = Number(text);
  return Number.isNaN(value) ? undefined : value;
}
