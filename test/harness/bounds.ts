/**
 * Time limits shared by the tests. A limit in a test bounds a hang; it never asserts speed. Each is
 * sized for a 2-core machine whose cores are both busy with something else (a compile, another
 * suite), where a call that takes 100 ms idle can take a few seconds, and a hang still takes
 * forever.
 */

/**
 * How many times longer every hang bound is on this run: 1 on a machine's own kernel, more in the
 * emulated VM (scripts/vm/run.sh sets BERTH_TEST_BOUND_SCALE there), where everything, berthd's own
 * start included, runs several times slower and a bound sized for a busy host would expire first.
 */
export const BOUND_SCALE = Math.max(1, Number(process.env.BERTH_TEST_BOUND_SCALE) || 1);

/**
 * A call that has not answered in this long is taken to hang. The slowest hostile CRI requests
 * (CreateContainer of 10,000-item lists) take about 1 s idle and 4.5 s with both cores busy.
 */
export const ANSWER_BOUND_MS = 30_000 * BOUND_SCALE;

/**
 * Each hostile-input test file's. The longest (the container rpcs) takes about 100 s idle and 220 s
 * with both cores busy; this leaves room on top for a few hung calls (each costs ANSWER_BOUND_MS)
 * to be reported before the bound ends the file.
 */
export const HOSTILE_FILE_BOUND_MS = 600_000 * BOUND_SCALE;
