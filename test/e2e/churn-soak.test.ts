/**
 * A bounded churn soak, end to end: 300 pod lifecycles against a real berthd (a pod, a busybox
 * container from a loopback registry under conmon and runc, one exec, its log read back, then
 * kubelet's stop and remove of both), a few at a time, with a kill -9 of berthd while some are in
 * flight, after which kubelet's stop and remove of what the restarted berthd lists clears them.
 * What berthd holds (fds, threads) and what it leaves on the host (mounts, cgroups, conmons, netns
 * files, leases, runc containers, rows, files and disk under its root and state dirs) is compared
 * at quiet points, with no pod left, against a baseline taken after a warm-up: none may grow. A
 * restarted berthd's own fds and threads get a baseline of their own. A test, not a
 * benchmark: it prints its figures and times as diagnostics so that they can be quoted. Needs
 * root. Traffic goes to loopback only.
 */
import assert from 'node:assert/strict';
import type { Dirent } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { describe, test } from 'node:test';
import { run } from '../../src/exec.js';
import { isRunning } from '../../src/process/index.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { hierarchiesHolding, hostCgroups } from '../harness/cgroups.js';
import { parseCriLogLine } from '../harness/cri-log.js';
import { databasePath, selectRows } from '../harness/database.js';
import { TestDaemon, useDaemon } from '../harness/daemon.js';
import { namesIn } from '../harness/files.js';
import { useBusyboxImage } from '../harness/images.js';
import { startAndLog } from '../harness/log.js';
import { mountPointsBelow } from '../harness/mounts.js';
import { containerConfig, execSync, runPod, startContainer } from '../harness/pods.js';
import { inPool } from '../harness/pool.js';
import { registrySkip as skip } from '../harness/skip.js';
import { deferred, waitFor } from '../harness/wait.js';

/** The requirement: this many lifecycles, the ones the kill interrupts among them. */
const LIFECYCLES = 300;
/** Lifecycles run side by side: enough to overlap every step, few enough to stay cheap. */
const CONCURRENCY = 4;
/** Lifecycles run before a baseline is taken: the first ones open what lasts (the WAL, pools). */
const WARM_UP = 10;
/** The first lifecycle of the batch the kill -9 interrupts: the middle of the soak. */
const KILL_AT = 150;
/** Lifecycles started together, a little apart, around the kill. */
const KILL_BATCH = CONCURRENCY;
/** The batch's lifecycle whose exec sets off the kill: the others are at their own steps then. */
const KILL_TRIGGER = KILL_AT + 1;
/**
 * How much bigger berthd's database may end than it began, in KiB of pages (wherever they stand,
 * in the file or still in the WAL). A removed pod's rows leave free pages that SQLite reuses, but
 * the b-tree can keep a few more interior pages after its splits: 300 lifecycles added one 4 KiB
 * page here. Eight pages of slack still catch a leak of rows: a pod row or a container row left
 * per lifecycle is over 100 bytes, 300 times over.
 */
const DB_SLACK_KIB = 32;
/**
 * The WAL's file keeps the size of its longest run between two checkpoints (SQLite truncates it
 * only down to journal_size_limit, which berth leaves unset), and auto-checkpoints come every 1000
 * pages: it ends at about 4 MiB whatever the churn (4052 KiB here), so it is bounded rather than
 * compared. Twice that is a WAL whose checkpoints a reader someone forgot to close holds back.
 */
const WAL_BOUND_KIB = 8192;
/** Looks a quiet berthd's baseline takes the lowest of, and how far apart. */
const QUIET_LOOKS = 3;
const QUIET_LOOK_MS = 500;
/** How long what a removed pod or a returned call held may take to go. */
const SETTLE_BOUND_MS = 20_000;
/**
 * The whole file takes about 150 s here with both cores busy (load 12 to 17: 0.4 to 0.5 s a
 * lifecycle, 4 at a time); this bounds a hang, not the speed.
 */
const FILE_BOUND_MS = 600_000 * BOUND_SCALE;

type Step = 'run' | 'create' | 'log' | 'exec' | 'stop' | 'remove' | 'done';

interface Figures {
  /** berthd's open files. */
  fds: number;
  threads: number;
  /** Below the daemon's base: the netns dir's self-bind, then pods' pins, shm and rootfs. */
  mounts: number;
  /** The daemon's pods' cgroups and their containers', in every hierarchy. */
  cgroups: number;
  conmons: number;
  netns: number;
  /** host-local's leases on the daemon's network. */
  leases: number;
  runc: number;
  /** Sandbox and container rows, listed or not (a journal row is not). */
  rows: number;
  /** Files and dirs under the root and state dirs, the database's own files left out. */
  files: number;
  /** du of the root dir, the database's own files left out. */
  diskKiB: number;
  /** The database's pages. */
  dbKiB: number;
  /** The WAL file, which is bounded, not compared. */
  walKiB: number;
}

/** What berthd's own process holds: a restarted berthd is compared with its own baseline. */
const PROCESS_FIGURES = ['fds', 'threads'] as const;
/** What berthd leaves on the host, which a restart must not lose track of: compared with the first baseline. */
const HOST_FIGURES = [
  'mounts',
  'cgroups',
  'conmons',
  'netns',
  'leases',
  'runc',
  'rows',
  'files',
  'diskKiB',
] as const;

let imageRef: () => string;

describe('churn soak', { skip, timeout: FILE_BOUND_MS }, () => {
  imageRef = useBusyboxImage('berth/soak');
  const daemon = useDaemon({ logLevel: 'info' }, async (d) => {
    await d.cri.callImage('PullImage', { image: { image: imageRef() } });
  });

  test(`${LIFECYCLES} pod lifecycles and a kill -9 leave berthd and the host no bigger`, async (t) => {
    const d = daemon();
    const began = Date.now();
    const ids = new PodIds();
    const say = (what: string): void =>
      t.diagnostic(`${((Date.now() - began) / 1000).toFixed(1)} s: ${what}`);
    const churn = async (from: number, to: number): Promise<void> => {
      const started = Date.now();
      await inPool(range(from, to), CONCURRENCY, (i) => lifecycle(d, i, ids));
      const per = (Date.now() - started) / (to - from);
      say(`lifecycles ${from}..${to - 1} done, ${per.toFixed(0)} ms each (${CONCURRENCY} at a time)`);
    };

    await churn(0, WARM_UP);
    const first = await quiet(d, ids);
    say(`baseline: ${show(first)}`);

    await churn(WARM_UP, KILL_AT);
    const beforeKill = await settled(d, ids, first, [...PROCESS_FIGURES, ...HOST_FIGURES]);
    say(`before the kill: ${show(beforeKill)}`);
    assertNoGrowth(first, beforeKill, [...PROCESS_FIGURES, ...HOST_FIGURES], 'the first berthd');
    assertDatabase(first, beforeKill);

    // The kill: a batch in flight, at whatever steps they have reached when one of them execs.
    const steps = new Map<number, Step>();
    const killNow = deferred();
    let triggered = false;
    let killed = false;
    const batch = range(KILL_AT, KILL_AT + KILL_BATCH).map(async (i, n) => {
      await new Promise((resolve) => setTimeout(resolve, n * 150));
      const onStep = (step: Step): void => {
        steps.set(i, step);
        if (i !== KILL_TRIGGER || step !== 'exec') return;
        triggered = true;
        killNow.resolve();
      };
      return lifecycle(d, i, ids, onStep).then(
        () => 'done',
        (err: unknown) => {
          // Before the kill, a failure is the soak's to report.
          if (!killed) throw err;
          return `interrupted in ${steps.get(i) ?? 'run'}`;
        },
      );
    });
    await Promise.race([killNow.promise, Promise.all(batch)]);
    assert.ok(triggered, 'the kill batch ended before its trigger');
    killed = true;
    await d.signalAndWait('SIGKILL');
    const outcomes = await Promise.all(batch);
    say(`kill -9; lifecycles ${KILL_AT}..${KILL_AT + KILL_BATCH - 1}: ${outcomes.join(', ')}`);
    ids.addFromDatabase(d);
    await startAndLog(d);
    say(`berthd restarted; kubelet's cleanup: ${await kubeletCleanup(d)}`);
    const afterRestart = await settled(d, ids, first, HOST_FIGURES);
    say(`after the restart and cleanup: ${show(afterRestart)}`);
    assertNoGrowth(first, afterRestart, HOST_FIGURES, 'the restart and cleanup');

    const next = KILL_AT + KILL_BATCH;
    await churn(next, next + WARM_UP);
    const second = await quiet(d, ids);
    say(`baseline of the restarted berthd: ${show(second)}`);

    await churn(next + WARM_UP, LIFECYCLES);
    say(`the last cleanup: ${await kubeletCleanup(d)}`);
    const last = await settled(d, ids, second, [...PROCESS_FIGURES, ...HOST_FIGURES]);
    say(`at the end: ${show(last)}`);
    assertNoGrowth(second, last, PROCESS_FIGURES, 'the restarted berthd');
    assertNoGrowth(first, last, HOST_FIGURES, 'the whole soak');
    assertDatabase(first, last);
    say(`${LIFECYCLES} lifecycles in ${((Date.now() - began) / 1000).toFixed(1)} s`);
  });
});

/**
 * One pod's life as kubelet drives it: RunPodSandbox, a container that prints a line and sleeps,
 * its line read from the CRI log, one exec, then StopContainer, RemoveContainer, StopPodSandbox and
 * RemovePodSandbox. `onStep` hears each step as it begins.
 */
async function lifecycle(
  d: TestDaemon,
  i: number,
  ids: PodIds,
  onStep: (step: Step) => void = () => {},
): Promise<void> {
  const name = `soak-${i}`;
  onStep('run');
  const pod = await runPod(d.cri, d.pod(name));
  ids.add(pod.id);
  onStep('create');
  const line = `lifecycle ${i}`;
  const id = await startContainer(
    d.cri,
    pod,
    containerConfig('c', imageRef(), { command: ['/bin/sh', '-c', `echo '${line}'; exec sleep 60`] }),
  );
  onStep('log');
  const logFile = join(d.base, 'logs', name, 'c', '0.log');
  await waitFor(async () => (await logMessages(logFile)).includes(line), 20_000, {
    what: `${name}'s log line`,
  });
  onStep('exec');
  const res = await execSync(d.cri, id, ['echo', name]);
  assert.equal(res.exit_code, 0, res.stderr.toString());
  assert.equal(res.stdout.toString(), `${name}\n`);
  onStep('stop');
  await d.cri.call('StopContainer', { container_id: id, timeout: 0 });
  onStep('remove');
  await d.cri.call('RemoveContainer', { container_id: id });
  await d.cri.call('StopPodSandbox', { pod_sandbox_id: pod.id });
  await d.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
  onStep('done');
}

async function logMessages(file: string): Promise<string[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .map((l) => parseCriLogLine(l)?.message)
    .filter((m) => m !== undefined);
}

/**
 * What kubelet does with whatever a restarted runtime still lists: stop and remove it all. Returns
 * what it found.
 */
async function kubeletCleanup(d: TestDaemon): Promise<string> {
  const { containers } = await d.cri.call<{ containers: { id: string }[] }>('ListContainers', {});
  for (const { id } of containers) {
    await d.cri.call('StopContainer', { container_id: id, timeout: 0 });
    await d.cri.call('RemoveContainer', { container_id: id });
  }
  const { items } = await d.cri.call<{ items: { id: string }[] }>('ListPodSandbox', {});
  for (const { id } of items) {
    await d.cri.call('StopPodSandbox', { pod_sandbox_id: id });
    await d.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
  }
  return `${containers.length} containers and ${items.length} pods listed, stopped and removed`;
}

/**
 * Every pod id this daemon has had, so that its pod cgroups (`/berth/pod_<id>`, which other
 * daemons on the machine share the parent of) can be told from theirs: those RunPodSandbox
 * returned, and those of pods whose RunPodSandbox the kill cut short, read from the journal rows
 * and pod dirs the killed berthd left.
 */
class PodIds {
  private readonly ids = new Set<string>();

  add(id: string): void {
    this.ids.add(id);
  }

  addFromDatabase(d: TestDaemon): void {
    for (const { id } of selectRows<{ id: string }>(d.rootDir, 'SELECT id FROM sandboxes')) this.add(id);
  }

  async addFromDirs(d: TestDaemon): Promise<void> {
    for (const name of await namesIn(join(d.rootDir, 'sandboxes'))) {
      const id = /[0-9a-f]{64}/.exec(name)?.[0];
      if (id) this.add(id);
    }
  }

  all(): string[] {
    return [...this.ids];
  }
}

/** The pod cgroups of `ids` and the container cgroups below them, counted in every hierarchy. */
async function cgroupsOf(ids: PodIds): Promise<number> {
  const cgroups = await hostCgroups();
  let count = 0;
  for (const id of ids.all()) {
    const path = cgroups.podCgroupFor(id);
    for (const hierarchy of await hierarchiesHolding(path)) {
      count += 1 + (await entriesBelow(join('/sys/fs/cgroup', hierarchy, path), (e) => e.isDirectory()));
    }
  }
  return count;
}

/** The entries below `dir` that `counts` takes, and below each counted dir theirs. */
async function entriesBelow(dir: string, counts: (e: Dirent) => boolean): Promise<number> {
  let count = 0;
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (!counts(e)) continue;
    count += 1 + (e.isDirectory() ? await entriesBelow(join(dir, e.name), counts) : 0);
  }
  return count;
}

async function figures(d: TestDaemon, ids: PodIds): Promise<Figures> {
  const pid = d.proc?.pid;
  assert.ok(pid !== undefined && (await isRunning(pid)), 'berthd is not running');
  await ids.addFromDirs(d);
  const db = databasePath(d.rootDir);
  const dbFiles = `${basename(db)}*`;
  const { stdout } = await run('du', ['-sk', `--exclude=${dbFiles}`, d.rootDir], { timeoutMs: 30_000 });
  const [{ page_count = 0 } = {}] = selectRows<{ page_count: number }>(d.rootDir, 'PRAGMA page_count');
  const [{ page_size = 0 } = {}] = selectRows<{ page_size: number }>(d.rootDir, 'PRAGMA page_size');
  const [{ rows = 0 } = {}] = selectRows<{ rows: number }>(
    d.rootDir,
    'SELECT (SELECT count(*) FROM sandboxes) + (SELECT count(*) FROM containers) AS rows',
  );
  const wal = await stat(`${db}-wal`).catch(() => null);
  return {
    fds: (await readdir(`/proc/${pid}/fd`)).length,
    threads: (await readdir(`/proc/${pid}/task`)).length,
    mounts: (await mountPointsBelow(d.base)).length,
    cgroups: await cgroupsOf(ids),
    conmons: (await d.conmonPids()).length,
    netns: (await d.netnsFiles()).length,
    leases: (await d.leasedIps()).length,
    runc: (await d.runcContainers()).length,
    rows,
    files:
      (await entriesBelow(d.rootDir, (e) => !e.name.startsWith(basename(db)))) +
      (await entriesBelow(d.stateDir, () => true)),
    diskKiB: Number(stdout.split('\t')[0]),
    dbKiB: (page_count * page_size) / 1024,
    walKiB: (wal?.blocks ?? 0) / 2,
  };
}

/**
 * The figures of a quiet berthd, each the lowest of a few looks: what a call that has just
 * returned still holds for a moment (a socket, a pipe) is not part of a baseline.
 */
async function quiet(d: TestDaemon, ids: PodIds): Promise<Figures> {
  const low = await figures(d, ids);
  for (let n = 0; n < QUIET_LOOKS; n++) {
    await new Promise((resolve) => setTimeout(resolve, QUIET_LOOK_MS));
    const now = await figures(d, ids);
    for (const k of Object.keys(low) as (keyof Figures)[]) low[k] = Math.min(low[k], now[k]);
  }
  return low;
}

/**
 * The figures once `keys` are back to `baseline`, or as they stand when the bound ends: a removed
 * pod's dir goes in the background, a call's last fds a little after it returned, and only what
 * stays is a leak.
 */
async function settled(
  d: TestDaemon,
  ids: PodIds,
  baseline: Figures,
  keys: readonly (keyof Figures)[],
): Promise<Figures> {
  let now = await figures(d, ids);
  await waitFor(
    async () => {
      now = await figures(d, ids);
      return keys.every((k) => now[k] <= baseline[k]);
    },
    SETTLE_BOUND_MS,
    { pollMs: QUIET_LOOK_MS },
  ).catch(() => undefined);
  return now;
}

function assertDatabase(before: Figures, after: Figures): void {
  assert.ok(
    after.dbKiB <= before.dbKiB + DB_SLACK_KIB,
    `the database grew from ${before.dbKiB} KiB to ${after.dbKiB} KiB`,
  );
  assert.ok(after.walKiB <= WAL_BOUND_KIB, `the WAL file is ${after.walKiB} KiB`);
}

function assertNoGrowth(
  before: Figures,
  after: Figures,
  keys: readonly (keyof Figures)[],
  what: string,
): void {
  const grown = keys.filter((k) => after[k] > before[k]).map((k) => `${k} ${before[k]} -> ${after[k]}`);
  assert.deepEqual(grown, [], `${what} grew: ${grown.join(', ')}`);
}

function show(f: Figures): string {
  return Object.entries(f)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, n) => from + n);
}
