/**
 * A restore's container takes its terminal from the archive: criu brings the process back on the
 * stdio it had, and conmon must offer runc a console exactly when that is a terminal.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CheckpointSource } from '../../src/container/restore.js';
import { restoredRequest } from '../../src/container/restore.js';
import type { Spec } from '../../src/oci/spec.js';
import { containerSpec } from '../harness/container-spec.js';

function sourceWith(spec: Spec): CheckpointSource {
  return { archive: { spec } } as unknown as CheckpointSource;
}

describe('the request a restore carries out', () => {
  it("takes the archive's terminal over the request's, either way", () => {
    const onTty = sourceWith({
      ociVersion: '1.0.2',
      process: { args: ['sh'], cwd: '/', user: { uid: 0, gid: 0 }, terminal: true },
    });
    const onPipes = sourceWith({
      ociVersion: '1.0.2',
      process: { args: ['sh'], cwd: '/', user: { uid: 0, gid: 0 } },
    });
    assert.equal(restoredRequest(containerSpec({ tty: false }), onTty).tty, true);
    assert.equal(restoredRequest(containerSpec({ tty: true }), onPipes).tty, false);
  });

  it('leaves a request that agrees as it is', () => {
    const asked = containerSpec({ tty: true, stdin: true });
    const source = sourceWith({
      ociVersion: '1.0.2',
      process: { args: ['sh'], cwd: '/', user: { uid: 0, gid: 0 }, terminal: true },
    });
    assert.equal(restoredRequest(asked, source), asked);
  });

  it('an archive whose spec has no process gives no terminal', () => {
    assert.equal(
      restoredRequest(containerSpec({ tty: true }), sourceWith({ ociVersion: '1.0.2' })).tty,
      false,
    );
  });
});
