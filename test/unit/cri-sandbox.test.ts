/** RunPodSandbox's request translation: what reaches resolv.conf, log paths and sysctls. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidArgumentError } from '../../src/errors.js';
import { toSandboxFilter, toSandboxSpec } from '../../src/cri/sandbox.js';
import { toPodStatsFilter } from '../../src/cri/stats.js';
import type { Received } from '../../src/cri/messages.js';
import type { NamespaceMode } from '../../src/oci/container-input.js';

type RunPodSandboxRequest = Received<'RunPodSandboxRequest'>;
type WirePodSandboxConfig = Received<'PodSandboxConfig'>;
type WireLinuxConfig = Received<'LinuxPodSandboxConfig'>;
type WireSecurityContext = Received<'LinuxSandboxSecurityContext'>;

/** A pod's Linux config as kubelet sends it, with `security` over the defaults. */
function linuxConfig(
  sysctls: Record<string, string>,
  security: Partial<WireSecurityContext> = {},
): WireLinuxConfig {
  return {
    cgroup_parent: '',
    sysctls,
    security_context: {
      namespace_options: null,
      selinux_options: null,
      run_as_user: null,
      run_as_group: null,
      readonly_rootfs: false,
      supplemental_groups: [],
      privileged: false,
      seccomp_profile_path: '',
      seccomp: null,
      apparmor: null,
      supplemental_groups_policy: 'Merge',
      ...security,
    },
    overhead: null,
    resources: null,
  };
}

function request(over: Partial<WirePodSandboxConfig> = {}): RunPodSandboxRequest {
  return {
    runtime_handler: '',
    config: {
      metadata: { name: 'p', uid: 'u', namespace: 'n', attempt: 0 },
      hostname: 'p',
      log_directory: '/var/log/pods/n_p_u',
      dns_config: null,
      port_mappings: [],
      labels: {},
      annotations: {},
      linux: null,
      windows: null,
      ...over,
    },
  };
}

function refuses(req: RunPodSandboxRequest, field: string): void {
  assert.throws(
    () => toSandboxSpec(req),
    (err: unknown) => err instanceof InvalidArgumentError && err.field === field,
  );
}

const dns = (searches: string[], options: string[] = []): Partial<WirePodSandboxConfig> => ({
  dns_config: { servers: ['10.96.0.10'], searches, options },
});

describe('RunPodSandbox dns_config', () => {
  it('takes "." (the root, sent by a kubelet with resolvConf "") and DNS names', () => {
    const spec = toSandboxSpec(
      request(dns(['.', 'svc.cluster.local', 'example.com.', '_tcp.local'], ['ndots:5', 'edns0'])),
    );
    assert.deepEqual(spec.dnsConfig?.searches, ['.', 'svc.cluster.local', 'example.com.', '_tcp.local']);
    assert.deepEqual(spec.dnsConfig?.options, ['ndots:5', 'edns0']);
  });

  it('refuses search domains that are not DNS names', () => {
    refuses(request(dns(['a/b'])), 'config.dns_config.searches[0]');
    refuses(request(dns(['ok.local', 'two words'])), 'config.dns_config.searches[1]');
    refuses(request(dns(['..'])), 'config.dns_config.searches[0]');
    refuses(request(dns([`${'a'.repeat(64)}.local`])), 'config.dns_config.searches[0]');
  });

  it('refuses an option that would write a line of its own into resolv.conf', () => {
    refuses(request(dns([], ['ndots:5\nnameserver 6.6.6.6'])), 'config.dns_config.options[0]');
    refuses(request(dns([], ['ndots:5 rotate'])), 'config.dns_config.options[0]');
    refuses(request(dns([], [''])), 'config.dns_config.options[0]');
  });
});

describe('RunPodSandbox fields that reach files', () => {
  it('refuses control characters in log_directory', () => {
    refuses(request({ log_directory: '/var/log/pods/x\ny' }), 'config.log_directory');
  });

  it('refuses control characters in sysctl values', () => {
    const linux = (value: string): Partial<WirePodSandboxConfig> => ({
      linux: {
        cgroup_parent: '',
        security_context: null,
        sysctls: { 'net.ipv4.ip_forward': value },
        overhead: null,
        resources: null,
      },
    });
    assert.deepEqual(toSandboxSpec(request(linux('1'))).sysctls, { 'net.ipv4.ip_forward': '1' });
    refuses(request(linux('1\nkernel.sysrq=1')), 'config.linux.sysctls["net.ipv4.ip_forward"]');
  });

  it('quotes at most a bounded part of a huge value in its error', () => {
    try {
      toSandboxSpec(request({ log_directory: `relative/${'x'.repeat(100_000)}` }));
      assert.fail('accepted');
    } catch (err) {
      assert.ok(err instanceof InvalidArgumentError);
      assert.ok(err.message.length < 400, `message of ${err.message.length} characters`);
    }
  });
});

describe('RunPodSandbox lists and strings that berth keeps', () => {
  const security = (supplemental_groups: string[]): Partial<WirePodSandboxConfig> => ({
    linux: linuxConfig({}, { supplemental_groups }),
  });

  it('takes up to NGROUPS_MAX supplemental groups, and a log directory shorter than PATH_MAX', () => {
    const groups = Array<string>(65_536).fill('1');
    assert.equal(toSandboxSpec(request(security(groups))).security.supplementalGroups.length, 65_536);
    refuses(request(security([...groups, '2'])), 'config.linux.security_context.supplemental_groups');
    assert.ok(toSandboxSpec(request({ log_directory: `/${'l'.repeat(4094)}` })));
    refuses(request({ log_directory: `/${'l'.repeat(4095)}` }), 'config.log_directory');
  });

  it('bounds sysctls as labels are bounded', () => {
    const linux = (sysctls: Record<string, string>): Partial<WirePodSandboxConfig> => ({
      linux: { cgroup_parent: '', security_context: null, sysctls, overhead: null, resources: null },
    });
    refuses(
      request(linux({ 'net.ipv4.ip_local_port_range': 'x'.repeat(300 * 1024) })),
      'config.linux.sysctls',
    );
  });
});

describe('label selectors of ListPodSandbox and ListPodSandboxStats', () => {
  const selector = (n: number, value = 'v'): Record<string, string> =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`example.com/k${i}`, value]));
  const list = (label_selector: Record<string, string>) =>
    toSandboxFilter({ filter: { id: '', state: null, label_selector } });
  const stats = (label_selector: Record<string, string>) =>
    toPodStatsFilter({ filter: { id: '', label_selector } });

  it('take 64 entries, and refuse more, or keys and values no label could have, naming the field', () => {
    assert.equal(Object.keys(list(selector(64))?.labelSelector ?? {}).length, 64);
    assert.equal(Object.keys(stats(selector(64)).labelSelector ?? {}).length, 64);
    for (const filter of [list, stats]) {
      const refused = (value: Record<string, string>): void =>
        assert.throws(
          () => filter(value),
          (err: unknown) => err instanceof InvalidArgumentError && err.field === 'filter.label_selector',
        );
      refused(selector(65));
      // The probe's selector: refused by counting, before any entry is looked at.
      refused(selector(500_000));
      refused({ [`a/${'k'.repeat(400)}`]: 'v' });
      refused(selector(2, 'x'.repeat(200 * 1024)));
    }
  });
});

describe('RunPodSandbox labels and annotations', () => {
  it('takes maps up to 256 KiB and refuses more, naming the map', () => {
    const big = { 'example.com/blob': 'x'.repeat(200 * 1024) };
    assert.equal(toSandboxSpec(request({ annotations: big })).annotations, big);
    refuses(
      request({ annotations: { 'example.com/blob': 'x'.repeat(5 * 1024 * 1024) } }),
      'config.annotations',
    );
    refuses(request({ labels: { a: 'x'.repeat(300 * 1024) } }), 'config.labels');
    refuses(request({ labels: { '': 'empty key' } }), 'config.labels');
    refuses(request({ labels: { 'bad\nkey': 'v' } }), 'config.labels');
  });
});

describe('RunPodSandbox sysctls', () => {
  const withSysctls = (
    sysctls: Record<string, string>,
    network: NamespaceMode = 'POD',
    ipc: NamespaceMode = 'POD',
  ): RunPodSandboxRequest =>
    request({
      linux: linuxConfig(sysctls, {
        namespace_options: { network, pid: 'CONTAINER', ipc, target_id: '', userns_options: null },
      }),
    });

  it('takes the namespaced ones a pod has of its own', () => {
    const ok = {
      'net.ipv4.ip_local_port_range': '1024 65000',
      'kernel.shm_rmid_forced': '1',
      'fs.mqueue.msg_max': '20',
    };
    assert.deepEqual(toSandboxSpec(withSysctls(ok)).sysctls, ok);
  });

  it("refuses one that is not namespaced, or whose namespace is the node's", () => {
    refuses(withSysctls({ 'kernel.sysrq': '1' }), 'config.linux.sysctls["kernel.sysrq"]');
    refuses(withSysctls({ 'vm.overcommit_memory': '1' }), 'config.linux.sysctls["vm.overcommit_memory"]');
    refuses(
      withSysctls({ 'net.ipv4.ip_forward': '1' }, 'NODE'),
      'config.linux.sysctls["net.ipv4.ip_forward"]',
    );
    refuses(withSysctls({ 'kernel.shmmax': '1' }, 'POD', 'NODE'), 'config.linux.sysctls["kernel.shmmax"]');
  });
});

describe('RunPodSandbox user namespace options', () => {
  const ns = (userns: Received<'UserNamespace'> | null): Partial<WirePodSandboxConfig> => ({
    linux: linuxConfig(
      {},
      {
        namespace_options: {
          network: 'POD',
          pid: 'CONTAINER',
          ipc: 'POD',
          target_id: '',
          userns_options: userns,
        },
      },
    ),
  });
  const mapping = [{ container_id: 0, host_id: 65536, length: 65536 }];

  it('refuses a pod that asks for a user namespace of its own, rather than run it in the host one', () => {
    const field = 'config.linux.security_context.namespace_options.userns_options.mode';
    refuses(request(ns({ mode: 'POD', uids: mapping, gids: mapping })), field);
    // The enum's zero value is POD: a mode left out with mappings asks for a namespace too.
    refuses(request(ns({ mode: 0, uids: mapping, gids: mapping })), field);
    refuses(request(ns({ mode: 'CONTAINER', uids: [], gids: [] })), field);
  });

  it("takes NODE, the host's, and options left out", () => {
    assert.doesNotThrow(() => toSandboxSpec(request(ns({ mode: 'NODE', uids: [], gids: [] }))));
    assert.doesNotThrow(() => toSandboxSpec(request(ns(null))));
  });
});

describe('RunPodSandbox user namespace mappings, where the handler can run such pods', () => {
  const can = { userNamespaces: true };
  const base = 'config.linux.security_context.namespace_options.userns_options';
  const podWith = (userns: Received<'UserNamespace'>, network: NamespaceMode = 'POD'): RunPodSandboxRequest =>
    request({
      linux: linuxConfig(
        {},
        {
          namespace_options: { network, pid: 'CONTAINER', ipc: 'POD', target_id: '', userns_options: userns },
        },
      ),
    });
  const refusesField = (
    userns: Received<'UserNamespace'>,
    field: string,
    network: NamespaceMode = 'POD',
  ): void => {
    assert.throws(
      () => toSandboxSpec(podWith(userns, network), can),
      (err: unknown) => err instanceof InvalidArgumentError && err.field === field,
      field,
    );
  };
  const one = (host_id: number, length = 65536, container_id = 0) => [{ container_id, host_id, length }];

  it("keeps kubelet's mappings, uids and gids each their own", () => {
    const spec = toSandboxSpec(podWith({ mode: 'POD', uids: one(65536), gids: one(131072, 1000) }), can);
    assert.deepEqual(spec.userNamespace, {
      uids: [{ containerId: 0, hostId: 65536, length: 65536 }],
      gids: [{ containerId: 0, hostId: 131072, length: 1000 }],
    });
    // critest's mapping, which no multiple of 65536 is, where userns_min_host_id lets it.
    const critest = podWith({ mode: 'POD', uids: one(1000, 100000), gids: one(1000, 100000) });
    assert.ok(toSandboxSpec(critest, { ...can, minHostId: 1000 }));
    assert.throws(() => toSandboxSpec(critest, can), {
      message: /uids\[0\]\.host_id: 1000 is below 65536: host ids below it are the host's own users/,
    });
    assert.equal(toSandboxSpec(podWith({ mode: 'NODE', uids: [], gids: [] }), can).userNamespace, null);
  });

  it('refuses what kubelet never sends and the kernel or the host cannot take, naming the field', () => {
    refusesField({ mode: 'POD', uids: [], gids: one(65536) }, `${base}.uids`);
    refusesField({ mode: 'POD', uids: [...one(65536), ...one(131072)], gids: one(65536) }, `${base}.uids`);
    refusesField(
      { mode: 'POD', uids: one(65536), gids: one(65536, 65536, 1) },
      `${base}.gids[0].container_id`,
    );
    refusesField({ mode: 'POD', uids: one(65536, 0), gids: one(65536) }, `${base}.uids[0].length`);
    refusesField({ mode: 'POD', uids: one(0), gids: one(65536) }, `${base}.uids[0].host_id`);
    refusesField(
      { mode: 'POD', uids: one(0xffff_ffff - 65535), gids: one(65536) },
      `${base}.uids[0].host_id`,
    );
    assert.ok(toSandboxSpec(podWith({ mode: 'POD', uids: one(0xffff_ffff - 65536), gids: one(65536) }), can));
    refusesField({ mode: 'NODE', uids: one(65536), gids: [] }, `${base}.uids`);
    refusesField({ mode: 'TARGET', uids: [], gids: [] }, `${base}.mode`);
    refusesField(
      { mode: 'POD', uids: one(65536), gids: one(65536) },
      'config.linux.security_context.namespace_options.network',
      'NODE',
    );
  });
});
