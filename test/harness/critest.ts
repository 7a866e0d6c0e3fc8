/**
 * The CRI validation suite itself (cri-tools' critest, ../shared/tools/critest) run against a test
 * berthd, a few of its specs at a time (--ginkgo.focus). critest names its images under public
 * registries; the berthd gets a registries.toml that sends every pull to a loopback TestRegistry
 * and nowhere else (critest's --registry-prefix is no help: it pulls the prefixed name but creates
 * containers of the unprefixed one), and the suites push stand-ins there under critest's paths.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TestDaemon } from './daemon.js';
import { busyboxEntries, busyboxLayer, buildLayer, pushImage } from './images.js';
import type { TestRegistry } from './registry.js';
import { runProgram } from './streaming.js';
import { sharedTool, toolSkip } from './tools.js';

export const CRITEST: string | null = sharedTool('CRITEST', 'critest');

export const critestSkip: string | false = toolSkip(CRITEST, 'CRITEST', 'critest');

/** critest's DefaultLinuxContainerImage (registry.k8s.io/e2e-test-images/busybox:1.29-2). */
const DEFAULT_IMAGE = { repo: 'e2e-test-images/busybox', tag: '1.29-2' };

/**
 * Writes, in `dir`, a registries.toml that has berthd pull every image from `registry` only (its
 * path kept), never from the registries critest names; returns the berthd flags that use it.
 */
export async function critestRegistryArgs(registry: TestRegistry, dir: string): Promise<string[]> {
  const path = join(dir, 'critest-registries.toml');
  await writeFile(path, `[registry."*"]\nmirrors = ["${registry.url}"]\nmirrors_only = true\n`, {
    mode: 0o600,
  });
  return ['--registry-config', path];
}

/**
 * The image critest runs by default: busybox with `top` (its default command and the pause
 * command of CreatePauseContainer).
 */
export async function pushCritestBusybox(registry: TestRegistry): Promise<void> {
  await pushImage(registry, DEFAULT_IMAGE.repo, DEFAULT_IMAGE.tag, {
    layers: [await busyboxLayer('gzip', { applets: ['top'] })],
    config: { Cmd: ['sh'] },
  });
}

/** critest's testImagePreDefinedGroup, as it names it; berthd gets it from the test registry. */
export const PREDEFINED_GROUP_IMAGE = 'gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest';

/** Its user (imagePredefinedGroupUID) and the image's group it is a member of (imagePredefinedGroupGID). */
export const PREDEFINED_USER = { uid: 1000, extraGid: 50000 } as const;

/**
 * A stand-in for cri-tools' images/image-predefined-group: busybox whose default user (uid 1000,
 * "default-user") is, by the image's /etc/group, also in group-defined-in-image (50000).
 */
export async function pushPredefinedGroupImage(registry: TestRegistry): Promise<void> {
  const { uid, extraGid } = PREDEFINED_USER;
  // Files of their own: the harness's base image already has a user 1000, in other groups.
  const passwd = [
    'root:x:0:0:root:/root:/bin/sh',
    `default-user:x:${uid}:${uid}::/home/default-user:/bin/sh`,
  ];
  const group = ['root:x:0:', `default-user:x:${uid}:`, `group-defined-in-image:x:${extraGid}:default-user`];
  const etc = new Set(['etc/passwd', 'etc/group']);
  const layer = await buildLayer(
    [
      ...busyboxEntries(['su']).filter((e) => !etc.has(e.path)),
      { type: 'file', path: 'etc/passwd', content: `${passwd.join('\n')}\n` },
      { type: 'file', path: 'etc/group', content: `${group.join('\n')}\n` },
    ],
    'gzip',
  );
  await pushImage(registry, 'k8s-staging-cri-tools/test-image-predefined-group', 'latest', {
    layers: [layer],
    config: { User: String(uid), Cmd: ['sh'] },
  });
}

export interface CritestOutcome {
  code: number | null;
  passed: number;
  failed: number;
  skipped: number;
  output: string;
}

/** Spec counts of ginkgo's last line: "SUCCESS! -- 7 Passed | 0 Failed | 0 Pending | 143 Skipped". */
function count(output: string, what: string): number {
  const m = new RegExp(`(\\d+) ${what}\\b`).exec(output);
  return m ? Number(m[1]) : 0;
}

/**
 * Runs the specs `focus` selects (all of them when null), but those `skip` matches; bounded by
 * `timeoutMs`, a hang bound. `env` is critest's environment, when not this process's.
 */
export async function runCritest(
  daemon: TestDaemon,
  focus: string | null,
  timeoutMs = 600_000,
  skip: string | null = null,
  env?: NodeJS.ProcessEnv,
): Promise<CritestOutcome> {
  assert.ok(CRITEST, String(critestSkip));
  const endpoint = `unix://${daemon.socket}`;
  const { code, stdout, stderr } = await runProgram(
    CRITEST,
    [
      `--runtime-endpoint=${endpoint}`,
      `--image-endpoint=${endpoint}`,
      ...(focus !== null ? [`--ginkgo.focus=${focus}`] : []),
      ...(skip !== null ? [`--ginkgo.skip=${skip}`] : []),
      '--ginkgo.no-color',
      '--ginkgo.v',
    ],
    { timeoutMs, ...(env ? { env } : {}) },
  );
  const output = `${stdout}\n${stderr}`;
  return {
    code,
    passed: count(output, 'Passed'),
    failed: count(output, 'Failed'),
    skipped: count(output, 'Skipped'),
    output,
  };
}

/** Asserts that all `expected` specs ran and passed, with critest's output in the message if not. */
export function assertCritestPassed(outcome: CritestOutcome, expected: number): void {
  const tail = outcome.output.slice(-20_000);
  assert.equal(outcome.code, 0, `critest failed:\n${tail}`);
  assert.equal(outcome.failed, 0, tail);
  assert.equal(outcome.passed, expected, `expected ${expected} specs to pass:\n${tail}`);
}
