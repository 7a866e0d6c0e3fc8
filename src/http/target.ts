/**
 * The request-target of an HTTP/1.1 request line, as berthd's listeners route on it. Clients send
 * the origin form (`/exec/<token>?port=80`); RFC 9112 also has servers accept the absolute form
 * (`http://host/exec/<token>`). Anything else (`*`, a bare word) is malformed here. Parsed by hand
 * rather than with `new URL(target, base)`, which throws on valid origin forms such as `//`.
 */

/** Longer targets are refused with 414: no route of ours comes close (a token is 22 characters). */
export const MAX_TARGET_CHARS = 4096;

export interface RequestTarget {
  /** Starts with '/'; not percent-decoded. */
  path: string;
  /** The query without its '?', '' when there is none. */
  query: string;
}

/** Why a target cannot be routed: the HTTP status that says so, and the message. */
export interface TargetRefusal {
  status: 400 | 414;
  message: string;
}

const ABSOLUTE_FORM = /^https?:\/\/[^/?#]*/i;

export function parseTarget(target: string | undefined): RequestTarget | TargetRefusal {
  const raw = target ?? '';
  if (raw.length > MAX_TARGET_CHARS) {
    return { status: 414, message: `request target longer than ${MAX_TARGET_CHARS} characters` };
  }
  // The absolute form's scheme and authority are dropped: which host the client named changes nothing.
  const authority = ABSOLUTE_FORM.exec(raw);
  const rest = authority ? raw.slice(authority[0].length) || '/' : raw;
  if (!rest.startsWith('/')) {
    return { status: 400, message: `malformed request target ${JSON.stringify(raw.slice(0, 64))}` };
  }
  // A fragment has no place in a request; whatever follows '#' is dropped as a URL parser would.
  const [beforeFragment = ''] = rest.split('#', 1);
  const question = beforeFragment.indexOf('?');
  return question === -1
    ? { path: beforeFragment, query: '' }
    : { path: beforeFragment.slice(0, question), query: beforeFragment.slice(question + 1) };
}

export function isRefusal(parsed: RequestTarget | TargetRefusal): parsed is TargetRefusal {
  return 'status' in parsed;
}
