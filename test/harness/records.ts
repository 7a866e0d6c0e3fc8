/**
 * The sandbox and container records tests put in a store, every field overridable: pod sandbox
 * "nginx" (pod1) as RunPodSandbox has just reserved it, and its container "web" (c0ffee01) as
 * CreateContainer has just reserved it; and the CNI records of the pod's network.
 */
import type { CniResult } from '../../src/cni/index.js';
import type { Container } from '../../src/model/container.js';
import type { Sandbox, StoredNetworking } from '../../src/model/sandbox.js';
import { containerSpec, sandboxSpec } from './container-spec.js';

/** The image the default container was made from. */
export const IMAGE_ID = `sha256:${'a'.repeat(64)}`;

export function sandbox(over: Partial<Sandbox> = {}): Sandbox {
  const metadata = { name: 'nginx', namespace: 'default', uid: 'uid-1', attempt: 0 };
  const cgroupParent = '/kubepods/besteffort/poduid-1';
  return {
    id: 'pod1',
    ...metadata,
    state: 'CREATING',
    step: 'reserve',
    spec: sandboxSpec({ metadata, cgroupParent }),
    runtimeHandler: '',
    hostNetwork: false,
    netnsPath: '/var/run/netns/berth-pod1',
    networkState: 'NONE',
    cniConfig: null,
    cniResults: null,
    ip: '',
    additionalIps: [],
    createdAt: '1763793600123456789',
    pid: 0,
    cgroupParent,
    podCgroup: '',
    resources: null,
    sandboxDir: '/var/lib/berth/sandboxes/pod1',
    infra: true,
    infraStartTime: 0,
    reason: '',
    ...over,
  };
}

export function container(over: Partial<Container> = {}): Container {
  return {
    id: 'c0ffee01',
    sandboxId: 'pod1',
    name: 'web',
    attempt: 0,
    state: 'CREATING',
    step: 'reserve',
    spec: containerSpec({ metadata: { name: 'web', attempt: 0 }, command: ['/bin/sh'] }),
    imageName: 'docker.io/library/busybox:latest',
    imageId: IMAGE_ID,
    createdAt: '1763793600123456789',
    startedAt: '0',
    finishedAt: '0',
    exitCode: 0,
    reason: '',
    message: '',
    pid: 0,
    monitorPid: 0,
    logPath: '/var/log/pods/default_nginx_uid-1/web/0.log',
    bundleDir: '/run/berth/containers/c0ffee01',
    cgroupsPath: '/kubepods/besteffort/poduid-1/c0ffee01',
    user: null,
    restore: false,
    ...over,
  };
}

/** What RunPodSandbox records before its first ADD: loopback, then a bridge network. */
export function storedNetworking(): StoredNetworking {
  return {
    attachment: {
      containerId: 'pod1',
      netnsPath: '/var/run/netns/berth-pod1',
      ifName: 'eth0',
      args: [
        ['IgnoreUnknown', '1'],
        ['K8S_POD_NAME', 'nginx'],
      ],
      capabilityArgs: { portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }] },
    },
    networks: [
      { cniVersion: '1.0.0', name: 'cni-loopback', plugins: [{ type: 'loopback' }] },
      {
        cniVersion: '1.0.0',
        name: 'berth',
        plugins: [
          {
            type: 'bridge',
            bridge: 'berth0',
            ipam: { type: 'host-local', ranges: [[{ subnet: '10.88.0.0/16' }]] },
          },
        ],
      },
    ],
  };
}

/** What the ADDs of storedNetworking() answer, in the same order. */
export function cniResults(): CniResult[] {
  return [
    { cniVersion: '1.0.0', interfaces: [{ name: 'lo' }], ips: [{ address: '127.0.0.1/8', interface: 0 }] },
    {
      cniVersion: '1.0.0',
      interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/berth-pod1' }],
      ips: [{ address: '10.88.0.5/16', gateway: '10.88.0.1', interface: 0 }],
    },
  ];
}
