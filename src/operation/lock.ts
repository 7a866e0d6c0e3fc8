/**
 * Serialises operations per key (a sandbox id, a pod's metadata, a container id) while letting
 * different keys proceed concurrently: kubelet may send Stop and Remove for one pod at the same time.
 */
export class KeyedLock {
  private tails = new Map<string, Promise<void>>();

  async with<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}
