import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { restoreProcess } from '../../src/container/restore.js';
import {
  RestoredCredentialsError,
  credentialsMismatch,
  firstMismatch,
  restoredProcesses,
} from '../../src/container/restored-credentials.js';
import type { Logger } from '../../src/log.js';
import type { Container } from '../../src/model/container.js';
import type { Sandbox } from '../../src/model/sandbox.js';
import { credentialsFrom } from '../../src/process/identity.js';
import type { RuntimeHandler } from '../../src/runtime/index.js';

const IDENTITY = '         0          0 4294967295\n';

function status(uids: string, gids: string, groups: string): string {
  return `Name:\tsleep\nUmask:\t0022\nUid:\t${uids}\nGid:\t${gids}\nGroups:\t${groups}\nNSpid:\t4242\t1\n`;
}

test('all four uids and gids and the groups are read from a status, back into its namespace', () => {
  const text = status('1000\t1000\t0\t1000', '1000\t1000\t1000\t1000', '1000 10 ');
  assert.deepEqual(credentialsFrom(text, IDENTITY, IDENTITY), {
    uids: [1000, 1000, 0, 1000],
    gids: [1000, 1000, 1000, 1000],
    groups: [1000, 10],
  });
  const map = '0 100000 65536\n';
  const mapped = status('101000\t101000\t101000\t101000', '100000\t100000\t100000\t100000', '');
  assert.deepEqual(credentialsFrom(mapped, map, map), {
    uids: [1000, 1000, 1000, 1000],
    gids: [0, 0, 0, 0],
    groups: [],
  });
  assert.equal(
    credentialsFrom('Name:\tx\nUid:\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n', IDENTITY, IDENTITY),
    null,
  );
  assert.equal(credentialsFrom('Name:\tx\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n', IDENTITY, IDENTITY), null);
});

const USER = { uid: 1000, gid: 1000, additionalGids: [1000, 10] };
const ids = (uids: number[], gids: number[], groups: number[]) => ({
  pid: 7,
  credentials: { uids, gids, groups },
});

test("a restored process matches the spec's user only with every id of it", () => {
  const all = (n: number): number[] => [n, n, n, n];
  assert.equal(credentialsMismatch(ids(all(1000), all(1000), [10, 1000]), USER), null);
  // The primary gid counts whether or not the kernel lists it, and order does not matter.
  assert.equal(credentialsMismatch(ids(all(1000), all(1000), [10]), USER), null);
  assert.equal(credentialsMismatch(ids(all(1000), all(1000), [1000, 10, 10]), USER), null);
  // busybox's root as berth builds it: additionalGids [0, 10] (wheel), the kernel's Groups "0 10".
  assert.equal(
    credentialsMismatch(ids(all(0), all(0), [0, 10]), { uid: 0, gid: 0, additionalGids: [0, 10] }),
    null,
  );
  // No user in the spec: runc's defaults.
  assert.equal(credentialsMismatch(ids(all(0), all(0), []), undefined), null);

  const root = credentialsMismatch(ids(all(0), all(0), [0]), USER);
  assert.match(root ?? '', /process 7 runs with uids 0\/0\/0\/0 gids 0\/0\/0\/0 groups \[0\]/);
  assert.match(root ?? '', /the spec's user is uid 1000 gid 1000 groups \[10,1000\]/);
  for (const [uids, gids, groups] of [
    [[1000, 0, 1000, 1000], all(1000), [10]],
    [[1000, 1000, 0, 1000], all(1000), [10]],
    [[1000, 1000, 1000, 0], all(1000), [10]],
    [all(1000), [1000, 1000, 0, 1000], [10]],
    [all(1000), all(1000), [10, 0]],
    [all(1000), all(1000), []],
  ] as const) {
    assert.notEqual(
      credentialsMismatch(ids([...uids], [...gids], [...groups]), USER),
      null,
      `${uids} ${gids} ${groups}`,
    );
  }
  assert.match(
    credentialsMismatch({ pid: 7, credentials: null }, USER) ?? '',
    /process 7 has unreadable credentials/,
  );
  assert.match(
    firstMismatch([ids(all(1000), all(1000), [10]), { ...ids(all(0), all(1000), [10]), pid: 9 }], USER) ?? '',
    /process 9 runs with uids 0/,
  );
});

/** A dir laid out like /proc: each process' status (with its parent) and id maps. */
async function fakeProc(processes: Record<number, { status: string; parent: number }>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'berth-fake-proc-'));
  for (const [pid, { status: text, parent }] of Object.entries(processes)) {
    await mkdir(join(root, pid, 'task', pid), { recursive: true });
    await writeFile(join(root, pid, 'status'), `${text}PPid:\t${parent}\n`);
    await writeFile(join(root, pid, 'uid_map'), IDENTITY);
    await writeFile(join(root, pid, 'gid_map'), IDENTITY);
  }
  await mkdir(join(root, 'self'));
  return root;
}

test('the reader takes the init and every process below it, none beside it, and skips one that has gone', async () => {
  const user = status('1000\t1000\t1000\t1000', '1000\t1000\t1000\t1000', '10 1000');
  const root = status('0\t0\t0\t0', '0\t0\t0\t0', '0');
  const proc = await fakeProc({
    1: { status: root, parent: 0 },
    90: { status: root, parent: 1 },
    100: { status: user, parent: 90 },
    101: { status: user, parent: 100 },
    103: { status: user, parent: 100 },
    // 104's parent, 102, is in no dir: it ended between the reads, and took nothing of the tree.
    104: { status: root, parent: 102 },
    105: { status: root, parent: 103 },
    200: { status: root, parent: 1 },
  });
  try {
    const found = await restoredProcesses(100, proc);
    assert.deepEqual(
      found.map((p) => p.pid).sort((a, b) => a - b),
      [100, 101, 103, 105],
    );
    assert.match(firstMismatch(found, USER) ?? '', /process 105 runs with uids 0\/0\/0\/0/);
    assert.equal(
      firstMismatch(
        found.filter((p) => p.pid !== 105),
        USER,
      ),
      null,
    );
    assert.deepEqual(await restoredProcesses(300, proc), []);
  } finally {
    await rm(proc, { recursive: true, force: true });
  }
});

/** restoreProcess over a runtime whose restore "restores" a sleep of this test's own ids. */
async function restoreOf(user: { uid: number; gid: number; additionalGids: number[] }): Promise<{
  error: unknown;
  calls: string[];
}> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-restore-creds-'));
  const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
  const calls: string[] = [];
  try {
    const bundleDir = join(dir, 'bundle');
    await mkdir(bundleDir);
    await writeFile(join(bundleDir, 'config.json'), JSON.stringify({ process: { user } }));
    const runtime = {
      restore: () => Promise.resolve({ pid: sleeper.pid ?? 0, monitorPid: 4242 }),
      kill: (id: string, signal: string, opts?: { all?: boolean }) => {
        calls.push(`kill ${id} ${signal} ${opts?.all === true ? 'all' : 'init'}`);
        sleeper.kill('SIGKILL');
        return Promise.resolve();
      },
      release: (id: string, monitorPid: number) => {
        calls.push(`release ${id} ${monitorPid}`);
        return Promise.resolve();
      },
    } as unknown as RuntimeHandler;
    const container = {
      id: 'c1',
      bundleDir,
      logPath: '',
      spec: { stdin: false, stdinOnce: false, tty: false, metadata: { name: 'c' } },
    } as unknown as Container;
    const sandbox = { spec: { metadata: { namespace: 'ns', name: 'pod' } } } as unknown as Sandbox;
    const logger = { warn: () => undefined } as unknown as Logger;
    const error = await restoreProcess(
      { config: { rootDir: dir } } as never,
      runtime,
      container,
      sandbox,
      logger,
    ).then(
      () => null,
      (err: unknown) => err,
    );
    return { error, calls };
  } finally {
    sleeper.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
}

test('a restore whose process has other ids than the spec is killed, released and refused', async () => {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  const refused = await restoreOf({ uid: uid + 1000, gid, additionalGids: [gid] });
  assert.ok(refused.error instanceof RestoredCredentialsError, String(refused.error));
  assert.match(refused.error.message, new RegExp(`runs with uids ${uid}/${uid}/${uid}/${uid} `));
  assert.match(refused.error.message, new RegExp(`the spec's user is uid ${uid + 1000} gid ${gid}`));
  assert.deepEqual(refused.calls, ['kill c1 SIGKILL all', 'release c1 4242']);

  // The same process under a spec of its own ids (its groups as the kernel lists them) runs on.
  const groups = process.getgroups?.() ?? [];
  const kept = await restoreOf({ uid, gid, additionalGids: groups });
  assert.equal(kept.error, null);
  assert.deepEqual(kept.calls, []);
});
