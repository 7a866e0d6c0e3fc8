/** Node timers fire at once beyond 2^31-1 ms; a longer CRI timeout means "practically never". */
export function timerMs(seconds: number): number {
  return Math.min(seconds * 1000, 2 ** 31 - 1);
}
