/**
 * Hostile input against the container rpcs (the fuzz: test/harness/hostile-fuzz.ts). Needs root;
 * traffic stays on loopback and in the test pods' own namespaces.
 *
 * BERTH_HOSTILE_SEED=<n> runs other random values; BERTH_HOSTILE_VERBOSE=1 prints codes per field.
 */
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { HOSTILE_FILE_BOUND_MS } from '../harness/bounds.js';
import { DeadlineClient, HUGE_110K, HUGE_1M } from '../harness/hostile.js';
import { CriFuzz } from '../harness/hostile-fuzz.js';
import {
  SECURITY_CONTEXT as SC,
  badName,
  containerRoundTrip,
  hasControl,
  notAbsoluteClean,
  str,
  type FieldSpec,
  type RpcSpec,
} from '../harness/hostile-specs.js';
import { CGROUP_V2 } from '../harness/cgroups.js';
import { HostileCri, resources } from '../harness/hostile-cri.js';
import { registrySkip as skip } from '../harness/skip.js';

const RES = 'config.linux.resources';

describe('hostile input on the container rpcs', { skip, timeout: HOSTILE_FILE_BOUND_MS }, () => {
  const cri = HostileCri.forSuite();
  const fuzz = new CriFuzz(cri);
  const { targets, victims } = cri;

  const ctrFilterFields = (prefix: string): FieldSpec[] => [
    { path: `${prefix}.id`, kind: 'ctrId' },
    { path: `${prefix}.pod_sandbox_id`, kind: 'podId' },
    { path: `${prefix}.label_selector`, kind: 'mapKey' },
    { path: `${prefix}.label_selector`, kind: 'mapValue' },
    { path: `${prefix}.label_selector`, kind: 'map' },
  ];
  const newVictim = async (): Promise<void> => {
    victims.ctrId = await cri.newContainer(`victim-${cri.next()}`, false);
  };
  const dropVictim = (): Promise<void> => cri.dropVictimContainer();

  const specs: RpcSpec[] = [
    {
      rpc: 'CreateContainer',
      base: () => cri.containerBase(),
      costly: true,
      accepted: containerRoundTrip(cri),
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        { path: 'config.metadata.name', kind: 'string', mustReject: badName },
        { path: 'config.metadata.attempt', kind: 'uint32' },
        { path: 'config.image.image', kind: 'imageLocal' },
        { path: 'config.image.user_specified_image', kind: 'string', light: true },
        { path: 'config.image.annotations', kind: 'mapKey', light: true },
        { path: 'config.image.runtime_handler', kind: 'string', light: true },
        { path: 'config.command[0]', kind: 'string', mustReject: (v) => str(v).includes('\0') },
        { path: 'config.command', kind: 'list', item: '/bin/sleep' },
        { path: 'config.args[0]', kind: 'string', light: true, mustReject: (v) => str(v).includes('\0') },
        // Paths inside the container may hold "..": runc resolves them within the rootfs.
        {
          path: 'config.working_dir',
          kind: 'string',
          mustReject: (v) => str(v) !== '' && (!str(v).startsWith('/') || str(v).includes('\0')),
        },
        {
          path: 'config.envs[0].key',
          kind: 'string',
          mustReject: (v) => str(v) === '' || /[=\0]/.test(str(v)),
        },
        {
          path: 'config.envs[0].value',
          kind: 'bytes',
          mustReject: (v) => Buffer.isBuffer(v) && v.includes(0),
        },
        { path: 'config.envs', kind: 'list', item: { key: 'K', value: Buffer.from('v') } },
        {
          path: 'config.mounts[0].container_path',
          kind: 'string',
          mustReject: (v) => !str(v).startsWith('/') || str(v).includes('\0'),
        },
        { path: 'config.mounts[0].host_path', kind: 'string', mustReject: notAbsoluteClean },
        { path: 'config.mounts[0].propagation', kind: 'enum' },
        { path: 'config.mounts[0].readonly', kind: 'bool' },
        { path: 'config.mounts[0].recursive_read_only', kind: 'bool' },
        { path: 'config.mounts[0].image.image', kind: 'imageLocal' },
        { path: 'config.mounts[0].image_sub_path', kind: 'string', light: true },
        { path: 'config.devices[0].container_path', kind: 'string', mustReject: notAbsoluteClean },
        { path: 'config.devices[0].host_path', kind: 'string', mustReject: notAbsoluteClean },
        {
          path: 'config.devices[0].permissions',
          kind: 'string',
          mustReject: (v) => !/^[rwm]*$/.test(str(v)),
        },
        { path: 'config.labels', kind: 'mapKey' },
        { path: 'config.labels', kind: 'mapValue', light: true },
        { path: 'config.annotations', kind: 'mapKey' },
        { path: 'config.annotations', kind: 'mapValue', light: true },
        { path: 'config.annotations', kind: 'map' },
        {
          path: 'config.log_path',
          kind: 'string',
          mustReject: (v) => str(v).startsWith('/') || str(v).split('/').includes('..') || hasControl(str(v)),
        },
        { path: 'config.stdin', kind: 'bool' },
        { path: 'config.tty', kind: 'bool' },
        { path: `${RES}.cpu_period`, kind: 'int64' },
        { path: `${RES}.cpu_quota`, kind: 'int64' },
        { path: `${RES}.cpu_shares`, kind: 'int64' },
        { path: `${RES}.memory_limit_in_bytes`, kind: 'int64' },
        { path: `${RES}.oom_score_adj`, kind: 'int64' },
        { path: `${RES}.memory_swap_limit_in_bytes`, kind: 'int64' },
        { path: `${RES}.cpuset_cpus`, kind: 'string' },
        { path: `${RES}.cpuset_mems`, kind: 'string' },
        { path: `${RES}.hugepage_limits[0].page_size`, kind: 'string' },
        { path: `${RES}.hugepage_limits[0].limit`, kind: 'int64' },
        { path: `${RES}.unified`, kind: 'mapKey' },
        { path: `${RES}.unified`, kind: 'mapValue' },
        { path: `${SC}.capabilities.add_capabilities[0]`, kind: 'string' },
        { path: `${SC}.capabilities.drop_capabilities[0]`, kind: 'string' },
        { path: `${SC}.capabilities.add_ambient_capabilities[0]`, kind: 'string' },
        { path: `${SC}.privileged`, kind: 'bool' },
        { path: `${SC}.namespace_options.network`, kind: 'enum' },
        { path: `${SC}.namespace_options.pid`, kind: 'enum' },
        { path: `${SC}.namespace_options.ipc`, kind: 'enum' },
        { path: `${SC}.namespace_options.target_id`, kind: 'string', light: true },
        { path: `${SC}.namespace_options.userns_options.mode`, kind: 'enum' },
        { path: `${SC}.selinux_options.level`, kind: 'string', light: true },
        { path: `${SC}.run_as_user.value`, kind: 'int64' },
        { path: `${SC}.run_as_username`, kind: 'string' },
        { path: `${SC}.supplemental_groups[0]`, kind: 'int64' },
        { path: `${SC}.supplemental_groups_policy`, kind: 'enum' },
        { path: `${SC}.masked_paths[0]`, kind: 'string' },
        { path: `${SC}.readonly_paths[0]`, kind: 'string' },
        { path: `${SC}.masked_paths`, kind: 'list', item: '/proc/kcore' },
        { path: `${SC}.seccomp.profile_type`, kind: 'enum' },
        { path: `${SC}.seccomp.localhost_ref`, kind: 'string' },
        { path: `${SC}.apparmor.localhost_ref`, kind: 'string' },
        { path: `${SC}.apparmor_profile`, kind: 'string' },
        { path: `${SC}.seccomp_profile_path`, kind: 'string', unset: `${SC}.seccomp` },
        { path: 'config.CDI_devices[0].name', kind: 'string' },
        { path: 'config.stop_signal', kind: 'enum' },
        { path: 'config.windows.security_context.run_as_username', kind: 'string', light: true },
        { path: 'sandbox_config.metadata.name', kind: 'string', light: true },
        { path: 'sandbox_config.log_directory', kind: 'string', light: true },
        { path: 'sandbox_config.linux.cgroup_parent', kind: 'string', light: true },
      ],
    },
    {
      rpc: 'StartContainer',
      base: () => ({ container_id: victims.ctrId }),
      setup: newVictim,
      teardown: dropVictim,
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'StopContainer',
      base: () => ({ container_id: victims.ctrId, timeout: '1' }),
      destructive: true,
      beforeCase: () => cri.ensureRunningVictim(),
      teardown: dropVictim,
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'timeout', kind: 'int64' },
      ],
    },
    {
      rpc: 'RemoveContainer',
      base: () => ({ container_id: victims.ctrId }),
      destructive: true,
      setup: newVictim,
      teardown: dropVictim,
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'ListContainers',
      base: () => ({
        filter: {
          id: targets.ctrId,
          state: { state: 'CONTAINER_RUNNING' },
          pod_sandbox_id: targets.podId,
          label_selector: { suite: 'hostile' },
        },
      }),
      fields: [...ctrFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'StreamContainers',
      base: () => ({ filter: { id: targets.ctrId, pod_sandbox_id: targets.podId } }),
      fields: [...ctrFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'ContainerStatus',
      base: () => ({ container_id: targets.ctrId, verbose: true }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'verbose', kind: 'bool' },
      ],
    },
    {
      rpc: 'UpdateContainerResources',
      base: () => ({ container_id: victims.ctrId, linux: resources(), annotations: {} }),
      // A limit that kills the victim must not leave the next case a dead container.
      beforeCase: () => cri.ensureRunningVictim(),
      teardown: dropVictim,
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'linux.cpu_period', kind: 'int64' },
        { path: 'linux.cpu_quota', kind: 'int64' },
        { path: 'linux.cpu_shares', kind: 'int64' },
        { path: 'linux.memory_limit_in_bytes', kind: 'int64', mustReject: (v) => v === '1' },
        { path: 'linux.oom_score_adj', kind: 'int64' },
        { path: 'linux.memory_swap_limit_in_bytes', kind: 'int64' },
        { path: 'linux.cpuset_cpus', kind: 'string' },
        { path: 'linux.cpuset_mems', kind: 'string' },
        { path: 'linux.hugepage_limits[0].page_size', kind: 'string' },
        { path: 'linux.unified', kind: 'mapKey', mustReject: () => !CGROUP_V2 },
        { path: 'linux.unified', kind: 'mapValue', mustReject: () => !CGROUP_V2 },
        { path: 'annotations', kind: 'mapKey' },
        { path: 'annotations', kind: 'mapValue' },
        { path: 'windows.memory_limit_in_bytes', kind: 'int64' },
      ],
    },
    {
      rpc: 'ReopenContainerLog',
      base: () => ({ container_id: targets.ctrId }),
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'ContainerStats',
      base: () => ({ container_id: targets.ctrId }),
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'ListContainerStats',
      base: () => ({
        filter: { id: targets.ctrId, pod_sandbox_id: targets.podId, label_selector: { suite: 'hostile' } },
      }),
      fields: ctrFilterFields('filter'),
    },
    {
      rpc: 'StreamContainerStats',
      base: () => ({ filter: { id: targets.ctrId, pod_sandbox_id: targets.podId } }),
      fields: ctrFilterFields('filter'),
    },
    {
      rpc: 'CheckpointContainer',
      base: () => ({
        container_id: targets.ctrId,
        location: join(cri.daemon.base, 'checkpoint.tar'),
        timeout: '10',
      }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'location', kind: 'string' },
        { path: 'timeout', kind: 'int64' },
      ],
    },
  ];

  describe('cases from the issue', () => {
    // The bug was a stall: berthd answered NOT_FOUND at once, but the status quoting the id never
    // arrived and the connection answered nothing more. The hang bound catches that.
    it('ContainerStatus of a 110,000-character id is answered, and the same connection keeps answering', async () => {
      const own = new DeadlineClient(cri.daemon.socket);
      try {
        for (let round = 0; round < 3; round++) {
          await cri.expectCode(
            'ContainerStatus',
            { container_id: HUGE_110K },
            [status.INVALID_ARGUMENT, status.NOT_FOUND],
            {
              on: own,
            },
          );
          await cri.expectCode('ContainerStatus', { container_id: targets.ctrId }, [status.OK], { on: own });
        }
      } finally {
        own.close();
      }
    });

    it('CreateContainer with 100,000 env entries is refused, INVALID_ARGUMENT naming envs', async () => {
      const envs = Array.from({ length: 100_000 }, (_, i) => ({ key: `K${i}`, value: Buffer.from('v') }));
      await cri.createExpecting({ envs }, [status.INVALID_ARGUMENT], 'envs');
    });

    it('CreateContainer refuses a 1 MB log_path', async () => {
      await cri.createExpecting({ log_path: HUGE_1M }, [status.INVALID_ARGUMENT], 'log_path');
    });

    it('UpdateContainerResources refuses memory_limit_in_bytes=1', async () => {
      await cri.ensureRunningVictim();
      try {
        await cri.expectCode(
          'UpdateContainerResources',
          { container_id: victims.ctrId, linux: { ...resources(), memory_limit_in_bytes: '1' } },
          [status.INVALID_ARGUMENT],
          { naming: 'memory_limit_in_bytes' },
        );
      } finally {
        await dropVictim();
      }
    });

    it(
      'refuses unified (cgroup v2) resources on a cgroup v1 host',
      { skip: CGROUP_V2 ? 'host is cgroup v2' : false },
      async () => {
        const unified = { 'memory.high': '100000000' };
        await cri.createExpecting(
          { linux: { resources: { unified } } },
          [status.INVALID_ARGUMENT],
          'unified',
        );
        await cri.ensureRunningVictim();
        try {
          await cri.expectCode(
            'UpdateContainerResources',
            { container_id: victims.ctrId, linux: { ...resources(), unified } },
            [status.INVALID_ARGUMENT],
            { naming: 'unified' },
          );
        } finally {
          await dropVictim();
        }
      },
    );
  });

  it('answers every hostile request to every rpc of its group, with a typed status and a bounded message', async (t: TestContext) => {
    await fuzz.run(t, 'container', specs);
  });

  it('removes through the API what hostile requests created, and leaves nothing behind', async () => {
    await fuzz.assertNothingLeft();
  });
});
