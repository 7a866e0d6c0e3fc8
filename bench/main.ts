/**
 * `npm run bench`: runs the benchmarks named on the command line, each in a process of its own,
 * one after the other. With no names: all of them, or only the side-by-side CRI benchmark when
 * `--compare` (or BENCH_COMPARE) is given (the others have berth's figures alone). Arguments that are not bench
 * names (`--compare unix:///path`, `--runs 2`, ...) go to the CRI benchmark; the others read
 * their sizes from the environment (see each file's header).
 * Usage: node dist/bench/main.js [sandbox|image|container|containers-list|streaming|recovery|userns|kubelet|cri ...]
 *          [cri flags]
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { runBench } from './run.js';

const BENCHES = [
  'sandbox',
  'image',
  'container',
  'containers-list',
  'streaming',
  'recovery',
  'userns',
  'kubelet',
  'cri',
] as const;
type BenchName = (typeof BENCHES)[number];
/** A hung benchmark must end the run rather than hold it forever; a full CRI run takes minutes. */
const BENCH_TIMEOUT_MS = 2 * 60 * 60 * 1000;

function isBench(arg: string): arg is BenchName {
  return BENCHES.some((name) => name === arg);
}

function runOne(name: BenchName, args: readonly string[]): Promise<number> {
  const file = fileURLToPath(new URL(`./${name}.js`, import.meta.url));
  const child = spawn(process.execPath, [file, ...args], { stdio: 'inherit' });
  const timer = setTimeout(() => child.kill('SIGKILL'), BENCH_TIMEOUT_MS);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve(code ?? (signal ? 1 : 0));
    });
  });
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const named = args.filter(isBench);
  const criArgs = args.filter((arg) => !isBench(arg));
  const comparing =
    Boolean(process.env.BENCH_COMPARE) ||
    criArgs.some((arg) => arg === '--compare' || arg.startsWith('--compare='));
  const chosen: readonly BenchName[] = named.length > 0 ? named : comparing ? ['cri'] : BENCHES;
  const failed: string[] = [];
  for (const name of chosen) {
    console.log(`\n=== bench ${name}`);
    const code = await runOne(name, name === 'cri' ? criArgs : []);
    if (code !== 0) failed.push(name);
  }
  if (failed.length > 0) throw new Error(`benchmarks that failed to run: ${failed.join(', ')}`);
}

runBench(main);
