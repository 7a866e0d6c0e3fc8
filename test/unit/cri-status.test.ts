/** Domain errors to gRPC codes: the typed answers a kubelet can act on. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { grpcCode, toServiceError } from '../../src/cri/status.js';
import { ExecError, StepError } from '../../src/errors.js';
import { RegistryUnavailableError } from '../../src/registry/errors.js';

function errno(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

describe('grpcCode', () => {
  it('a full disk is RESOURCE_EXHAUSTED wherever it struck', () => {
    assert.equal(
      grpcCode(errno('ENOSPC: no space left on device, write', 'ENOSPC')),
      status.RESOURCE_EXHAUSTED,
    );
    assert.equal(grpcCode(errno('database or disk is full', 'SQLITE_FULL')), status.RESOURCE_EXHAUSTED);
    const runc = new ExecError('runc create', 1, 'mkdir /run/x: no space left on device', false);
    assert.equal(grpcCode(new StepError('spec', runc)), status.RESOURCE_EXHAUSTED);
    const wrapped = new Error('pull failed', { cause: errno('write failed', 'ENOSPC') });
    assert.equal(grpcCode(wrapped), status.RESOURCE_EXHAUSTED);
  });

  it('no file descriptor left is RESOURCE_EXHAUSTED, not an internal error', () => {
    const open = errno("EMFILE: too many open files, open '/var/lib/berth/x'", 'EMFILE');
    assert.equal(grpcCode(open), status.RESOURCE_EXHAUSTED);
    assert.equal(grpcCode(errno('file table overflow', 'ENFILE')), status.RESOURCE_EXHAUSTED);
    const runc = new ExecError('runc exec', 1, 'open /proc/self/fd: too many open files', false);
    assert.equal(grpcCode(new StepError('spec', runc)), status.RESOURCE_EXHAUSTED);
  });

  it('a host program that ran out of time is DEADLINE_EXCEEDED, also inside a step', () => {
    const plugin = new ExecError('/usr/lib/cni/bridge', undefined, '', true);
    assert.equal(grpcCode(plugin), status.DEADLINE_EXCEEDED);
    assert.equal(grpcCode(new StepError('cni-add', plugin)), status.DEADLINE_EXCEEDED);
    assert.equal(grpcCode(new ExecError('runc', 1, 'boom', false)), status.UNKNOWN);
  });

  it('no registry endpoint answering is UNAVAILABLE', () => {
    const err = new RegistryUnavailableError('pull 127.0.0.1:1/x:1', [
      { endpoint: 'http://127.0.0.1:1', error: new Error('connect ECONNREFUSED 127.0.0.1:1') },
    ]);
    assert.equal(grpcCode(err), status.UNAVAILABLE);
  });
});

describe('toServiceError', () => {
  it('cuts a message at 4096 characters, saying how much was left out', () => {
    const err = toServiceError(new Error(`bad: ${'x'.repeat(110_000)}`));
    assert.ok(err.details.length < 4200);
    assert.match(err.details, /more characters\)$/);
  });
});
