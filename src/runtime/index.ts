/**
 * What the rest of berth sees of src/runtime/: the handlers and their verbs, the exits their
 * monitors report, and the types those speak in. runc and conmon themselves stay inside.
 */
export type { AttachIo } from './attach.js';
export { CRIU_DEFAULT_TIMEOUT_S, DUMP_LOG } from './checkpoint.js';
export { MonitorError, type MonitorCreateRequest, type MonitorCreated } from './conmon.js';
export { resetExecDirs } from './exec-process.js';
export type { ExecStreamIo } from './exec-stream.js';
export { EXEC_SYNC_OUTPUT_CAP, type ExecSyncResult } from './exec-sync.js';
export { ExitWatcher, type ExitRecord, type OomWitness } from './exits.js';
export {
  RuntimeHandlers,
  featuresOff,
  openRuntimeHandlers,
  type HandlerConfig,
  type HostCapabilities,
  type HandlerOwner,
  type SharedRuntimeConfig,
} from './handlers.js';
export type { ContainerState, ContainerStatus } from './runc.js';
export type {
  CheckpointOptions,
  CheckpointVerbs,
  ContainerVerbs,
  HandlerFeatures,
  MonitoredContainer,
  ProcessVerbs,
  RestoreRequest,
  RuntimeExecSyncOptions,
  RuntimeHandler,
} from './runtime.js';
