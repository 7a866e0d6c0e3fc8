/**
 * The byte layout of tar headers and pax records (POSIX ustar/pax, GNU extensions). Pure
 * functions over buffers; the stream logic lives in tar-reader.ts.
 */

export const BLOCK = 512;

/** What is wrong with the archive's bytes; tar-reader.ts adds which entry it was. */
export class TarFormatError extends Error {
  override name = 'TarFormatError';
}

export interface RawHeader {
  name: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  typeflag: string;
  linkname: string;
  devMajor: number;
  devMinor: number;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

export function isZeroBlock(block: Buffer): boolean {
  for (let i = 0; i < block.length; i++) if (block[i] !== 0) return false;
  return true;
}

/** Parses one 512-byte header block, after checking its checksum. */
export function parseHeader(block: Buffer): RawHeader {
  verifyChecksum(block);
  const magic = block.toString('latin1', 257, 263);
  const name = text(block, 0, 100, 'name');
  // Only POSIX ustar has a prefix field; GNU keeps other data (atime, ctime, sparse maps) there.
  const prefix = magic === 'ustar\0' ? text(block, 345, 500, 'prefix') : '';
  const typeflag = block[156] === 0 ? '0' : String.fromCharCode(block[156] ?? 0x30);
  return {
    name: prefix ? `${prefix}/${name}` : name,
    mode: numeric(block, 100, 108, 'mode'),
    uid: numeric(block, 108, 116, 'uid'),
    gid: numeric(block, 116, 124, 'gid'),
    size: numeric(block, 124, 136, 'size'),
    mtime: numeric(block, 136, 148, 'mtime'),
    typeflag,
    linkname: text(block, 157, 257, 'linkname'),
    // v7 headers have no such fields; they are then blank and read as 0.
    devMajor: numeric(block, 329, 337, 'devmajor'),
    devMinor: numeric(block, 337, 345, 'devminor'),
  };
}

function verifyChecksum(block: Buffer): void {
  const stored = numeric(block, 148, 156, 'checksum');
  // The checksum field counts as eight spaces. Some old writers summed signed chars, so accept either.
  let unsigned = 8 * 0x20;
  let signed = 8 * 0x20;
  for (let i = 0; i < BLOCK; i++) {
    if (i >= 148 && i < 156) continue;
    const b = block[i] ?? 0;
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  if (stored !== unsigned && stored !== signed) {
    throw new TarFormatError(`tar is corrupt: bad header checksum (stored ${stored}, computed ${unsigned})`);
  }
}

/** A NUL-terminated field. Names must be UTF-8: they become JavaScript strings and then file names. */
function text(block: Buffer, start: number, end: number, field: string): string {
  const nul = block.indexOf(0, start);
  return decodeUtf8(block.subarray(start, nul === -1 || nul > end ? end : nul), field);
}

export function decodeUtf8(bytes: Uint8Array, what: string): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new TarFormatError(`${what} is not valid UTF-8 (such names are not supported)`);
  }
}

/** A numeric field: octal text, or GNU base-256 (top bit set) for values octal cannot hold. */
function numeric(block: Buffer, start: number, end: number, field: string): number {
  const first = block[start] ?? 0;
  if (first & 0x80) {
    if (first === 0xff) throw new TarFormatError(`a negative ${field} is not supported`);
    let value = BigInt(first & 0x7f);
    for (let i = start + 1; i < end; i++) value = (value << 8n) | BigInt(block[i] ?? 0);
    if (value > BigInt(Number.MAX_SAFE_INTEGER))
      throw new TarFormatError(`tar is corrupt: ${field} is too large`);
    return Number(value);
  }
  // Writers pad with leading spaces or zeros and end with a NUL and/or space.
  const digits = block.toString('latin1', start, end).replace(/^[ \0]+|[ \0]+$/g, '');
  if (digits === '') return 0;
  if (!/^[0-7]+$/.test(digits))
    throw new TarFormatError(`tar is corrupt: ${field} field is not octal: ${JSON.stringify(digits)}`);
  return parseInt(digits, 8);
}

/** A GNU 'L'/'K' body: a name ending in a NUL. */
export function longName(body: Buffer, what: string): string {
  const nul = body.indexOf(0);
  return decodeUtf8(nul === -1 ? body : body.subarray(0, nul), what);
}

/**
 * Parses pax records, "<length> <key>=<value>\n" where length counts the whole record in bytes.
 * Values stay bytes: xattr values are binary.
 */
export function parsePaxRecords(body: Buffer): Map<string, Buffer> {
  const records = new Map<string, Buffer>();
  let pos = 0;
  while (pos < body.length) {
    // Some writers pad the last block with NULs instead of sizing the body exactly.
    if (body[pos] === 0) {
      if (isZeroBlock(body.subarray(pos))) break;
      throw new TarFormatError('tar is corrupt: malformed pax header: NUL between records');
    }
    const space = body.indexOf(0x20, pos);
    if (space === -1) throw new TarFormatError('tar is corrupt: malformed pax header: record without length');
    const lengthText = body.toString('latin1', pos, space);
    if (!/^[1-9][0-9]*$/.test(lengthText))
      throw new TarFormatError(`tar is corrupt: malformed pax record length ${JSON.stringify(lengthText)}`);
    const length = Number(lengthText);
    const end = pos + length;
    if (end > body.length || body[end - 1] !== 0x0a)
      throw new TarFormatError('tar is corrupt: malformed pax header: bad record length');
    const eq = body.indexOf(0x3d, space + 1);
    if (eq === -1 || eq >= end)
      throw new TarFormatError('tar is corrupt: malformed pax header: record without "="');
    const key = decodeUtf8(body.subarray(space + 1, eq), 'pax key');
    records.set(key, body.subarray(eq + 1, end - 1));
    pos = end;
  }
  return records;
}

/** A pax decimal integer (uid, gid, size). */
export function paxInteger(value: Buffer, key: string): number {
  const s = value.toString('latin1');
  if (!/^[0-9]+$/.test(s))
    throw new TarFormatError(`tar is corrupt: pax ${key} is not a number: ${JSON.stringify(s)}`);
  const n = Number(s);
  if (!Number.isSafeInteger(n)) throw new TarFormatError(`tar is corrupt: pax ${key} is too large`);
  return n;
}

/** A pax time: decimal seconds, possibly negative, possibly with a fraction. */
export function paxTime(value: Buffer, key: string): number {
  const s = value.toString('latin1');
  if (!/^-?[0-9]+(\.[0-9]*)?$/.test(s))
    throw new TarFormatError(`tar is corrupt: pax ${key} is not a time: ${JSON.stringify(s)}`);
  return Number(s);
}
