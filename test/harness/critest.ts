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
import { busyboxLayer, pushImage } from './images.js';
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

/** Runs the specs `focus` selects; bounded by `timeoutMs`, a hang bound. */
export async function runCritest(
  daemon: TestDaemon,
  focus: string,
  timeoutMs = 600_000,
): Promise<CritestOutcome> {
  assert.ok(CRITEST, String(critestSkip));
  const endpoint = `unix://${daemon.socket}`;
  const { code, stdout, stderr } = await runProgram(
    CRITEST,
    [
      `--runtime-endpoint=${endpoint}`,
      `--image-endpoint=${endpoint}`,
      `--ginkgo.focus=${focus}`,
      '--ginkgo.no-color',
      '--ginkgo.v',
    ],
    { timeoutMs },
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
