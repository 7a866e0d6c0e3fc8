/**
 * The generated wire types describe what grpc-js really hands over: they are made with the options
 * the loader decodes with, and the typed tables refuse what does not fit the proto.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { loadSync } from '@grpc/proto-loader';
import type { ImageServiceHandlers } from '../../src/cri/generated/runtime/v1/ImageService.js';
import type { RuntimeServiceHandlers } from '../../src/cri/generated/runtime/v1/RuntimeService.js';
import type { RpcEdge, UnaryHandlers } from '../../src/cri/handler.js';
import { loadCriServices, MalformedRequest, PROTO_LOADER_OPTIONS, PROTO_PATH } from '../../src/cri/loader.js';
import { checkValueCount, MAX_REQUEST_VALUES, WireShapes } from '../../src/cri/wire-budget.js';
import { InvalidArgumentError } from '../../src/errors.js';

const PACKAGE_JSON = new URL('../../../package.json', import.meta.url);
/** Flags of proto-loader-gen-types that say where and for what to write, not how to decode. */
const OUTPUT_FLAGS = new Set(['grpcLib', 'importFileExtension', 'outDir']);

test('npm run generate passes the generator exactly the options the loader decodes with', async () => {
  const scripts: unknown = JSON.parse(await readFile(PACKAGE_JSON, 'utf8')).scripts;
  assert.ok(scripts && typeof scripts === 'object' && 'generate' in scripts);
  const command = String(scripts.generate);
  assert.match(command, /\bproto-loader-gen-types\b/);
  const decoding = [...command.matchAll(/--(\w+)(?:=(\S+))?/g)]
    .filter(([, name]) => name !== undefined && !OUTPUT_FLAGS.has(name))
    .map(([flag]) => flag)
    .sort();
  const loader = Object.entries(PROTO_LOADER_OPTIONS)
    .map(([name, value]) => (value === true ? `--${name}` : `--${name}=${value.name}`))
    .sort();
  assert.deepEqual(decoding, loader);
});

test('an enum number the proto has no name for is decoded as that number', () => {
  const mount = loadSync(PROTO_PATH, PROTO_LOADER_OPTIONS)['runtime.v1.Mount'];
  assert.ok(mount && 'format' in mount && mount.format === 'Protocol Buffer 3 DescriptorProto');
  const propagation = (value: number): unknown => {
    const decoded = mount.deserialize(mount.serialize({ propagation: value }));
    return 'propagation' in decoded ? decoded.propagation : undefined;
  };
  assert.equal(propagation(2), 'PROPAGATION_BIDIRECTIONAL');
  assert.equal(propagation(7), 7);
});

// Checked by tsc: each @ts-expect-error fails the build when its line compiles.
export function tablesThatMustNotCompile(edge: RpcEdge): void {
  void ({
    // @ts-expect-error: a misspelled rpc
    RunPodSandboxx: async () => ({ pod_sandbox_id: '' }),
  } satisfies UnaryHandlers<RuntimeServiceHandlers>);

  void ({
    // @ts-expect-error: another rpc's request type
    StopPodSandbox: async (req: { container_id: string }) => ({ id: req.container_id }),
  } satisfies UnaryHandlers<RuntimeServiceHandlers>);

  // @ts-expect-error: StreamImages is missing
  const missing: ImageServiceHandlers = {
    ListImages: edge.unimplemented(),
    ImageStatus: edge.unimplemented(),
    PullImage: edge.unimplemented(),
    RemoveImage: edge.unimplemented(),
    ImageFsInfo: edge.unimplemented(),
  };
  void missing;
}

// --- Counted before decoding (wire-budget.ts) ----------------------------------------------------

const definition = loadSync(PROTO_PATH, PROTO_LOADER_OPTIONS);
const shapes = new WireShapes(definition, 'runtime.v1');

/** A message type of the proto: its shape, and its encoder. */
function messageType(name: string): { shape: ReturnType<WireShapes['of']>; encode: (m: object) => Buffer } {
  const found = definition[`runtime.v1.${name}`];
  assert.ok(found && 'format' in found && found.format === 'Protocol Buffer 3 DescriptorProto');
  return { shape: shapes.of(found.type), encode: (m) => found.serialize(m) };
}

/** The field an InvalidArgumentError from `fn` names. */
function refusedField(fn: () => void): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof InvalidArgumentError, String(err));
    return err.field;
  }
  return assert.fail('not refused');
}

/** `n` copies of one encoded field. */
const repeated = (field: number[], n: number): Buffer => Buffer.concat(Array(n).fill(Buffer.from(field)));

test('values are counted at every depth, and the field that holds most of them is named', () => {
  const list = messageType('ListContainersRequest');
  const selector = (n: number) =>
    list.encode({
      filter: { label_selector: Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v'])) },
    });
  // The filter, then a map entry, its key and its value: 1 + 3n values.
  checkValueCount(list.shape, selector(3), 10);
  assert.equal(
    refusedField(() => checkValueCount(list.shape, selector(4), 10)),
    'filter.label_selector',
  );

  const pod = messageType('RunPodSandboxRequest');
  const groups = (n: number) =>
    pod.encode({
      config: { linux: { security_context: { supplemental_groups: Array<string>(n).fill('7') } } },
    });
  // Packed: one field on the wire, a value per number in it.
  checkValueCount(pod.shape, groups(6), 10);
  assert.equal(
    refusedField(() => checkValueCount(pod.shape, groups(7), 10)),
    'config.linux.security_context.supplemental_groups',
  );

  // A field that is no list, sent again and again: each copy is decoded, so each counts.
  const exec = messageType('ExecSyncRequest');
  assert.equal(
    refusedField(() => checkValueCount(exec.shape, repeated([0x0a, 0x01, 0x61], 11), 10)),
    'container_id',
  );
  // Fields the proto does not know are skipped by the decoder, one at a time: they count too.
  assert.equal(
    refusedField(() => checkValueCount(exec.shape, repeated([0x78, 0x01], 11), 10)),
    '15',
  );
});

test('bytes a decoder would read otherwise than they are counted are refused, naming the field', () => {
  const exec = messageType('ExecSyncRequest');
  // timeout (an int64) as length-delimited: the decoder would read the length as the number and
  // go on inside the bytes, where the count did not look.
  const hidden = repeated([0x0a, 0x00], 1000);
  const timeoutAsBytes = Buffer.concat([Buffer.from([0x1a, 0xd0, 0x0f]), hidden]);
  assert.equal(
    refusedField(() => checkValueCount(exec.shape, timeoutAsBytes, 10)),
    'timeout',
  );
  assert.equal(
    refusedField(() => checkValueCount(exec.shape, Buffer.from([0x0a, 0x05, 0x61]))),
    'container_id',
  );
  // Numbers cut off: the value of timeout (3), and a tag.
  assert.equal(
    refusedField(() => checkValueCount(exec.shape, Buffer.from([0x18, 0xff]))),
    'timeout',
  );
  assert.equal(
    refusedField(() => checkValueCount(exec.shape, Buffer.from([0xff]))),
    'request',
  );
  assert.equal(
    refusedField(() => checkValueCount(exec.shape, Buffer.from([0x7b, 0x7c]))),
    '15',
  );
  // A packed list cut in the middle of a number: config (1) > linux (8) > security_context (2) >
  // supplemental_groups (5), holding 1 and the first byte of another.
  const pod = messageType('RunPodSandboxRequest');
  const cut = Buffer.from([0x0a, 0x08, 0x42, 0x06, 0x12, 0x04, 0x2a, 0x02, 0x01, 0xff]);
  assert.equal(
    refusedField(() => checkValueCount(pod.shape, cut)),
    'config.linux.security_context.supplemental_groups',
  );
});

test('the largest requests berth takes are decoded; the probe’s are refused before decoding', () => {
  const runtime = loadCriServices().runtime;
  const decode = (rpc: string, message: object): unknown => {
    const method = runtime[rpc];
    assert.ok(method);
    return method.requestDeserialize(method.requestSerialize(message));
  };
  const envs = Array.from({ length: 16_384 }, (_, i) => ({ key: `K${i}`, value: Buffer.from('v') }));
  const config = { metadata: { name: 'c' }, envs, command: Array<string>(16_384).fill('a') };
  assert.ok(!(decode('CreateContainer', { pod_sandbox_id: 'p', config }) instanceof MalformedRequest));
  const groups = Array<string>(65_536).fill('4000');
  const pod = { config: { linux: { security_context: { supplemental_groups: groups } } } };
  assert.ok(!(decode('RunPodSandbox', pod) instanceof MalformedRequest));

  const label_selector = Object.fromEntries(Array.from({ length: 500_000 }, (_, i) => [`k${i}`, 'v']));
  const refused = decode('ListContainers', { filter: { label_selector } });
  assert.ok(refused instanceof MalformedRequest);
  assert.equal(refused.error.field, 'filter.label_selector');
  assert.match(refused.error.message, new RegExp(`more than ${MAX_REQUEST_VALUES}`));
});
