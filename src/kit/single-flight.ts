/** One shared run of the work, and how many callers still wait for it. */
interface Flight<T> {
  promise: Promise<T>;
  controller: AbortController;
  waiting: number;
}

/**
 * Concurrent callers with the same key share one run of the work: two pulls of an image (or of
 * two images sharing a layer) download and unpack it once; scrapes that arrive together share
 * one collection of the metrics.
 *
 * A caller may bring an AbortSignal. When it aborts, that caller alone is answered at once; the
 * shared work goes on for the others, and is aborted only when every caller waiting on it has
 * gone (a caller without a signal never goes). A caller arriving after that starts afresh.
 */
export class SingleFlight<T> {
  private readonly inFlight = new Map<string, Flight<T>>();

  run(key: string, work: (signal: AbortSignal) => Promise<T>, caller?: AbortSignal): Promise<T> {
    let flight = this.inFlight.get(key);
    if (!flight || flight.controller.signal.aborted) {
      const controller = new AbortController();
      const started: Flight<T> = { controller, waiting: 0, promise: Promise.resolve() as Promise<T> };
      started.promise = work(controller.signal).finally(() => {
        if (this.inFlight.get(key) === started) this.inFlight.delete(key);
      });
      this.inFlight.set(key, started);
      flight = started;
    }
    return join(flight, caller);
  }
}

function join<T>(flight: Flight<T>, caller: AbortSignal | undefined): Promise<T> {
  flight.waiting++;
  if (!caller) return flight.promise;
  return new Promise<T>((resolve, reject) => {
    const leave = (): void => {
      flight.waiting--;
      if (flight.waiting === 0) flight.controller.abort(caller.reason);
      reject(caller.reason instanceof Error ? caller.reason : new Error('cancelled'));
    };
    if (caller.aborted) {
      // The shared promise may still reject later; nobody waits for it here.
      flight.promise.catch(() => undefined);
      leave();
      return;
    }
    caller.addEventListener('abort', leave, { once: true });
    flight.promise.then(
      (value) => {
        caller.removeEventListener('abort', leave);
        resolve(value);
      },
      (err: unknown) => {
        caller.removeEventListener('abort', leave);
        reject(err);
      },
    );
  });
}
