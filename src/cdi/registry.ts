/**
 * The CDI specs of the node, found in the spec dirs (`cdi.spec_dirs`: /etc/cdi, then /var/run/cdi,
 * where device plugins and DRA drivers write theirs at run time), and the container edits of the
 * devices a container asks for. The dirs are read again for every container that asks for a
 * device, each file parsed again only when it changed (its inode, size, mtime or ctime), and then
 * in a worker thread (src/cdi/parser.ts): a spec a driver writes while berthd runs applies to the
 * next container, with no restart and no watcher to fall behind, and a create never pays for the
 * parse of a file that did not change.
 *
 * As the spec says, a later dir outranks an earlier one: a device defined in both is the later
 * dir's. Two files of the same dir defining one device make it ambiguous, and a container that
 * asks for it is refused naming both files. An unreadable file is skipped (logged), and named in
 * the error of a device that is not found, in case it was the one. So is a file or dir another
 * user than root could write (src/cdi/trust.ts): it is never read.
 */
import { constants } from 'node:fs';
import { lstat, open, readdir, realpath, stat } from 'node:fs/promises';
import { dirname, extname, join } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import type { Logger } from '../log.js';
import { parseQualifiedName } from './names.js';
import { CdiSpecParser } from './parser.js';
import { CdiSpecError, noEdits, type CdiSpec, type ContainerEdits } from './spec.js';
import { untrustedBecause } from './trust.js';

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
  /** Inode, size, mtime and ctime: a write, a replacing rename, a chmod or a chown changes it. */
  key: string;
  spec: Promise<CdiSpec | CdiSpecError>;
}

/** What the dirs hold: the specs, the files and dirs not read and why, the files left out. */
interface Reading {
  specs: CdiSpec[][];
  broken: string[];
  ignored: string[];
}

const SPEC_EXTENSIONS = new Set(['.json', '.yaml', '.yml']);
/** More is a sign of a runaway writer; the rest are not read. */
const MAX_SPEC_FILES = 1024;
/** A spec of this size lists thousands of devices; bigger is no spec. */
const MAX_SPEC_BYTES = 4 * 1024 * 1024;
/** An error names this many unread files at most, then says how many more. */
const NAMED_IN_ERRORS = 3;

export class CdiRegistry {
  private readonly cache = new Map<string, CachedFile>();
  private readonly parser = new CdiSpecParser();
  /** The last thing logged about each dir, so that a create that finds the same logs nothing. */
  private readonly logged = new Map<string, string>();

  constructor(
    private readonly dirs: readonly string[],
    private readonly logger: Logger,
  ) {}

  /** The edits of `requests`; an InvalidArgumentError naming the field of one that cannot be had. */
  async resolve(requests: readonly CdiRequest[]): Promise<CdiEdits> {
    if (requests.length === 0) return { parts: [] };
    const reading = await this.read();
    const parts: CdiEdits['parts'] = [];
    const specsUsed = new Set<CdiSpec>();
    const seen = new Set<string>();
    for (const { name, field } of requests) {
      const parsed = parseQualifiedName(name);
      if (typeof parsed === 'string') throw new InvalidArgumentError(field, parsed);
      if (seen.has(name)) continue;
      seen.add(name);
      const spec = this.find(reading, parsed.kind, parsed.name, name, field);
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
    { specs, broken, ignored }: Reading,
    kind: string,
    name: string,
    qualified: string,
    field: string,
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
    const unread = broken.length > 0 ? `; unreadable spec files: ${briefly(broken)}` : '';
    const left = ignored.length > 0 ? `; not read: ${ignored.join('; ')}` : '';
    throw new InvalidArgumentError(
      field,
      `CDI device ${qualified} is not defined by any spec in ${this.dirs.join(', ')}${unread}${left}`,
    );
  }

  /** Each dir's specs, in name order, and the problems of those that could not be read. */
  private async read(): Promise<Reading> {
    const reading: Reading = { specs: [], broken: [], ignored: [] };
    const live = new Set<string>();
    for (const dir of this.dirs) {
      const here: CdiSpec[] = [];
      reading.specs.push(here);
      const info = await stat(dir).catch(() => null);
      if (!info) continue;
      const distrust = untrustedBecause(info);
      this.logOnce(dir, distrust, () => this.logger.warn({ dir, why: distrust }, 'CDI spec dir not trusted'));
      if (distrust) {
        reading.broken.push(`CDI spec dir ${dir} ${distrust}`);
        continue;
      }
      const names = await readdir(dir).catch(() => [] as string[]);
      const all = names.filter((n) => SPEC_EXTENSIONS.has(extname(n))).sort();
      const over = all.length - MAX_SPEC_FILES;
      this.logOnce(`${dir} files`, over > 0 ? String(over) : null, () =>
        this.logger.warn(
          { dir, files: all.length, ignored: over },
          `CDI spec files past the first ${MAX_SPEC_FILES} of the dir ignored`,
        ),
      );
      if (over > 0) reading.ignored.push(`${over} spec files of ${dir} past the first ${MAX_SPEC_FILES}`);
      for (const file of all.slice(0, MAX_SPEC_FILES).map((n) => join(dir, n))) {
        live.add(file);
        const spec = await this.load(file);
        if (spec instanceof CdiSpecError) reading.broken.push(spec.message);
        else if (spec) here.push(spec);
      }
    }
    for (const file of this.cache.keys()) if (!live.has(file)) this.cache.delete(file);
    return reading;
  }

  /** Runs `log` when what there is to say of `key` changed to a problem, and remembers it. */
  private logOnce(key: string, problem: string | null, log: () => void): void {
    if (problem === null) this.logged.delete(key);
    else if (this.logged.get(key) !== problem) {
      this.logged.set(key, problem);
      log();
    }
  }

  private async load(file: string): Promise<CdiSpec | CdiSpecError | null> {
    // Non-blocking: a fifo by a spec's name must not hang the open.
    const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK).catch(() => null);
    // Gone since the listing, or unopenable: nothing to read (an unreadable one is berth's own problem).
    if (!handle) return null;
    try {
      const info = await handle.stat();
      if (!info.isFile()) return null;
      const key = `${info.ino}:${info.size}:${info.mtimeMs}:${info.ctimeMs}`;
      const cached = this.cache.get(file);
      if (cached?.key === key) return await cached.spec;
      const spec = this.check(file, info, handle);
      this.cache.set(file, { key, spec });
      const result = await spec;
      if (result instanceof CdiSpecError) this.logger.warn({ file, err: result.message }, 'CDI spec skipped');
      return result;
    } finally {
      await handle.close();
    }
  }

  /** The spec in the open `file`, if it is to be trusted and is of a size to be one. */
  private async check(
    file: string,
    info: { uid: number; mode: number; size: number },
    handle: Awaited<ReturnType<typeof open>>,
  ): Promise<CdiSpec | CdiSpecError> {
    const distrust = untrustedBecause(info) ?? (await this.linkTargetDistrusted(file));
    if (distrust) return new CdiSpecError(file, distrust);
    if (info.size > MAX_SPEC_BYTES) return new CdiSpecError(file, `is over ${MAX_SPEC_BYTES} bytes`);
    // One byte over the size seen tells a file grown since the stat.
    const buffer = Buffer.alloc(Math.min(info.size, MAX_SPEC_BYTES) + 1);
    let length = 0;
    for (let n = -1; n !== 0 && length < buffer.length; length += n) {
      ({ bytesRead: n } = await handle.read(buffer, length, buffer.length - length, length));
    }
    if (length > info.size) return new CdiSpecError(file, 'changed while it was read');
    return this.parser.parse(file, buffer.toString('utf8', 0, length));
  }

  /** For a spec that is a symlink: why the dir of what it points to is not trusted, or null. */
  private async linkTargetDistrusted(file: string): Promise<string | null> {
    if (!(await lstat(file)).isSymbolicLink()) return null;
    const target = dirname(await realpath(file));
    const problem = untrustedBecause(await stat(target));
    return problem && `links into ${target}, which ${problem}`;
  }
}

/** The first few of `items`, and how many more there are. */
function briefly(items: string[]): string {
  const named = items.slice(0, NAMED_IN_ERRORS).join('; ');
  return items.length > NAMED_IN_ERRORS ? `${named}; and ${items.length - NAMED_IN_ERRORS} more` : named;
}
