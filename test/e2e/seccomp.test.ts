/**
 * berth's RuntimeDefault seccomp profile under real runc, end to end through berthd: an allow-list
 * that still runs an ordinary workload (a shell, a web server and its client over loopback, nc),
 * and that refuses what reaches past the container (namespaces, keyrings, bpf, ptrace...). A probe
 * built here makes the syscalls busybox cannot, and an Unconfined container running the same
 * probe shows which refusals are the filter's rather than the kernel's. Needs root. Traffic stays
 * on the containers' loopback.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { run } from '../../src/exec.js';
import { SHARED_PID_LINUX, TestDaemon } from '../harness/daemon.js';
import { busyboxLayer, pushImage, type LayerEntry, type PushedImage } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import {
  containerConfig,
  execSync,
  execText,
  podStatus,
  runPod,
  runPodSandbox,
  startContainer,
  stopAndRemovePod,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const SUITE_TIMEOUT_MS = 600_000 * BOUND_SCALE;

/** Applets beyond the harness's base image that these tests need. */
const EXTRA_APPLETS = ['unshare', 'httpd', 'wget'];

const RUNTIME_DEFAULT = { seccomp: { profile_type: 'RuntimeDefault' } };

/**
 * One line per check, `name=errno` (0 when the syscall succeeded). Raw syscall(), so that no libc
 * fallback hides what the filter answered, except for fork and pthread_create, where libc's own
 * path is the point (glibc tries clone3 for a thread and must fall back to clone).
 */
const PROBE_SOURCE = String.raw`
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void report(const char *name, long rc) { printf("%s=%d\n", name, rc < 0 ? errno : 0); }

/* For calls that change the caller (a new user namespace, a new root): made in a child. */
static void in_child(const char *name, long (*call)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    long rc = call();
    _exit(rc < 0 ? errno : 0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) {
    printf("%s=255\n", name);
    return;
  }
  printf("%s=%d\n", name, WEXITSTATUS(status));
}

static long unshare_user(void) { return syscall(SYS_unshare, CLONE_NEWUSER); }

static long clone_newuser(void) {
  long rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (rc == 0) _exit(0);
  if (rc > 0) waitpid((pid_t)rc, NULL, 0);
  return rc;
}

static long chroot_root(void) { return syscall(SYS_chroot, "/"); }

static void *thread_main(void *arg) { return arg; }

int main(void) {
  static char zeros[256];
  long rc;

  report("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
  report("add_key", syscall(SYS_add_key, "user", "berth", "x", 1, -3));
  report("bpf", syscall(SYS_bpf, 0 /* MAP_CREATE */, zeros, 128));
  report("io_uring_setup", syscall(SYS_io_uring_setup, 1, zeros));
  report("userfaultfd", syscall(SYS_userfaultfd, 0));
  report("perf_event_open", syscall(SYS_perf_event_open, zeros, 0, -1, -1, 0));
  in_child("unshare_user", unshare_user);
  in_child("clone_newuser", clone_newuser);
  in_child("chroot", chroot_root);
  report("setns", syscall(SYS_setns, -1, 0));
  report("syslog", syscall(SYS_syslog, 10 /* SIZE_BUFFER */, 0, 0));

  struct { unsigned int bytes; int type; unsigned char h[128]; } handle = { 128, 0, {0} };
  int mount_id;
  report("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD, "/dev", &handle, &mount_id, 0));

  report("socket_inet", rc = syscall(SYS_socket, AF_INET, SOCK_STREAM, 0));
  if (rc >= 0) close((int)rc);
  report("socket_vsock", syscall(SYS_socket, 40, SOCK_STREAM, 0));
  report("socket_vsock_high", syscall(SYS_socket, 0x100000028L, SOCK_STREAM, 0));

  report("personality_query", syscall(SYS_personality, 0xffffffffUL));
  rc = syscall(SYS_personality, 0x0040000UL /* ADDR_NO_RANDOMIZE */);
  report("personality_other", rc);
  if (rc >= 0) syscall(SYS_personality, 0UL);

  report("clone3", syscall(SYS_clone3, NULL, 0));
  /* x86_64 leaves 387..423 unassigned: the kernel says ENOSYS, a default-deny filter EPERM. */
  report("unassigned", syscall(400));

  pid_t child = fork();
  if (child == 0) _exit(0);
  if (child > 0) waitpid(child, NULL, 0);
  report("fork", child);

  pthread_t thread;
  int err = pthread_create(&thread, NULL, thread_main, NULL);
  if (err == 0) pthread_join(thread, NULL);
  errno = err;
  report("pthread_create", err == 0 ? 0 : -1);

  char src[8] = "abc", dst[8];
  struct iovec local = { dst, 4 }, remote = { src, 4 };
  report("process_vm_readv", syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0));
  report("kcmp", syscall(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, 0, 0));

  /* Another process of the same user, which the kernel alone would let us trace. */
  child = fork();
  if (child == 0) { pause(); _exit(0); }
  rc = syscall(SYS_ptrace, PTRACE_ATTACH, child, 0, 0);
  report("ptrace_attach", rc);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return 0;
}
`;

async function buildProbe(): Promise<Buffer | null> {
  if (!existsSync('/usr/bin/gcc')) return null;
  const dir = await mkdtemp(join(tmpdir(), 'berth-seccomp-probe-'));
  try {
    await writeFile(join(dir, 'probe.c'), PROBE_SOURCE);
    await run('gcc', ['-static', '-O2', '-pthread', '-o', join(dir, 'probe'), join(dir, 'probe.c')], {
      timeoutMs: 60_000,
    });
    return await readFile(join(dir, 'probe'));
  } catch {
    return null;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function parseProbe(out: string): Record<string, number> {
  const result: Record<string, number> = {};
  for (const line of out.trim().split('\n')) {
    const [name, value] = line.split('=');
    if (name && value !== undefined) result[name] = Number(value);
  }
  return result;
}

const EPERM = 1;
const EBADF = 9;
const ENOSYS = 38;
/** The probe's unassigned syscall number is x86_64's. */
const UNASSIGNED = process.arch === 'x64' ? ['unassigned'] : [];

describe('the RuntimeDefault seccomp profile', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;
  let probe: Buffer | null = null;
  let pod: Pod;

  before(async () => {
    registry = await startRegistry();
    probe = await buildProbe();
    const entries: LayerEntry[] = [
      { type: 'dir', path: 'mnt' },
      ...(probe ? [{ type: 'file', path: 'bin/probe', content: probe, mode: 0o755 } as LayerEntry] : []),
    ];
    image = await pushImage(registry, 'berth/seccomp', '1', {
      layers: [await busyboxLayer('gzip', { applets: EXTRA_APPLETS, entries })],
      config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/' },
    });
    daemon = await TestDaemon.create({ cni: 'bridge' });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    // With an infra process (a shared pid namespace), whose confinement is checked too.
    pod = await runPod(daemon.cri, daemon.pod('seccomp', { linux: SHARED_PID_LINUX }));
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
  });

  function startNew(name: string, extra: Record<string, unknown>): Promise<string> {
    return startContainer(daemon.cri, pod, containerConfig(name, image.reference, extra));
  }

  async function probeIn(t: TestContext, id: string): Promise<Record<string, number> | null> {
    if (!probe) {
      t.skip('no gcc to build the syscall probe');
      return null;
    }
    return parseProbe(await execText(daemon.cri, id, ['/bin/probe']));
  }

  async function infraStatus(sandbox: string): Promise<string> {
    const { pid } = (await podStatus(daemon.cri, sandbox)).info;
    assert.ok(pid > 0, 'the verbose status names the infra pid');
    return readFile(`/proc/${pid}/status`, 'utf8');
  }

  it('runs an ordinary workload: shell tools, a web server and its client on loopback, nc', async () => {
    const server = [
      'mkdir -p /tmp/www',
      'echo hello-from-httpd > /tmp/www/index.html',
      'httpd -f -p 127.0.0.1:8081 -h /tmp/www &',
      'while true; do echo hello-from-nc | nc -l -p 8082; done',
    ].join('\n');
    const id = await startNew('workload', {
      command: ['/bin/sh', '-c', server],
      linux: { security_context: RUNTIME_DEFAULT },
    });
    const status = await execText(daemon.cri, id, ['cat', '/proc/self/status']);
    assert.match(status, /^Seccomp:\s+2$/m, 'filtered');
    const tools = await execText(daemon.cri, id, [
      'sh',
      '-c',
      'ls / >/dev/null && cat /etc/passwd >/dev/null && sleep 0.1 && id && echo tools-ok',
    ]);
    assert.match(tools, /uid=0\(root\)/);
    assert.match(tools, /tools-ok/);
    let page = '';
    await waitFor(async () => {
      const res = await execSync(daemon.cri, id, ['wget', '-q', '-O-', 'http://127.0.0.1:8081/'], 5);
      page = res.stdout.toString();
      return res.exit_code === 0;
    }, 10_000);
    assert.equal(page, 'hello-from-httpd\n');
    let reply = '';
    await waitFor(async () => {
      reply = (await execSync(daemon.cri, id, ['nc', '127.0.0.1', '8082'], 5)).stdout.toString();
      return reply.includes('hello-from-nc');
    }, 10_000);
  });

  it('refuses namespaces and mounts from the shell', async () => {
    const id = await startNew('shell-denials', { linux: { security_context: RUNTIME_DEFAULT } });
    for (const cmd of [
      ['unshare', '-U', 'true'],
      ['unshare', '-m', 'true'],
      ['unshare', '-n', 'true'],
      ['mount', '-t', 'tmpfs', 'x', '/mnt'],
    ]) {
      const res = await execSync(daemon.cri, id, cmd);
      assert.notEqual(res.exit_code, 0, cmd.join(' '));
      // EPERM, which busybox's mount words as "permission denied (are you root?)".
      assert.match(res.stderr.toString(), /Operation not permitted|permission denied/, cmd.join(' '));
    }
    // The control: unconfined, the same user may create a user namespace, so the filter refused it.
    const open = await startNew('shell-unconfined', {
      linux: { security_context: { seccomp: { profile_type: 'Unconfined' } } },
    });
    assert.equal((await execSync(daemon.cri, open, ['unshare', '-U', 'true'])).exit_code, 0);
  });

  it('refuses keyrings, bpf, io_uring, ptrace and the other reaches past the container', async (t) => {
    const id = await startNew('probe-denials', { linux: { security_context: RUNTIME_DEFAULT } });
    const got = await probeIn(t, id);
    if (!got) return;
    for (const name of [
      'keyctl',
      'add_key',
      'bpf',
      'io_uring_setup',
      'userfaultfd',
      'perf_event_open',
      'unshare_user',
      'setns',
      'syslog',
      'name_to_handle_at',
      'socket_vsock',
      'socket_vsock_high',
      'personality_other',
      ...UNASSIGNED,
      'clone_newuser',
      'process_vm_readv',
      'kcmp',
      'ptrace_attach',
    ]) {
      assert.equal(got[name], EPERM, `${name}: ${JSON.stringify(got)}`);
    }
    assert.equal(got.clone3, ENOSYS, 'clone3 answers ENOSYS so libc falls back to clone');
    for (const name of ['socket_inet', 'personality_query', 'chroot', 'fork', 'pthread_create']) {
      assert.equal(got[name], 0, `${name}: ${JSON.stringify(got)}`);
    }

    // Unconfined, the kernel alone answers these with something other than EPERM, so each EPERM
    // above was the filter's.
    const open = await startNew('probe-unconfined', {
      linux: { security_context: { seccomp: { profile_type: 'Unconfined' } } },
    });
    const control = await probeIn(t, open);
    assert.ok(control);
    for (const name of [
      'keyctl',
      'add_key',
      'bpf',
      'io_uring_setup',
      'perf_event_open',
      'unshare_user',
      'clone_newuser',
      'setns',
      'name_to_handle_at',
      'socket_vsock',
      'socket_vsock_high',
      'personality_other',
      ...UNASSIGNED,
      'process_vm_readv',
      'kcmp',
      'ptrace_attach',
    ]) {
      assert.notEqual(control[name], EPERM, `${name} unconfined: ${JSON.stringify(control)}`);
    }
    assert.equal(control.setns, EBADF);
    if (UNASSIGNED.length > 0) assert.equal(control.unassigned, ENOSYS);
    assert.notEqual(control.clone3, ENOSYS);
  });

  it('lets a capability the container holds back in: SYS_PTRACE gives ptrace, kcmp, process_vm_readv', async (t) => {
    const id = await startNew('probe-ptrace', {
      linux: { security_context: { ...RUNTIME_DEFAULT, capabilities: { add_capabilities: ['SYS_PTRACE'] } } },
    });
    const got = await probeIn(t, id);
    if (!got) return;
    for (const name of ['ptrace_attach', 'kcmp', 'process_vm_readv'])
      assert.equal(got[name], 0, `${name}: ${JSON.stringify(got)}`);
    assert.equal(got.keyctl, EPERM, 'the rest stays denied');
    assert.equal(got.unshare_user, EPERM);
  });

  it('confines the infra process too, unless the pod is privileged', async () => {
    assert.match(await infraStatus(pod.id), /^Seccomp:\s+2$/m);
    const config = daemon.pod('seccomp-priv', { linux: { security_context: { privileged: true } } });
    const privileged = await runPodSandbox(daemon.cri, config);
    assert.match(await infraStatus(privileged), /^Seccomp:\s+0$/m);
    await stopAndRemovePod(daemon.cri, privileged);
  });
});
