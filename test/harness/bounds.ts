/**
 * Time limits shared by the tests. A limit in a test bounds a hang; it never asserts speed. Each is
 * sized for a 2-core machine whose cores are both busy with something else (a compile, another
 * suite), where a call that takes 100 ms idle can take a few seconds, and a hang still takes
 * forever.
 */

/**
 * A call that has not answered in this long is taken to hang. About 30 times what the slowest
 * hostile CRI request takes on an idle machine (CreateContainer of 100,000 list items, ~1 s).
 */
export const ANSWER_BOUND_MS = 30_000;

/**
 * Each hostile-input test file's: about a minute idle, so a machine at a third of its speed still
 * has room for a few hung calls to be reported (each costs ANSWER_BOUND_MS) before this ends it.
 */
export const HOSTILE_FILE_BOUND_MS = 600_000;
