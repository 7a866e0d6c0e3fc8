import { readFileSync } from 'node:fs';

const OOM_SCORE_ADJ_MIN = -1000;
const OOM_SCORE_ADJ_MAX = 1000;

/**
 * The oom_score_adj to put in a spec. Lowering it below the daemon's own value needs
 * CAP_SYS_RESOURCE, which runc's init does not have everywhere (this VM withholds it), and then
 * container creation fails outright. So, like containerd's restrictOOMScoreAdj, never ask for less
 * than the daemon's own value: the container ends up no more protected than the daemon.
 * `ownPath` exists for tests.
 */
export function clampOomScoreAdj(wanted: number, ownPath = '/proc/self/oom_score_adj'): number {
  const bounded = Math.min(OOM_SCORE_ADJ_MAX, Math.max(OOM_SCORE_ADJ_MIN, Math.trunc(wanted)));
  const own = readOwnOomScoreAdj(ownPath);
  return own === null ? bounded : Math.max(bounded, own);
}

/** null when unreadable: then we cannot know the floor, and runc will report a real violation. */
function readOwnOomScoreAdj(path: string): number | null {
  try {
    const value = Number.parseInt(readFileSync(path, 'utf8').trim(), 10);
    return Number.isFinite(value) ? value : null;
  } catch {
    return null;
  }
}
