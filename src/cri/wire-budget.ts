/**
 * A request's values, counted from its wire bytes before it is decoded. Decoding is where a request
 * costs berthd most, all of it on the event loop: the decoder makes a JS value of every field it
 * meets, and a 16 MiB request (the message size limit) of small values held the loop for seconds
 * before any handler could look at it (500,000 label selector entries: 1.4 s; 3,000,000
 * supplemental groups, each an int64 made a string: 5 s). Counting them costs a few nanoseconds
 * each, and stops at the limit.
 */
import type { PackageDefinition } from '@grpc/proto-loader';
import { InvalidArgumentError } from '../errors.js';

/**
 * Values (fields on the wire, nested ones, map entries and packed numbers each counting one) a
 * request may hold. Twice what the longest lists berth takes hold: 65,536 supplemental groups
 * (NGROUPS_MAX), or 16,384 environment entries (three values each) with 16,384 arguments. At
 * this count the dearest values to decode (int64s, made strings) cost the loop about 0.3 s.
 */
export const MAX_REQUEST_VALUES = 131_072;

/** The wire types proto3 writes; groups (3, 4) are refused, as no CRI client sends them. */
type WireType = 0 | 1 | 2 | 5;

interface FieldShape {
  name: string;
  repeated: boolean;
  /** The wire type of one value; a repeated number may also come packed (wire type 2). */
  wire: WireType;
  /** Set for message fields, whose contents are counted too. */
  message: MessageShape | null;
}

export type MessageShape = Map<number, FieldShape>;

/** The parts of a protobuf descriptor (as @grpc/proto-loader hands it over) the count needs. */
interface FieldDescriptor {
  name: string;
  number: number;
  label: string;
  type: string;
  typeName: string;
}

interface MessageDescriptor {
  name: string;
  field: FieldDescriptor[];
  nestedType: MessageDescriptor[];
}

const FIXED64 = new Set(['TYPE_DOUBLE', 'TYPE_FIXED64', 'TYPE_SFIXED64']);
const FIXED32 = new Set(['TYPE_FLOAT', 'TYPE_FIXED32', 'TYPE_SFIXED32']);
const DELIMITED = new Set(['TYPE_STRING', 'TYPE_BYTES', 'TYPE_MESSAGE']);

/** The shapes of a package's messages, each made once, when a request type first needs it. */
export class WireShapes {
  private readonly shapes = new Map<MessageDescriptor, MessageShape>();

  constructor(
    private readonly definition: PackageDefinition,
    private readonly packageName: string,
  ) {}

  /** The shape of a request type, as a method definition's `requestType.type` holds it. */
  of(type: object): MessageShape {
    return this.shape(asDescriptor(type));
  }

  private shape(descriptor: MessageDescriptor): MessageShape {
    const known = this.shapes.get(descriptor);
    if (known) return known;
    // Stored before its fields are made, so that a message that holds itself ends.
    const shape: MessageShape = new Map();
    this.shapes.set(descriptor, shape);
    for (const field of descriptor.field) {
      const message = field.type === 'TYPE_MESSAGE' ? this.shape(this.resolve(descriptor, field)) : null;
      shape.set(field.number, {
        name: field.name,
        repeated: field.label === 'LABEL_REPEATED',
        wire: FIXED64.has(field.type) ? 1 : FIXED32.has(field.type) ? 5 : DELIMITED.has(field.type) ? 2 : 0,
        message,
      });
    }
    return shape;
  }

  /** A field's message type: one nested in its message (a map's entry), else one of the package's. */
  private resolve(parent: MessageDescriptor, field: FieldDescriptor): MessageDescriptor {
    const nested = parent.nestedType.find((type) => type.name === field.typeName);
    if (nested) return nested;
    const name = field.typeName.startsWith('.') ? field.typeName.slice(1) : field.typeName;
    const found = this.definition[name.includes('.') ? name : `${this.packageName}.${name}`];
    if (!found || !('type' in found)) {
      throw new Error(`${parent.name}.${field.name}: message type ${field.typeName} is not in the proto`);
    }
    return asDescriptor(found.type);
  }
}

function asDescriptor(type: object): MessageDescriptor {
  if (!(
    'field' in type &&
    Array.isArray(type.field) &&
    'nestedType' in type &&
    Array.isArray(type.nestedType)
  )) {
    throw new Error('not a message descriptor');
  }
  const name = 'name' in type && typeof type.name === 'string' ? type.name : '';
  return {
    name,
    field: type.field.map(asField),
    nestedType: type.nestedType.map((nested: unknown) => {
      if (typeof nested !== 'object' || nested === null) throw new Error(`${name}: bad nested type`);
      return asDescriptor(nested);
    }),
  };
}

function asField(field: unknown): FieldDescriptor {
  if (
    typeof field === 'object' &&
    field !== null &&
    'name' in field &&
    typeof field.name === 'string' &&
    'number' in field &&
    typeof field.number === 'number' &&
    'label' in field &&
    typeof field.label === 'string' &&
    'type' in field &&
    typeof field.type === 'string' &&
    'typeName' in field &&
    typeof field.typeName === 'string'
  ) {
    return {
      name: field.name,
      number: field.number,
      label: field.label,
      type: field.type,
      typeName: field.typeName,
    };
  }
  throw new Error('not a field descriptor');
}

/**
 * Throws an InvalidArgumentError when `bytes`, a request of shape `shape`, holds more than `max`
 * values, naming the field that holds most of them (the fields inside a list's items count as the
 * list's), or when they are not protobuf that the shape could decode without guessing: a known
 * field on the wire with another wire type than its own would make the decoder read the bytes
 * as something other than what was counted.
 */
export function checkValueCount(shape: MessageShape, bytes: Uint8Array, max = MAX_REQUEST_VALUES): void {
  const counter = new ValueCounter(bytes, max);
  counter.message(shape, 0, bytes.length, '', null);
}

class ValueCounter {
  private total = 0;
  private readonly byField = new Map<string, number>();
  private pos = 0;

  constructor(
    private readonly bytes: Uint8Array,
    private readonly max: number,
  ) {}

  /** The fields of one message between `start` and `end`; `owner` is the list it is an item of. */
  message(shape: MessageShape, start: number, end: number, prefix: string, owner: string | null): void {
    this.pos = start;
    while (this.pos < end) {
      const tag = this.varint(end, () => prefix || 'request');
      const number = Math.floor(tag / 8);
      const wire = tag % 8;
      const field = shape.get(number);
      // Named only where needed: most values are items of a list, and count as the list's.
      const path = (): string => join(prefix, field?.name ?? String(number));
      const countAs = owner !== null && !field?.repeated ? owner : path();
      if (number === 0) this.malformed(path(), 'field number 0');
      if (field && wire !== field.wire && !(wire === 2 && field.repeated && field.wire !== 2)) {
        this.malformed(path(), `wire type ${wire} where the field has ${field.wire}`);
      }
      switch (wire) {
        case 0:
          this.varint(end, path);
          this.count(countAs, 1);
          break;
        case 1:
        case 5:
          this.skip(wire === 1 ? 8 : 4, end, path);
          this.count(countAs, 1);
          break;
        case 2: {
          const length = this.varint(end, path);
          const from = this.pos;
          this.skip(length, end, path);
          this.count(countAs, 1);
          if (field?.message) {
            this.message(field.message, from, from + length, path(), field.repeated ? countAs : owner);
          } else if (field && field.wire !== 2) {
            // A packed list: one wire field, a value per number in it.
            this.count(countAs, this.packedCount(field.wire, from, from + length, path));
          }
          this.pos = from + length;
          break;
        }
        default:
          this.malformed(path(), `wire type ${wire}`);
      }
    }
  }

  private count(field: string, n: number): void {
    this.total += n;
    this.byField.set(field, (this.byField.get(field) ?? 0) + n);
    if (this.total <= this.max) return;
    let most = field;
    for (const [name, count] of this.byField) if (count > (this.byField.get(most) ?? 0)) most = name;
    throw new InvalidArgumentError(
      most,
      `too many values: the request holds more than ${this.max} (${this.byField.get(most) ?? 0} of them here), the most berth decodes in one request; each list item, map entry and protobuf field counts one`,
    );
  }

  private packedCount(wire: WireType, start: number, end: number, path: () => string): number {
    if (wire !== 0) {
      const width = wire === 1 ? 8 : 4;
      if ((end - start) % width !== 0) this.malformed(path(), 'a packed list cut in the middle of a number');
      return (end - start) / width;
    }
    let numbers = 0;
    for (let i = start; i < end; i++) if ((this.bytes[i] ?? 0) < 0x80) numbers++;
    if (end > start && (this.bytes[end - 1] ?? 0) >= 0x80)
      this.malformed(path(), 'a packed list cut in the middle of a number');
    return numbers;
  }

  /** A varint as a number: tags and lengths are below 2^32; larger values are only skipped. */
  private varint(end: number, path: () => string): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= end) this.malformed(path(), 'a number cut off');
      const byte = this.bytes[this.pos++] ?? 0;
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if (byte < 0x80) return value;
    }
    return this.malformed(path(), 'a number longer than 10 bytes');
  }

  private skip(n: number, end: number, path: () => string): void {
    if (n > end - this.pos) this.malformed(path(), `${n} bytes announced where ${end - this.pos} are left`);
    this.pos += n;
  }

  private malformed(field: string, problem: string): never {
    throw new InvalidArgumentError(field, `is not valid protobuf: ${problem}`);
  }
}

function join(prefix: string, name: string): string {
  return prefix ? `${prefix}.${name}` : name;
}
