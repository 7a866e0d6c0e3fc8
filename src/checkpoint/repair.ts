/**
 * Start-up repair of checkpoints a killed berthd left mid-way: the container it paused runs again
 * (`runc resume`, which thaws the cgroup freezer runc and criu use), and its staging dir and temp
 * archive go. Runs in the containers' repair (container/recovery.ts), once their rows are settled.
 */
import { readdir, readFile, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { runtimeOf } from '../container/context.js';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import type { RuntimeHandlers } from '../runtime/index.js';
import type { Store } from '../store/index.js';
import { checkpointsDir, JOURNAL, parseJournal } from './journal.js';

export interface CheckpointRepairDeps {
  rootDir: string;
  store: Store;
  runtimes: RuntimeHandlers;
  logger: Logger;
}

/** Returns the ids of the containers resumed. */
export async function repairCheckpoints(deps: CheckpointRepairDeps): Promise<string[]> {
  const parent = checkpointsDir(deps.rootDir);
  const names = await readdir(parent).catch(() => [] as string[]);
  const resumed: string[] = [];
  for (const name of names) {
    const dir = join(parent, name);
    const journal = parseJournal(await readFile(join(dir, JOURNAL), 'utf8').catch(() => ''));
    try {
      if (journal) {
        const container = deps.store.containers.get(journal.containerId);
        if (container) {
          const runtime = runtimeOf(deps, container);
          if ((await runtime.state(container.id))?.status === 'paused') {
            await runtime.resume(container.id);
            resumed.push(container.id);
            deps.logger.warn(
              { container: container.id },
              'resumed a container a cut-short checkpoint had paused',
            );
          }
        }
        // Only a temp archive's name is ever journalled: never a client's file.
        if (/^\..*\.tmp$/.test(basename(journal.tempArchive))) await rm(journal.tempArchive, { force: true });
      }
      await rm(dir, { recursive: true, force: true });
    } catch (err) {
      deps.logger.error({ dir, err: errorMessage(err) }, 'checkpoint repair failed');
    }
  }
  return resumed;
}
