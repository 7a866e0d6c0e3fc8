/**
 * Hostile input against the runtime's own and the pod sandbox rpcs (the fuzz:
 * test/harness/hostile-fuzz.ts). Needs root; traffic stays on loopback and in the test pods' own
 * namespaces.
 *
 * BERTH_HOSTILE_SEED=<n> runs other random values; BERTH_HOSTILE_VERBOSE=1 prints codes per field.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { CriFuzz } from '../harness/hostile-fuzz.js';
import {
  SECURITY_CONTEXT as SC,
  badName,
  hasControl,
  notAbsoluteClean,
  podRoundTrip,
  str,
  type FieldSpec,
  type RpcSpec,
} from '../harness/hostile-specs.js';
import { HostileCri, resources } from '../harness/hostile-cri.js';
import { HOSTILE_FILE_BOUND_MS } from '../harness/bounds.js';
import { registrySkip as skip } from '../harness/skip.js';

describe('hostile input on the runtime and pod rpcs', { skip, timeout: HOSTILE_FILE_BOUND_MS }, () => {
  const cri = HostileCri.forSuite();
  const fuzz = new CriFuzz(cri);
  const { targets, victims } = cri;

  const podFilterFields = (prefix: string): FieldSpec[] => [
    { path: `${prefix}.id`, kind: 'podId' },
    { path: `${prefix}.label_selector`, kind: 'mapKey' },
    { path: `${prefix}.label_selector`, kind: 'mapValue' },
    { path: `${prefix}.label_selector`, kind: 'map' },
  ];

  /** StopPodSandbox's and RemovePodSandbox's: a pod of their own, rebuilt after each case. */
  const podVictim = {
    base: () => ({ pod_sandbox_id: victims.podId }),
    destructive: true,
    setup: async () => {
      victims.podId = (await cri.runPod(`victim-${cri.next()}`)).id;
    },
    teardown: async () => {
      await cri.removePod(victims.podId);
      victims.podId = '';
    },
    fields: [{ path: 'pod_sandbox_id', kind: 'podId' }],
  } satisfies Omit<RpcSpec, 'rpc'>;

  const specs: RpcSpec[] = [
    { rpc: 'Version', base: () => ({ version: '0.1.0' }), fields: [{ path: 'version', kind: 'string' }] },
    { rpc: 'Status', base: () => ({ verbose: false }), fields: [{ path: 'verbose', kind: 'bool' }] },
    { rpc: 'RuntimeConfig', base: () => ({}), fields: [] },
    {
      rpc: 'UpdateRuntimeConfig',
      base: () => ({ runtime_config: { network_config: { pod_cidr: '10.244.0.0/16' } } }),
      fields: [{ path: 'runtime_config.network_config.pod_cidr', kind: 'string' }],
    },
    {
      rpc: 'RunPodSandbox',
      base: () => cri.podBase(),
      costly: true,
      accepted: podRoundTrip(cri),
      fields: [
        { path: 'config.metadata.name', kind: 'string', mustReject: badName },
        {
          path: 'config.metadata.uid',
          kind: 'string',
          mustReject: (v) => str(v) === '' || hasControl(str(v)),
        },
        {
          path: 'config.metadata.namespace',
          kind: 'string',
          mustReject: (v) => str(v) === '' || hasControl(str(v)),
        },
        { path: 'config.metadata.attempt', kind: 'uint32' },
        {
          path: 'config.hostname',
          kind: 'string',
          mustReject: (v) => str(v) !== '' && !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/i.test(str(v)),
        },
        { path: 'config.log_directory', kind: 'string', mustReject: notAbsoluteClean },
        {
          path: 'config.dns_config.servers[0]',
          kind: 'string',
          mustReject: (v) => !/^[0-9a-f.:]+$/i.test(str(v)),
        },
        {
          path: 'config.dns_config.searches[0]',
          kind: 'string',
          mustReject: (v) => /\s/.test(str(v)) || hasControl(str(v)) || str(v) === '',
        },
        {
          path: 'config.dns_config.options[0]',
          kind: 'string',
          mustReject: (v) => /\s/.test(str(v)) || hasControl(str(v)) || str(v) === '',
        },
        { path: 'config.dns_config.options', kind: 'list', item: 'ndots:1' },
        { path: 'config.port_mappings[0].protocol', kind: 'enum' },
        { path: 'config.port_mappings[0].container_port', kind: 'int32' },
        { path: 'config.port_mappings[0].host_port', kind: 'int32' },
        { path: 'config.port_mappings[0].host_ip', kind: 'string' },
        { path: 'config.port_mappings', kind: 'list', item: { protocol: 'TCP', container_port: 80 } },
        { path: 'config.labels', kind: 'mapKey' },
        { path: 'config.labels', kind: 'mapValue', light: true },
        { path: 'config.labels', kind: 'map' },
        { path: 'config.annotations', kind: 'mapKey' },
        { path: 'config.annotations', kind: 'mapValue', light: true },
        { path: 'config.annotations', kind: 'map' },
        {
          path: 'config.linux.cgroup_parent',
          kind: 'string',
          mustReject: (v) => hasControl(str(v)) || str(v).split('/').includes('..'),
        },
        { path: 'config.linux.sysctls', kind: 'mapKey', mustReject: () => true },
        { path: 'config.linux.sysctls', kind: 'mapValue', mustReject: (v) => hasControl(str(v)) },
        { path: `${SC}.namespace_options.network`, kind: 'enum' },
        { path: `${SC}.namespace_options.pid`, kind: 'enum' },
        { path: `${SC}.namespace_options.ipc`, kind: 'enum' },
        { path: `${SC}.namespace_options.target_id`, kind: 'string', light: true },
        { path: `${SC}.run_as_user.value`, kind: 'int64' },
        { path: `${SC}.run_as_group.value`, kind: 'int64' },
        { path: `${SC}.supplemental_groups[0]`, kind: 'int64' },
        { path: `${SC}.privileged`, kind: 'bool' },
        { path: `${SC}.readonly_rootfs`, kind: 'bool' },
        { path: `${SC}.selinux_options.type`, kind: 'string', light: true },
        { path: `${SC}.seccomp.profile_type`, kind: 'enum' },
        { path: `${SC}.seccomp.localhost_ref`, kind: 'string', light: true },
        { path: `${SC}.apparmor.localhost_ref`, kind: 'string', light: true },
        { path: `${SC}.seccomp_profile_path`, kind: 'string', light: true },
        { path: 'config.linux.resources.memory_limit_in_bytes', kind: 'int64' },
        { path: 'config.linux.overhead.cpu_quota', kind: 'int64' },
        { path: 'config.windows.security_context.run_as_username', kind: 'string', light: true },
        { path: 'runtime_handler', kind: 'string', mustReject: (v) => v !== '' && v !== 'runc' },
      ],
    },
    {
      rpc: 'PodSandboxStatus',
      base: () => ({ pod_sandbox_id: targets.podId, verbose: true }),
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        { path: 'verbose', kind: 'bool' },
      ],
    },
    {
      rpc: 'ListPodSandbox',
      base: () => ({
        filter: {
          id: targets.podId,
          state: { state: 'SANDBOX_READY' },
          label_selector: { suite: 'berth' },
        },
      }),
      fields: [...podFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'StreamPodSandboxes',
      base: () => ({ filter: { id: targets.podId, label_selector: { suite: 'berth' } } }),
      fields: [...podFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'PodSandboxStats',
      base: () => ({ pod_sandbox_id: targets.podId }),
      fields: [{ path: 'pod_sandbox_id', kind: 'podId' }],
    },
    {
      rpc: 'ListPodSandboxStats',
      base: () => ({ filter: { id: targets.podId, label_selector: { suite: 'berth' } } }),
      fields: podFilterFields('filter'),
    },
    {
      rpc: 'StreamPodSandboxStats',
      base: () => ({ filter: { id: targets.podId, label_selector: { suite: 'berth' } } }),
      fields: podFilterFields('filter'),
    },
    {
      rpc: 'UpdatePodSandboxResources',
      base: () => ({ pod_sandbox_id: targets.podId, overhead: resources(), resources: resources() }),
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        { path: 'resources.memory_limit_in_bytes', kind: 'int64' },
        { path: 'resources.cpuset_cpus', kind: 'string' },
        { path: 'resources.unified', kind: 'mapKey' },
        { path: 'overhead.cpu_quota', kind: 'int64' },
      ],
    },
    { rpc: 'ListMetricDescriptors', base: () => ({}), fields: [] },
    { rpc: 'ListPodSandboxMetrics', base: () => ({}), fields: [] },
    { rpc: 'StreamPodSandboxMetrics', base: () => ({}), fields: [] },
    { rpc: 'GetContainerEvents', base: () => ({}), fields: [] },
    // Last: these take the target pod with them when a prefix matches it.
    { rpc: 'StopPodSandbox', ...podVictim },
    { rpc: 'RemovePodSandbox', ...podVictim },
  ];

  describe('cases from the issue', () => {
    it('RunPodSandbox refuses a resolver option that smuggles a nameserver line', async () => {
      const config = cri.daemon.pod(`dns-opt-${cri.next()}`, {
        dns_config: { servers: [], searches: [], options: ['ndots:5\nnameserver 6.6.6.6'] },
      });
      await cri.runPodExpecting(config, [status.INVALID_ARGUMENT], 'dns_config.options');
    });

    it('RunPodSandbox accepts the root search domain "."', async () => {
      const config = cri.daemon.pod(`dns-root-${cri.next()}`, {
        dns_config: { servers: [], searches: ['.'], options: [] },
      });
      const out = await cri.expectCode('RunPodSandbox', { config }, [status.OK]);
      await cri.must('RemovePodSandbox', {
        pod_sandbox_id: (out.response as { pod_sandbox_id: string }).pod_sandbox_id,
      });
    });

    it('RunPodSandbox refuses a log_directory with a newline', async () => {
      const config = cri.daemon.pod(`logdir-${cri.next()}`, {
        log_directory: join(cri.daemon.base, 'logs', 'a\nb'),
      });
      await cri.runPodExpecting(config, [status.INVALID_ARGUMENT], 'log_directory');
    });

    it('RunPodSandbox refuses a sysctl value with a newline', async () => {
      const config = cri.daemon.pod(`sysctl-nl-${cri.next()}`, {
        linux: { sysctls: { 'kernel.shm_rmid_forced': '1\nkernel.sysrq=1' } },
      });
      await cri.runPodExpecting(config, [status.INVALID_ARGUMENT], 'sysctls');
    });

    it('RunPodSandbox refuses the non-namespaced sysctl kernel.sysrq', async () => {
      const config = cri.daemon.pod(`sysrq-${cri.next()}`, { linux: { sysctls: { 'kernel.sysrq': '1' } } });
      await cri.runPodExpecting(config, [status.INVALID_ARGUMENT], 'kernel.sysrq');
    });

    it('four pods with 5 MB of annotations each are refused naming annotations, without a hang', async () => {
      const before = (await cri.must<{ items: unknown[] }>('ListPodSandbox', {})).items.length;
      await Promise.all(
        [0, 1, 2, 3].map(async (i) => {
          const config = cri.daemon.pod(`big-annotations-${cri.next()}-${i}`, {
            annotations: { big: 'a'.repeat(5 * 1024 * 1024) },
          });
          await cri.runPodExpecting(config, [status.INVALID_ARGUMENT], 'annotations');
        }),
      );
      assert.equal((await cri.must<{ items: unknown[] }>('ListPodSandbox', {})).items.length, before);
    });
  });

  it('answers every hostile request to every rpc of its group, with a typed status and a bounded message', async (t: TestContext) => {
    await fuzz.run(t, 'sandbox', specs);
  });

  it('removes through the API what hostile requests created, and leaves nothing behind', async () => {
    await fuzz.assertNothingLeft();
  });
});
