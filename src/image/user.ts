/**
 * Splits an image config's User ("1000", "1000:1000", "app", "app:grp") into what ImageStatus
 * reports: a numeric uid, or a user name for kubelet's runAsNonRoot check to resolve later.
 */
export function imageUser(user: string | undefined): { uid: number | null; username: string } {
  const name = (user ?? '').split(':')[0] ?? '';
  // Neither set: kubelet then assumes root, as it does for containerd.
  if (name === '') return { uid: null, username: '' };
  if (/^\d+$/.test(name)) return { uid: Number(name), username: '' };
  return { uid: null, username: name };
}
