/**
 * Container exits as conmon reports them: one file per container in the exit directory, holding
 * the exit code, plus an `oom` marker in the container's persist directory (layout in conmon.ts).
 * Exits are learnt from inotify on the exit directory (fs.watch), never by polling containers.
 */
import { watch, type FSWatcher } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../log.js';
import { PRIVATE_DIR, PRIVATE_FILE } from '../file-modes.js';

export interface ExitRecord {
  id: string;
  /** 128 + signal for a killed process; -1 when conmon gave up (its own timeout). */
  exitCode: number;
  /** Nanoseconds since the epoch, decimal: the exit file's mtime, i.e. when conmon saw the exit. */
  finishedAt: string;
  /**
   * The container was OOM-killed: conmon saw it in its memory cgroup, or, when conmon could not
   * (a cgroup removed before it looked), the witness did.
   */
  oomKilled: boolean;
}

/**
 * Whether container `id`, exited with `exitCode` and no OOM marker from conmon, was OOM-killed,
 * as something that outlives its cgroup saw it (the systemd driver's scope, cgroups/systemd.ts).
 */
export type OomWitness = (id: string, exitCode: number) => Promise<boolean>;

/**
 * Container ids conmon may be given. No dot on purpose: conmon writes an exit file as
 * `<id>.XXXXXX` then renames it to `<id>`, so a dot marks its temp files in the exit directory.
 */
export const MONITOR_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]*$/;

/** Name of the marker conmon creates in the persist directory on an OOM event. */
export const OOM_MARKER = 'oom';

/** An exit file seen empty is being written by a non-atomic writer: look again this often. */
const EMPTY_RETRY_MS = 10;
const EMPTY_RETRIES = 20;

type Waiter = (rec: ExitRecord | null) => void;

export class ExitWatcher {
  private watcher: FSWatcher | null = null;
  private watching: Promise<void> | null = null;
  private onExit: ((rec: ExitRecord) => void) | null = null;
  /** Ids whose exit went to onExit: each is reported once, until forget() re-arms it. */
  private readonly reported = new Set<string>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private closed = false;

  /**
   * `persistDir` is the parent of the per-container persist directories given to conmon (the
   * same value as ConmonOptions.persistDir): the OOM marker lives there.
   */
  constructor(
    private readonly exitDir: string,
    private readonly logger: Logger,
    private readonly persistDir: string,
    private readonly oomWitness: OomWitness = () => Promise.resolve(false),
  ) {}

  /**
   * Starts watching, then reports every exit file already present (containers that exited while
   * berthd was down, or between a recovery pass and now) and each new one as it appears. Each
   * exit file reaches onExit once.
   */
  async start(onExit: (rec: ExitRecord) => void): Promise<void> {
    this.onExit = onExit;
    await this.ensureWatching();
    // Listed after the watch began, so a file appearing in between is seen by one or the other.
    const names = await readdir(this.exitDir);
    await Promise.all(names.map((name) => this.check(name)));
  }

  /** The exit of `id`, or null while it has not exited (or was never run under conmon). */
  async read(id: string): Promise<ExitRecord | null> {
    if (!MONITOR_ID_PATTERN.test(id)) return null;
    const path = join(this.exitDir, id);
    for (let attempt = 0; ; attempt++) {
      let text: string;
      let mtimeNs: bigint;
      try {
        // stat first: conmon renames a complete file into place, so content read after the stat
        // belongs to the same or a newer file, never an older one.
        mtimeNs = (await stat(path, { bigint: true })).mtimeNs;
        text = await readFile(path, 'utf8');
      } catch (err) {
        if (isNoEntry(err)) return null;
        throw err;
      }
      if (text.trim() === '') {
        if (attempt >= EMPTY_RETRIES) {
          this.logger.warn({ container: id, path }, 'exit file stays empty; ignoring it');
          return null;
        }
        await sleep(EMPTY_RETRY_MS);
        continue;
      }
      const exitCode = this.parseCode(id, text);
      return {
        id,
        exitCode,
        finishedAt: mtimeNs.toString(),
        oomKilled: await this.oomKilled(id, exitCode),
      };
    }
  }

  /**
   * Resolves with the exit of `id` once its exit file exists, or null after `timeoutMs`. The
   * watch is set up before the file is checked, so an exit racing this call is never missed.
   */
  async wait(id: string, timeoutMs: number): Promise<ExitRecord | null> {
    await this.ensureWatching();
    return new Promise<ExitRecord | null>((resolve) => {
      let settled = false;
      const finish: Waiter = (rec) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        const set = this.waiters.get(id);
        set?.delete(finish);
        if (set?.size === 0) this.waiters.delete(id);
        resolve(rec);
      };
      const timer = setTimeout(() => finish(null), timeoutMs);
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      set.add(finish);
      this.read(id).then(
        (rec) => {
          if (rec) finish(rec);
        },
        (err: unknown) => this.logger.warn({ container: id, err: String(err) }, 'reading exit file failed'),
      );
    });
  }

  /**
   * conmon's OOM marker, or the witness's word, which is then kept as a marker of berth's own: the
   * witness's evidence may not outlive the container's release (runc delete resets a failed
   * scope), and later reads of this exit (a restart's) must say the same.
   */
  private async oomKilled(id: string, exitCode: number): Promise<boolean> {
    const marker = join(this.persistDir, id, OOM_MARKER);
    if (await exists(marker)) return true;
    let witnessed = false;
    try {
      witnessed = await this.oomWitness(id, exitCode);
      if (witnessed) {
        this.logger.debug({ container: id }, 'OOM kill known from the cgroup driver; conmon missed it');
        await writeFile(marker, '', { flag: 'a', mode: PRIVATE_FILE });
      }
    } catch (err) {
      this.logger.warn(
        { container: id, err: String(err) },
        'recording whether the container was OOM-killed failed',
      );
    }
    return witnessed;
  }

  /** Deletes what conmon left for `id` (exit file, persist directory with the OOM marker). */
  async forget(id: string): Promise<void> {
    if (!MONITOR_ID_PATTERN.test(id)) return;
    this.reported.delete(id);
    await Promise.all([
      rm(join(this.exitDir, id), { force: true }),
      rm(join(this.persistDir, id), { recursive: true, force: true }),
    ]);
  }

  /** Stops watching; pending waits resolve with null. */
  close(): void {
    this.closed = true;
    this.watcher?.close();
    this.watcher = null;
    for (const set of [...this.waiters.values()]) for (const waiter of [...set]) waiter(null);
    this.waiters.clear();
  }

  private ensureWatching(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('exit watcher is closed'));
    this.watching ??= (async () => {
      await mkdir(this.exitDir, { recursive: true, mode: PRIVATE_DIR });
      const watcher = watch(this.exitDir, { persistent: false, encoding: 'utf8' });
      watcher.on('change', (_event, name) => {
        // No name means the kernel dropped events (queue overflow): look at everything again.
        if (typeof name === 'string') void this.check(name);
        else void this.rescan();
      });
      watcher.on('error', (err) => {
        this.logger.error({ dir: this.exitDir, err: err.message }, 'exit directory watch failed');
      });
      if (this.closed) watcher.close();
      else this.watcher = watcher;
    })().catch((err: unknown) => {
      this.watching = null;
      throw err;
    });
    return this.watching;
  }

  private async rescan(): Promise<void> {
    try {
      const names = await readdir(this.exitDir);
      await Promise.all(names.map((name) => this.check(name)));
    } catch (err) {
      this.logger.error({ dir: this.exitDir, err: String(err) }, 'exit directory rescan failed');
    }
  }

  /** Reads one exit file after an event and hands it to waiters and (once) to onExit. */
  private async check(name: string): Promise<void> {
    if (this.closed || !MONITOR_ID_PATTERN.test(name)) return;
    let rec: ExitRecord | null;
    try {
      rec = await this.read(name);
    } catch (err) {
      this.logger.warn({ container: name, err: String(err) }, 'reading exit file failed');
      return;
    }
    if (!rec || this.closed) return;
    for (const waiter of [...(this.waiters.get(name) ?? [])]) waiter(rec);
    if (!this.onExit || this.reported.has(name)) return;
    this.reported.add(name);
    try {
      this.onExit(rec);
    } catch (err) {
      this.logger.error({ container: name, err: String(err) }, 'exit handler failed');
    }
  }

  private parseCode(id: string, text: string): number {
    const code = Number(text.trim());
    if (Number.isInteger(code)) return code;
    this.logger.warn({ container: id, text }, 'exit file does not hold a number; exit code unknown');
    return -1;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if (isNoEntry(err)) return false;
    throw err;
  }
}

function isNoEntry(err: unknown): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === 'ENOENT';
}
