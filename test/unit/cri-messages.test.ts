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
import { PROTO_LOADER_OPTIONS, PROTO_PATH } from '../../src/cri/loader.js';

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
