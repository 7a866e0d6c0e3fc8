/** CDI spec files and names as berth reads them: what is accepted, and what each refusal names. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseQualifiedName } from '../../src/cdi/names.js';
import { CdiSpecParser } from '../../src/cdi/parser.js';
import { CdiSpecError, flowDepthOver, MAX_SPEC_DEPTH, parseCdiSpec } from '../../src/cdi/spec.js';

const minimal = (over: Record<string, unknown> = {}): string =>
  JSON.stringify({
    cdiVersion: '0.6.0',
    kind: 'vendor.com/gpu',
    devices: [{ name: 'g0', containerEdits: { env: ['A=1'] } }],
    ...over,
  });

test('JSON and YAML of the same spec read alike, with defaults filled', () => {
  const yaml = [
    'cdiVersion: "0.6.0"',
    'kind: vendor.com/gpu',
    'devices:',
    '  - name: g0',
    '    containerEdits:',
    '      env: [A=1]',
  ].join('\n');
  const fromJson = parseCdiSpec('/etc/cdi/a.json', minimal());
  const fromYaml = parseCdiSpec('/etc/cdi/a.yaml', yaml);
  assert.deepEqual({ ...fromJson, file: '' }, { ...fromYaml, file: '' });
  assert.deepEqual(fromJson.devices.get('g0')?.env, ['A=1']);
  assert.deepEqual(fromJson.edits.deviceNodes, []);
  const node = parseCdiSpec(
    'x.json',
    minimal({ devices: [{ name: 'g0', containerEdits: { deviceNodes: [{ path: '/dev/g0' }] } }] }),
  ).devices.get('g0')?.deviceNodes[0];
  assert.deepEqual(node, { path: '/dev/g0', hostPath: '/dev/g0', permissions: 'rwm' });
});

test('each refusal names the file and the field', () => {
  const cases: [string, string, RegExp][] = [
    ['not json or yaml', '{{{', /neither JSON nor YAML/],
    ['unknown version', minimal({ cdiVersion: '9.0.0' }), /cdiVersion "9.0.0" is not one berth reads/],
    ['bad kind', minimal({ kind: 'gpu' }), /kind "gpu" is not vendor.com\/class/],
    ['no devices', minimal({ devices: [] }), /devices is empty/],
    [
      'twice',
      minimal({
        devices: [
          { name: 'a', containerEdits: {} },
          { name: 'a', containerEdits: {} },
        ],
      }),
      /devices\[1\]\.name "a" is defined twice/,
    ],
    ['bad name', minimal({ devices: [{ name: '-a', containerEdits: {} }] }), /devices\[0\]\.name/],
    [
      'relative node',
      minimal({ devices: [{ name: 'a', containerEdits: { deviceNodes: [{ path: 'dev/a' }] } }] }),
      /deviceNodes\[0\]\.path "dev\/a" is not an absolute path/,
    ],
    [
      'bad access',
      minimal({
        devices: [{ name: 'a', containerEdits: { deviceNodes: [{ path: '/dev/a', permissions: 'rx' }] } }],
      }),
      /permissions "rx"/,
    ],
    [
      'bad env',
      minimal({ devices: [{ name: 'a', containerEdits: { env: ['NOEQUALS'] } }] }),
      /env\[0\] is not NAME=value/,
    ],
    [
      'bad hook',
      minimal({
        devices: [{ name: 'a', containerEdits: { hooks: [{ hookName: 'later', path: '/bin/x' }] } }],
      }),
      /hookName "later"/,
    ],
    [
      'major 2^32-1',
      minimal({
        devices: [
          { name: 'a', containerEdits: { deviceNodes: [{ path: '/dev/a', major: 4294967295, minor: 1 }] } },
        ],
      }),
      /deviceNodes\[0\]\.major is past 4095/,
    ],
    [
      'minor 2^32-1',
      minimal({
        devices: [
          { name: 'a', containerEdits: { deviceNodes: [{ path: '/dev/a', major: 1, minor: 4294967295 }] } },
        ],
      }),
      /deviceNodes\[0\]\.minor is past 1048575/,
    ],
    [
      'negative gid',
      minimal({ devices: [{ name: 'a', containerEdits: { additionalGIDs: [-1] } }] }),
      /additionalGIDs\[0\]/,
    ],
  ];
  for (const [what, text, expected] of cases) {
    assert.throws(
      () => parseCdiSpec('/etc/cdi/v.json', text),
      (err: unknown) =>
        err instanceof CdiSpecError &&
        err.message.startsWith('CDI spec /etc/cdi/v.json: ') &&
        expected.test(err.message),
      what,
    );
  }
});

test('edits berth cannot apply are kept as such, for the device that has them to be refused', () => {
  const spec = parseCdiSpec(
    'x.json',
    minimal({ devices: [{ name: 'a', containerEdits: { intelRdt: { closID: 'x' } } }] }),
  );
  assert.deepEqual(spec.devices.get('a')?.unsupported, ['intelRdt']);
});

test('qualified names', () => {
  assert.deepEqual(parseQualifiedName('nvidia.com/gpu=0'), { kind: 'nvidia.com/gpu', name: '0' });
  assert.deepEqual(parseQualifiedName('vendor.com/class=all:1.2_x-y'), {
    kind: 'vendor.com/class',
    name: 'all:1.2_x-y',
  });
  for (const bad of [
    'gpu',
    'nvidia.com=0',
    'nvidia.com/gpu=',
    '/gpu=0',
    'v.com/g.pu=0',
    'v.com/gpu=a b',
    'v.com/gpu=-a',
  ]) {
    assert.equal(typeof parseQualifiedName(bad), 'string', bad);
  }
});

test('the depth scan counts flow brackets, not those quoted, and refuses past the cap', () => {
  assert.equal(flowDepthOver('{"a": [[1], {"b": "[[[[["}]}', 3), null);
  assert.equal(flowDepthOver(`a: ['it''s [[[[', "\\"[[[["]`, 2), null);
  // A quote in a plain scalar opens nothing: the brackets after it still count.
  assert.equal(flowDepthOver('[a", [[[', 3), 7);
  // Closing brackets in a string cannot hide the opens that follow.
  assert.equal(flowDepthOver('[[ "]]]]]]" [[', 3), 13);
  assert.throws(
    () =>
      parseCdiSpec('/etc/cdi/deep.json', `{"x": ${'['.repeat(MAX_SPEC_DEPTH)}${']'.repeat(MAX_SPEC_DEPTH)}}`),
    (err: unknown) =>
      err instanceof CdiSpecError && /deep\.json: nests deeper than 64 levels/.test(err.message),
  );
});

test('a spec whose parse runs out of heap or time is refused and the next one parses', async () => {
  // Block YAML the depth scan does not see: each line a level deeper.
  const deep = `x:\n${Array.from({ length: 3000 }, (_, i) => `${' '.repeat(i + 1)}a${i}:`).join('\n')}\n`;
  const parser = new CdiSpecParser({ heapMb: 256, timeoutMs: 1 });
  const slow = await parser.parse('/etc/cdi/slow.yaml', deep);
  assert.ok(slow instanceof CdiSpecError);
  assert.match(slow.message, /slow\.yaml: takes over 1 ms to parse/);
  const small = new CdiSpecParser({ heapMb: 16, timeoutMs: 60_000 });
  // Flat, but a parse tree far over 16 MB.
  const long = `devices:\n${Array.from({ length: 200_000 }, (_, i) => `  - {name: d${i}}\n`).join('')}`;
  const big = await small.parse('/etc/cdi/big.yaml', long);
  assert.ok(big instanceof CdiSpecError);
  assert.match(big.message, /big\.yaml: needs more than 16 MB to parse/);
  const fine = await small.parse('/etc/cdi/a.json', minimal());
  assert.ok(!(fine instanceof CdiSpecError), String(fine));
  assert.deepEqual(fine.devices.get('g0')?.env, ['A=1']);
});
