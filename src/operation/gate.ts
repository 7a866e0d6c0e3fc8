interface KeyState {
  /** Closers of the key under way. */
  closing: number;
  /** Operations under way inside the key. */
  active: number;
  /** Resolvers of closers waiting for `active` to reach 0. */
  idle: (() => void)[];
}

/**
 * Orders the work on a key against the closing of that key. Operations that add to the key run
 * inside the gate (enter); a closer shuts it to new operations, waits for the ones already inside,
 * then works on a key where nothing new can appear. An operation that comes while the key is
 * closing is refused with the error `refusal` makes. Several closers may overlap: the key opens
 * again when the last one ends.
 */
export class KeyedGate {
  private readonly keys = new Map<string, KeyState>();

  constructor(private readonly refusal: (key: string) => Error) {}

  /** Runs `fn` as an operation of `key`; refused while the key is closing. */
  async enter<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const state = this.state(key);
    if (state.closing > 0) throw this.refusal(key);
    state.active++;
    try {
      return await fn();
    } finally {
      state.active--;
      if (state.active === 0) for (const wake of state.idle.splice(0)) wake();
      this.forget(key, state);
    }
  }

  /** Closes `key` to new operations, waits for those under way, then runs `fn`. */
  async close<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const state = this.state(key);
    state.closing++;
    try {
      if (state.active > 0) await new Promise<void>((resolve) => state.idle.push(resolve));
      return await fn();
    } finally {
      state.closing--;
      this.forget(key, state);
    }
  }

  private state(key: string): KeyState {
    let state = this.keys.get(key);
    if (!state) {
      state = { closing: 0, active: 0, idle: [] };
      this.keys.set(key, state);
    }
    return state;
  }

  private forget(key: string, state: KeyState): void {
    if (state.closing === 0 && state.active === 0 && this.keys.get(key) === state) this.keys.delete(key);
  }
}
