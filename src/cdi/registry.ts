/**
 * The CDI specs of the node, found in the spec dirs (`cdi.spec_dirs`: /etc/cdi, then /var/run/cdi,
 * where device plugins and DRA drivers write theirs at run time), and the container edits of the
 * devices a container asks for. The dirs are read again for every container that asks for a
 * device, each file parsed again only when its size or mtime changed: a spec a driver writes while
 * berthd runs applies to the next container, with no restart and no watcher to fall behind.
 *
 * As the spec says, a later dir outranks an earlier one: a device defined in both is the later
 * dir's. Two files of the same dir defining one device make it ambiguous, and a container that
 * asks for it is refused naming both files. An unreadable file is skipped (logged), and named in
 * the error of a device that is not found, in case it was the one.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import type { Logger } from '../log.js';
import { parseQualifiedName } from './names.js';
import { CdiSpecError, noEdits, parseCdiSpec, type CdiSpec, type ContainerEdits } from './spec.js';

/** A device a container asks for, and the request field that asked. */
export interface CdiRequest {
  name: string;
  field: string;
}

/** What a container's devices add to it, spec-wide edits once per spec, in the order asked. */
export interface CdiEdits {
  /** Each spec's and device's edits, with the qualified name of the device or `<kind> (spec)`. */
  parts: { source: string; edits: ContainerEdits }[];
}

interface CachedFile {
  size: number;
  mtimeMs: number;
  spec: CdiSpec | CdiSpecError;
}

const SPEC_EXTENSIONS = new Set(['.json', '.yaml', '.yml']);
/** More is a sign of a runaway writer; the rest are not read. */
const MAX_SPEC_FILES = 1024;
/** A spec of this size lists thousands of devices; bigger is no spec. */
const MAX_SPEC_BYTES = 4 * 1024 * 1024;

export class CdiRegistry {
  private readonly cache = new Map<string, CachedFile>();

  constructor(
    private readonly dirs: readonly string[],
    private readonly logger: Logger,
  ) {}

  /** The edits of `requests`; an InvalidArgumentError naming the field of one that cannot be had. */
  async resolve(requests: readonly CdiRequest[]): Promise<CdiEdits> {
    if (requests.length === 0) return { parts: [] };
    const { specs, broken } = await this.read();
    const parts: CdiEdits['parts'] = [];
    const specsUsed = new Set<CdiSpec>();
    const seen = new Set<string>();
    for (const { name, field } of requests) {
      const parsed = parseQualifiedName(name);
      if (typeof parsed === 'string') throw new InvalidArgumentError(field, parsed);
      if (seen.has(name)) continue;
      seen.add(name);
      const spec = this.find(specs, parsed.kind, parsed.name, name, field, broken);
      const edits = spec.devices.get(parsed.name) ?? noEdits();
      for (const source of [spec.edits, edits]) {
        if (source.unsupported.length > 0) {
          throw new InvalidArgumentError(
            field,
            `CDI device ${name} (${spec.file}) needs ${source.unsupported.join(' and ')}, which berth does not apply`,
          );
        }
      }
      if (!specsUsed.has(spec)) {
        specsUsed.add(spec);
        parts.push({ source: `${spec.kind} (${spec.file})`, edits: spec.edits });
      }
      parts.push({ source: name, edits });
    }
    return { parts };
  }

  /** The spec defining `kind`=`name`: the last dir's, and only one file of it. */
  private find(
    specs: CdiSpec[][],
    kind: string,
    name: string,
    qualified: string,
    field: string,
    broken: string[],
  ): CdiSpec {
    for (const dir of [...specs].reverse()) {
      const defining = dir.filter((spec) => spec.kind === kind && spec.devices.has(name));
      const [only, other] = defining;
      if (other) {
        throw new InvalidArgumentError(
          field,
          `CDI device ${qualified} is ambiguous: ${defining.map((s) => s.file).join(' and ')} both define it`,
        );
      }
      if (only) return only;
    }
    const unread = broken.length > 0 ? `; unreadable spec files: ${broken.join('; ')}` : '';
    throw new InvalidArgumentError(
      field,
      `CDI device ${qualified} is not defined by any spec in ${this.dirs.join(', ')}${unread}`,
    );
  }

  /** Each dir's specs, in name order, and the problems of those that could not be read. */
  private async read(): Promise<{ specs: CdiSpec[][]; broken: string[] }> {
    const broken: string[] = [];
    const live = new Set<string>();
    const specs: CdiSpec[][] = [];
    for (const dir of this.dirs) {
      const names = await readdir(dir).catch(() => [] as string[]);
      const files = names
        .filter((n) => SPEC_EXTENSIONS.has(extname(n)))
        .sort()
        .slice(0, MAX_SPEC_FILES)
        .map((n) => join(dir, n));
      const here: CdiSpec[] = [];
      for (const file of files) {
        live.add(file);
        const spec = await this.load(file);
        if (spec instanceof CdiSpecError) broken.push(spec.message);
        else if (spec) here.push(spec);
      }
      specs.push(here);
    }
    for (const file of this.cache.keys()) if (!live.has(file)) this.cache.delete(file);
    return { specs, broken };
  }

  private async load(file: string): Promise<CdiSpec | CdiSpecError | null> {
    const info = await stat(file).catch(() => null);
    // Gone since the listing, or a dir or socket by a spec's name: nothing to read.
    if (!info?.isFile()) return null;
    const cached = this.cache.get(file);
    if (cached && cached.size === info.size && cached.mtimeMs === info.mtimeMs) return cached.spec;
    let spec: CdiSpec | CdiSpecError;
    try {
      if (info.size > MAX_SPEC_BYTES) throw new CdiSpecError(file, `is over ${MAX_SPEC_BYTES} bytes`);
      spec = parseCdiSpec(file, await readFile(file, 'utf8'));
    } catch (err) {
      spec = err instanceof CdiSpecError ? err : new CdiSpecError(file, (err as Error).message);
      this.logger.warn({ file, err: spec.message }, 'CDI spec skipped');
    }
    this.cache.set(file, { size: info.size, mtimeMs: info.mtimeMs, spec });
    return spec;
  }
}
