/** Just enough ELF parsing to tell a static binary from a dynamically linked one. */
import { open } from 'node:fs/promises';

const PT_INTERP = 3;

/** True when the ELF file asks for a program interpreter (ld.so), i.e. is dynamically linked. */
export async function hasInterpreter(path: string): Promise<boolean> {
  const f = await open(path, 'r');
  try {
    const size = (await f.stat()).size;
    const head = Buffer.alloc(64);
    await f.read(head, 0, 64, 0);
    if (head.readUInt32BE(0) !== 0x7f454c46) return false;
    const is64 = head[4] === 2;
    const le = head[5] === 1;
    const u16 = (o: number): number => (le ? head.readUInt16LE(o) : head.readUInt16BE(o));
    const phoff = is64
      ? Number(le ? head.readBigUInt64LE(32) : head.readBigUInt64BE(32))
      : readU32(head, 28, le);
    const phentsize = u16(is64 ? 54 : 42);
    const phnum = u16(is64 ? 56 : 44);
    if (phoff + phentsize * phnum > size) return false;
    const table = Buffer.alloc(phentsize * phnum);
    await f.read(table, 0, table.length, phoff);
    for (let i = 0; i < phnum; i++) if (readU32(table, i * phentsize, le) === PT_INTERP) return true;
    return false;
  } finally {
    await f.close();
  }
}

function readU32(buf: Buffer, offset: number, le: boolean): number {
  return le ? buf.readUInt32LE(offset) : buf.readUInt32BE(offset);
}
