/**
 * Domain specs for tests of what is built from them (OCI specs, users): the plainest container
 * and pod, each field overridable. A test's own defaults go in its overrides.
 */
import { emptyResources } from '../../src/cri/container-spec.js';
import type { ContainerSecurity, ContainerSpec } from '../../src/model/container.js';
import type { SandboxSpec } from '../../src/model/sandbox.js';

/** No limits at all, as src/cri builds them from an empty request. */
export { emptyResources } from '../../src/cri/container-spec.js';

/** Unprivileged, the pod's network and IPC, a pid namespace of its own, runtime-default profiles. */
export function containerSecurity(over: Partial<ContainerSecurity> = {}): ContainerSecurity {
  return {
    addCapabilities: [],
    dropCapabilities: [],
    addAmbientCapabilities: [],
    privileged: false,
    namespaces: { network: 'POD', pid: 'CONTAINER', ipc: 'POD', targetId: '' },
    runAsUser: null,
    runAsUsername: '',
    runAsGroup: null,
    readonlyRootfs: false,
    supplementalGroups: [],
    supplementalGroupsPolicy: 'Merge',
    noNewPrivs: false,
    maskedPaths: null,
    readonlyPaths: null,
    seccomp: { kind: 'RuntimeDefault' },
    apparmor: { kind: 'RuntimeDefault' },
    ...over,
  };
}

/** Container "app" of busybox, no command, env, mounts or limits; `security` goes to containerSecurity. */
export function containerSpec(
  over: Partial<ContainerSpec> = {},
  security: Partial<ContainerSecurity> = {},
): ContainerSpec {
  return {
    metadata: { name: 'app', attempt: 0 },
    image: 'docker.io/library/busybox:latest',
    userSpecifiedImage: '',
    command: [],
    args: [],
    workingDir: '',
    envs: [],
    mounts: [],
    devices: [],
    cdiDevices: [],
    labels: {},
    annotations: {},
    logPath: '',
    stdin: false,
    stdinOnce: false,
    tty: false,
    resources: emptyResources(),
    security: containerSecurity(security),
    ...over,
  };
}

/** Pod "pod-a": no DNS config, ports, cgroup parent or sysctls; the namespaces containerSecurity has. */
export function sandboxSpec(over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    metadata: { name: 'pod-a', uid: 'uid-1', namespace: 'ns-1', attempt: 0 },
    hostname: 'pod-a-host',
    logDirectory: '',
    dnsConfig: null,
    portMappings: [],
    labels: {},
    annotations: {},
    runtimeHandler: '',
    cgroupParent: '',
    sysctls: {},
    namespaces: { network: 'POD', pid: 'CONTAINER', ipc: 'POD', targetId: '' },
    userNamespace: null,
    security: {
      runAsUser: null,
      runAsGroup: null,
      supplementalGroups: [],
      privileged: false,
      readonlyRootfs: false,
    },
    ...over,
  };
}
