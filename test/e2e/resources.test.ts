/**
 * A container's CRI resources as the container itself sees them in its cgroup files, under each
 * cgroup driver, at create and after UpdateContainerResources: cpu shares (cpu.weight on v2, as
 * runc converts them), quota and period, memory, swap (memory+swap in CRI and v1, swap alone in
 * v2's memory.swap.max), cpusets, hugetlb and v2's `unified` files passed through as written;
 * ContainerStatus reports what was asked. OOM kills with kubelet's memory.oom.group are reported
 * as OOMKilled, exit 137, every time of a few (BERTH_OOM_RUNS). Needs root. Traffic goes to
 * loopback only.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DRIVERS, V2_ONLY, cgroupDir, driverArgs, unparentedCgroup } from '../harness/cgroup-drivers.js';
import { CGROUP_V2, runcWeightOfShares } from '../harness/cgroups.js';
import { TestDaemon } from '../harness/daemon.js';
import { useBusyboxImage } from '../harness/images.js';
import {
  containerConfig,
  containerStatus,
  createContainer,
  execText,
  runPod,
  startContainer,
  stopAndRemovePod,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const MiB = 1024 * 1024;
const OOM_WAIT_MS = 60_000;
/**
 * OOM-killed containers per driver. With the systemd driver the kill was once reported as Error 3
 * times in 16 (systemd removed the emptied scope before conmon read its memory.events), so one is
 * not enough to show it; raise it to measure, the suite keeps the VM run cheap.
 */
const OOM_RUNS = Math.max(1, Math.trunc(Number(process.env.BERTH_OOM_RUNS ?? '3')) || 3);
const SUITE_TIMEOUT_MS = (240_000 + OOM_RUNS * 60_000) * BOUND_SCALE;

/** CRI LinuxContainerResources as the wire has them, and what the container must read back. */
interface Case {
  shares: number;
  quota: number;
  period: number;
  memory: number;
  /** Memory and swap together, as CRI and v1 count it. */
  memoryAndSwap: number;
  cpus: string;
  pids: number;
}

const AT_CREATE: Case = {
  shares: 512,
  quota: 50_000,
  period: 100_000,
  memory: 64 * MiB,
  memoryAndSwap: 96 * MiB,
  cpus: '0',
  pids: 64,
};
const UPDATED: Case = {
  shares: 1024,
  quota: 150_000,
  period: 100_000,
  memory: 128 * MiB,
  memoryAndSwap: 192 * MiB,
  cpus: '0-1',
  pids: 128,
};
/** kubelet sets it on v2 so that an OOM kill takes the whole container, not one process. */
const OOM_GROUP = { 'memory.oom.group': '1' };
const HUGEPAGES = [{ page_size: '2MB', limit: String(4 * MiB) }];

/** The wire form of `c`; unified and hugepages only on v2 (v1 refuses unified, lacks hugetlb here). */
function wireResources(c: Case): Record<string, unknown> {
  return {
    cpu_shares: String(c.shares),
    cpu_quota: String(c.quota),
    cpu_period: String(c.period),
    memory_limit_in_bytes: String(c.memory),
    memory_swap_limit_in_bytes: String(c.memoryAndSwap),
    cpuset_cpus: c.cpus,
    cpuset_mems: '0',
    ...(CGROUP_V2
      ? { hugepage_limits: HUGEPAGES, unified: { ...OOM_GROUP, 'pids.max': String(c.pids) } }
      : {}),
  };
}

/** The cgroup files the container reads, relative to its /sys/fs/cgroup, and their values. */
function expectedFiles(c: Case): Record<string, string> {
  if (CGROUP_V2) {
    return {
      'cpu.weight': String(runcWeightOfShares(c.shares)),
      'cpu.max': `${c.quota} ${c.period}`,
      'memory.max': String(c.memory),
      // v2 counts swap alone.
      'memory.swap.max': String(c.memoryAndSwap - c.memory),
      'cpuset.cpus': c.cpus,
      'cpuset.mems': '0',
      'hugetlb.2MB.max': String(4 * MiB),
      'memory.oom.group': '1',
      'pids.max': String(c.pids),
    };
  }
  return {
    'cpu/cpu.shares': String(c.shares),
    'cpu/cpu.cfs_quota_us': String(c.quota),
    'cpu/cpu.cfs_period_us': String(c.period),
    'memory/memory.limit_in_bytes': String(c.memory),
    'memory/memory.memsw.limit_in_bytes': String(c.memoryAndSwap),
    'cpuset/cpuset.cpus': c.cpus,
    'cpuset/cpuset.mems': '0',
  };
}

for (const { driver, skip } of DRIVERS) {
  describe(`container resources, ${driver} driver`, { skip, timeout: SUITE_TIMEOUT_MS }, () => {
    const imageRef = useBusyboxImage(`berth/resources-${driver}`);
    let daemon: TestDaemon | undefined;
    let pod: Pod | undefined;

    before(async () => {
      daemon = await TestDaemon.create({ extraArgs: driverArgs(driver) });
      await daemon.cri.callImage('PullImage', { image: { image: imageRef() } });
      pod = await runPod(daemon.cri, daemon.pod('resources'));
    });

    after(async () => {
      if (daemon && pod) await stopAndRemovePod(daemon.cri, pod.id).catch(() => undefined);
      await daemon?.destroy();
    });

    test('the container reads its limits in its cgroup, at create and after an update', async () => {
      const d = daemon;
      assert.ok(d && pod);
      const id = await startContainer(
        d.cri,
        pod,
        containerConfig('limited', imageRef(), { linux: { resources: wireResources(AT_CREATE) } }),
      );
      assert.deepEqual(await readInside(d, id, expectedFiles(AT_CREATE)), expectedFiles(AT_CREATE));
      assertReported(await containerStatus(d.cri, id), AT_CREATE);

      await d.cri.call('UpdateContainerResources', { container_id: id, linux: wireResources(UPDATED) });
      assert.deepEqual(await readInside(d, id, expectedFiles(UPDATED)), expectedFiles(UPDATED));
      assertReported(await containerStatus(d.cri, id), UPDATED);
      await d.cri.call('RemoveContainer', { container_id: id });
    });

    test('OOM kills with memory.oom.group are OOMKilled, exit 137', { skip: V2_ONLY }, async () => {
      const d = daemon;
      assert.ok(d && pod);
      const seen: string[] = [];
      for (let i = 0; i < OOM_RUNS; i++) {
        const id = await createContainer(
          d.cri,
          pod,
          containerConfig(`hog-${i}`, imageRef(), {
            // A second process, which the group kill takes too, so that the cgroup empties at once.
            command: ['sh', '-c', 'sleep 600 & tail /dev/zero'],
            linux: { resources: { memory_limit_in_bytes: String(16 * MiB), unified: OOM_GROUP } },
          }),
        );
        const file = join(cgroupDir(unparentedCgroup(driver, pod.id, id)), 'memory.oom.group');
        assert.equal((await readFile(file, 'utf8')).trim(), '1');
        await d.cri.call('StartContainer', { container_id: id });
        const st = await waitContainerState(d.cri, id, 'CONTAINER_EXITED', OOM_WAIT_MS);
        seen.push(`${st.reason}/${st.exit_code}`);
        await d.cri.call('RemoveContainer', { container_id: id });
      }
      // How often conmon missed the kill and the systemd driver's scope told it, for measuring.
      const missed = d.output.split('\n').filter((line) => line.includes('conmon missed it')).length;
      console.log(`# ${driver}: ${OOM_RUNS} OOM kills, ${missed} known from the cgroup driver only`);
      assert.deepEqual(seen, Array<string>(OOM_RUNS).fill('OOMKilled/137'));
    });
  });
}

/** `files` (paths below /sys/fs/cgroup) as the container reads them, one cat for all. */
async function readInside(
  d: TestDaemon,
  id: string,
  files: Record<string, string>,
): Promise<Record<string, string>> {
  const names = Object.keys(files);
  const script = names.map((_, i) => `cat "/sys/fs/cgroup/\${${i + 1}}"`).join(' && ');
  const text = await execText(d.cri, id, ['sh', '-c', script, 'sh', ...names]);
  const values = text.trimEnd().split('\n');
  return Object.fromEntries(names.map((name, i) => [name, values[i] ?? '']));
}

/** ContainerStatus reports the resources as asked: the shares, not a weight converted back. */
function assertReported(status: { resources?: unknown }, c: Case): void {
  const linux = (status.resources as { linux?: Record<string, unknown> } | undefined)?.linux;
  assert.ok(linux, 'ContainerStatus has no resources');
  const wire = wireResources(c);
  for (const key of Object.keys(wire)) assert.deepEqual(linux[key], wire[key], `resources.linux.${key}`);
}
