const OOM_SCORE_ADJ_MIN = -1000;
const OOM_SCORE_ADJ_MAX = 1000;

/**
 * The oom_score_adj to put in a spec. Lowering it below the daemon's own value needs
 * CAP_SYS_RESOURCE, which runc's init does not have everywhere (this VM withholds it), and then
 * container creation fails outright. So, like containerd's restrictOOMScoreAdj, never ask for less
 * than the daemon's own value (`own`, read once at start-up: src/host/features.ts): the container
 * ends up no more protected than the daemon. A null `own` (unreadable) sets no floor, and runc
 * reports a real violation.
 */
export function clampOomScoreAdj(wanted: number, own: number | null): number {
  const bounded = Math.min(OOM_SCORE_ADJ_MAX, Math.max(OOM_SCORE_ADJ_MIN, Math.trunc(wanted)));
  return own === null ? bounded : Math.max(bounded, own);
}

/** The value of an oom_score_adj file's text; null when it holds no number. */
export function parseOomScoreAdj(text: string): number | null {
  const value = Number.parseInt(text.trim(), 10);
  return Number.isFinite(value) ? value : null;
}
