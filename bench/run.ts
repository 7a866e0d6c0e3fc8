/** What every benchmark does around its measurements: read its sizes from the environment, and exit. */

/** A positive whole number from env var `name`, or `fallback` when it is unset or not one. */
export function envCount(name: string, fallback: number): number {
  const value = Number(process.env[name]);
  return Number.isInteger(value) && value > 0 ? value : fallback;
}

/** Runs a benchmark's `main`; a failure is printed and sets the exit code, never thrown past here. */
export function runBench(main: () => Promise<void>): void {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}

/** A size from a command-line flag's value, else from env var `env`, else `fallback`. */
export function sizeOption(flag: string | undefined, env: string, fallback: number): number {
  if (flag === undefined) return envCount(env, fallback);
  const value = Number(flag);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${flag}: not a positive whole number`);
  return value;
}
