import { watch, type FSWatcher } from 'node:fs';

/**
 * inotify watches on a few directories, calling `onChange` for anything that happens in them (an
 * entry created, removed, renamed, written or chmod'ed, or the directory itself going away).
 * A directory that does not exist, or cannot be watched, is skipped: callers must look again on
 * their own now and then, as they must anyway, since inotify can drop events when its queue
 * overflows and never sees a change behind a symlink.
 */
export class DirWatch {
  private watchers: FSWatcher[] = [];

  constructor(private readonly onChange: () => void) {}

  /** Watches `dirs` from now on, in place of whatever was watched before. */
  rearm(dirs: readonly string[]): void {
    this.close();
    for (const dir of new Set(dirs)) {
      let watcher: FSWatcher;
      try {
        watcher = watch(dir, { persistent: false }, () => this.onChange());
      } catch {
        continue;
      }
      // A watch that fails stops reporting: whatever it missed must be looked at again.
      watcher.on('error', () => {
        watcher.close();
        this.onChange();
      });
      this.watchers.push(watcher);
    }
  }

  close(): void {
    for (const watcher of this.watchers) watcher.close();
    this.watchers = [];
  }
}
