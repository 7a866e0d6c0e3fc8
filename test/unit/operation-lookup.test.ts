/** Finding a record by exact id or unique prefix, as crictl's truncated ids need. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidArgumentError, NotFoundError } from '../../src/errors.js';
import { findByIdOrPrefix, matchesLabels, type RecordKind } from '../../src/operation/lookup.js';

interface Row {
  id: string;
  ready: boolean;
}

function records(rows: Row[]): { get(id: string): Row | undefined; findByIdPrefix(prefix: string): Row[] } {
  return {
    get: (id) => rows.find((r) => r.id === id),
    findByIdPrefix: (prefix) => rows.filter((r) => prefix !== '' && r.id.startsWith(prefix)),
  };
}

const ROW: RecordKind<Row> = { field: 'row_id', noun: 'row', plural: 'rows' };
const READY_ROW: RecordKind<Row> = { ...ROW, hidden: (r) => !r.ready };

describe('findByIdOrPrefix', () => {
  const rows = records([
    { id: 'abc123', ready: true },
    { id: 'abd456', ready: true },
    { id: 'abe789', ready: false },
    { id: 'ab', ready: true },
  ]);

  it('takes an exact id before prefixes, and a unique prefix', () => {
    assert.equal(findByIdOrPrefix(rows, 'ab', ROW, false).id, 'ab');
    assert.equal(findByIdOrPrefix(rows, 'abc', ROW, false).id, 'abc123');
  });

  it('blames an ambiguous prefix on the field, counting the matches', () => {
    assert.throws(
      () =>
        findByIdOrPrefix(
          records([
            { id: 'x1', ready: true },
            { id: 'x2', ready: true },
          ]),
          'x',
          ROW,
          true,
        ),
      (err: unknown) => err instanceof InvalidArgumentError && err.message.includes('"x" matches 2 rows'),
    );
  });

  it('a missing record is NotFound, or undefined when allowed', () => {
    assert.throws(() => findByIdOrPrefix(rows, 'zz', ROW, false), NotFoundError);
    assert.equal(findByIdOrPrefix(rows, 'zz', ROW, true), undefined);
  });

  it('does not see hidden records, by exact id or by prefix', () => {
    assert.equal(findByIdOrPrefix(rows, 'abe789', READY_ROW, true), undefined);
    assert.equal(findByIdOrPrefix(rows, 'abe', READY_ROW, true), undefined);
    assert.equal(findByIdOrPrefix(rows, 'abe', ROW, false).id, 'abe789');
  });
});

describe('matchesLabels', () => {
  it('needs every selected key with exactly its value; no selector matches all', () => {
    const labels = { app: 'web', tier: 'front' };
    assert.equal(matchesLabels(labels, undefined), true);
    assert.equal(matchesLabels(labels, { app: 'web' }), true);
    assert.equal(matchesLabels(labels, { app: 'web', tier: 'back' }), false);
    assert.equal(matchesLabels(labels, { missing: '' }), false);
  });
});
