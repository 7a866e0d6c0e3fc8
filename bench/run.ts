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
