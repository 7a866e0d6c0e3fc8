/** CheckpointContainer: the request checked and handed to the checkpoint service (src/checkpoint/). */
import type { ContainerCheckpoint } from '../checkpoint/service.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import { requireId } from './validate.js';
import { absolutePath, seconds } from './validate-container.js';

export function checkpointHandlers(checkpoints: ContainerCheckpoint) {
  return {
    CheckpointContainer: async (req) => {
      await checkpoints.checkpoint({
        containerId: requireId('container_id', req.container_id),
        // ".." is no way to name a file berth writes as root.
        location: absolutePath('location', req.location, false),
        timeoutSeconds: seconds('timeout', req.timeout),
      });
      return {};
    },
  } satisfies Pick<UnaryHandlers<RuntimeServiceHandlers>, 'CheckpointContainer'>;
}
