import { ByteSource } from './byte-source.js';
import { RefusedEntryError, UnpackError } from './errors.js';
import {
  BLOCK,
  TarFormatError,
  decodeUtf8,
  isZeroBlock,
  longName,
  paxInteger,
  paxTime,
  parseHeader,
  parsePaxRecords,
  type RawHeader,
} from './tar-header.js';

export type TarEntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo';

/** One archive member, with pax and GNU extensions already folded in. */
export interface TarEntry {
  readonly type: TarEntryType;
  /** The member's name as the archive has it (not yet made safe). */
  readonly path: string;
  /** Symlink target, or the hard link's target member; '' for other types. */
  readonly linkPath: string;
  /** Permission bits including setuid, setgid and sticky. */
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  /** Seconds since the epoch; pax times keep their fraction. */
  readonly mtime: number;
  readonly atime: number | undefined;
  /** Bytes of data: 0 for every type but 'file'. */
  readonly size: number;
  readonly devMajor: number;
  readonly devMinor: number;
  /** From pax SCHILY.xattr.<name> records. */
  readonly xattrs: ReadonlyMap<string, Buffer>;
}

// Extension headers are held in memory: bound them so a hostile archive cannot claim gigabytes.
const MAX_PAX_HEADER = 8 * 1024 * 1024;
const MAX_LONG_NAME = 1024 * 1024;
const XATTR_PREFIX = 'SCHILY.xattr.';
// In a global header these would give every later member the same name or size: never meaningful.
const NOT_GLOBAL = new Set(['path', 'linkpath', 'size']);

const TYPES: Readonly<Record<string, TarEntryType>> = {
  '0': 'file',
  '7': 'file', // contiguous file: a regular file everywhere that matters
  '1': 'hardlink',
  '2': 'symlink',
  '3': 'char',
  '4': 'block',
  '5': 'dir',
  '6': 'fifo',
};

/**
 * A streaming tar reader: ustar, GNU long names/links ('L'/'K'), pax extended ('x') and global
 * ('g') headers. Call next() for each member and, for files, read body() before the next call
 * (whatever is left unread is skipped).
 */
export class TarReader {
  private readonly src: ByteSource;
  private readonly globals = new Map<string, Buffer>();
  /** Data bytes of the current member not yet read, and the zero padding after them. */
  private remaining = 0;
  private padding = 0;
  private currentPath = '';
  private ended = false;

  constructor(chunks: AsyncIterable<Buffer>) {
    this.src = new ByteSource(chunks[Symbol.asyncIterator]());
  }

  /** The next member, or undefined at the end of the archive. */
  async next(): Promise<TarEntry | undefined> {
    if (this.ended) return undefined;
    await this.skipRest();
    const ext: Extensions = { local: new Map(), pending: false };
    let hint = '(header)';
    try {
      for (;;) {
        const block = await this.src.readExact(BLOCK);
        if (block.length === 0) {
          if (ext.pending)
            throw new TarFormatError('tar is truncated: an extension header without its member');
          // No end-of-archive blocks: accepted, as Go's archive/tar (and so containerd) does.
          this.ended = true;
          return undefined;
        }
        if (block.length < BLOCK) throw new TarFormatError('tar is truncated: a partial header block');
        if (isZeroBlock(block)) {
          await this.endOfArchive(ext.pending);
          return undefined;
        }
        // Named before parsing, so that even a header failing its checksum is reported by name.
        hint = memberName(block, ext);
        const header = parseHeader(block);
        if (await this.extension(header, ext)) continue;
        const entry = this.entry(header, ext);
        this.currentPath = entry.path;
        this.remaining = entry.size;
        this.padding = paddingOf(entry.size);
        return entry;
      }
    } catch (err) {
      throw err instanceof TarFormatError ? new RefusedEntryError(err.message, hint) : err;
    }
  }

  /** The current member's data, in pieces as they arrive. */
  async *body(): AsyncGenerator<Buffer, void, undefined> {
    while (this.remaining > 0) {
      const part = await this.src.readSome(this.remaining);
      if (part === undefined) throw this.truncatedData();
      this.remaining -= part.length;
      yield part;
    }
  }

  /**
   * Reads whatever follows the end of the archive (record padding, trailing data) so that the
   * caller's digest covers the whole stream; returns its length.
   */
  async drain(): Promise<number> {
    return this.src.drain();
  }

  private async skipRest(): Promise<void> {
    for await (const _ of this.body()) {
      // Unread data of the previous member: only the reading matters.
    }
    if (this.padding > 0) {
      const pad = await this.src.readExact(this.padding);
      if (pad.length < this.padding) throw this.truncatedData();
      this.padding = 0;
    }
  }

  private async endOfArchive(extensionPending: boolean): Promise<void> {
    if (extensionPending) throw new TarFormatError('tar is corrupt: an extension header without its member');
    // The end is two zero blocks; a lone one before the end of the stream is tolerated like GNU tar does.
    const second = await this.src.readExact(BLOCK);
    if (second.length === BLOCK && !isZeroBlock(second)) {
      throw new TarFormatError('tar is corrupt: a zero block followed by data');
    }
    this.ended = true;
  }

  /** Folds an extension header ('x', 'g', 'L', 'K', 'V') into `ext`; false for a member header. */
  private async extension(header: RawHeader, ext: Extensions): Promise<boolean> {
    switch (header.typeflag) {
      case 'x':
        for (const [k, v] of parsePaxRecords(await this.extensionBody(header, MAX_PAX_HEADER)))
          ext.local.set(k, v);
        ext.pending = true;
        return true;
      case 'g':
        for (const [k, v] of parsePaxRecords(await this.extensionBody(header, MAX_PAX_HEADER))) {
          if (NOT_GLOBAL.has(k)) continue;
          if (v.length === 0) this.globals.delete(k);
          else this.globals.set(k, v);
        }
        return true;
      case 'L':
        ext.gnuName = longName(await this.extensionBody(header, MAX_LONG_NAME), 'GNU long name');
        ext.pending = true;
        return true;
      case 'K':
        ext.gnuLink = longName(await this.extensionBody(header, MAX_LONG_NAME), 'GNU long link name');
        ext.pending = true;
        return true;
      case 'V':
        // A GNU volume label names the archive, not a file.
        await this.extensionBody(header, MAX_LONG_NAME);
        return true;
      default:
        return false;
    }
  }

  /** The body of an extension header, which must fit in memory. */
  private async extensionBody(header: RawHeader, limit: number): Promise<Buffer> {
    if (header.size > limit) {
      throw new TarFormatError(
        `tar extension header '${header.typeflag}' of ${header.size} bytes is too large`,
      );
    }
    const total = header.size + paddingOf(header.size);
    const body = await this.src.readExact(total);
    if (body.length < total) throw new TarFormatError('tar is truncated inside an extension header');
    return body.subarray(0, header.size);
  }

  private entry(header: RawHeader, ext: Extensions): TarEntry {
    const { local, gnuName, gnuLink } = ext;
    const pax = (key: string): Buffer | undefined => {
      // An empty local value cancels a global one (POSIX); it then falls back to the header field.
      const v = local.has(key) ? local.get(key) : this.globals.get(key);
      return v === undefined || v.length === 0 ? undefined : v;
    };
    for (const key of [...local.keys(), ...this.globals.keys()]) {
      if (key.startsWith('GNU.sparse.')) throw new TarFormatError('GNU sparse files are not supported');
    }

    let path =
      pax('path') !== undefined ? decodeUtf8(pax('path') as Buffer, 'pax path') : (gnuName ?? header.name);
    let type = TYPES[header.typeflag];
    if (type === undefined) {
      throw new TarFormatError(`unsupported tar member type '${header.typeflag}'`);
    }
    // Pre-POSIX archives mark directories only by a trailing slash.
    if (type === 'file' && header.typeflag !== '7' && path.endsWith('/')) type = 'dir';
    if (type === 'dir') path = path.replace(/\/+$/, '') || '.';

    const linkValue = pax('linkpath');
    const linkPath =
      type === 'symlink' || type === 'hardlink'
        ? linkValue !== undefined
          ? decodeUtf8(linkValue, 'pax linkpath')
          : (gnuLink ?? header.linkname)
        : '';
    const num = (key: string, fallback: number): number => {
      const v = pax(key);
      return v === undefined ? fallback : paxInteger(v, key);
    };
    const time = (key: string): number | undefined => {
      const v = pax(key);
      return v === undefined ? undefined : paxTime(v, key);
    };
    const xattrs = new Map<string, Buffer>();
    for (const [k, v] of [...this.globals, ...local]) {
      if (k.startsWith(XATTR_PREFIX)) xattrs.set(k.slice(XATTR_PREFIX.length), v);
    }
    return {
      type,
      path,
      linkPath,
      mode: header.mode & 0o7777,
      uid: num('uid', header.uid),
      gid: num('gid', header.gid),
      mtime: time('mtime') ?? header.mtime,
      atime: time('atime'),
      // Only regular files carry data: other types' size fields are ignored, as Go's archive/tar does.
      size: type === 'file' ? num('size', header.size) : 0,
      devMajor: type === 'char' || type === 'block' ? header.devMajor : 0,
      devMinor: type === 'char' || type === 'block' ? header.devMinor : 0,
      xattrs,
    };
  }

  private truncatedData(): UnpackError {
    return new UnpackError('tar is truncated: the data ends early', this.currentPath);
  }
}

function paddingOf(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

function memberName(block: Buffer, ext: Extensions): string {
  const paxPath = ext.local.get('path');
  if (paxPath !== undefined && paxPath.length > 0) return paxPath.toString('utf8');
  if (ext.gnuName !== undefined) return ext.gnuName;
  const nul = block.indexOf(0);
  return block.toString('utf8', 0, nul === -1 || nul > 100 ? 100 : nul);
}

/** What extension headers said about the member that follows them. */
interface Extensions {
  local: Map<string, Buffer>;
  gnuName?: string;
  gnuLink?: string;
  /** An extension was read, so a member must follow. */
  pending: boolean;
}
