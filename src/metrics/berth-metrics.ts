/**
 * berthd's Prometheus metrics: the registry, the sinks the lower layers report to, and the gauges
 * read from the store at scrape time. The only module that knows prom-client.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { PluginDone } from '../cni/index.js';
import type { RpcDone } from '../cri/handler.js';
import type { PullDone } from '../image/service.js';
import { CONTAINER_STATES } from '../model/container-lifecycle.js';
import { SANDBOX_STATES } from '../model/sandbox-lifecycle.js';
import type { StepOutcome } from '../operation/steps.js';
import { isRunning } from '../process/index.js';

/** What the scrape-time gauges count; read anew at every scrape. */
export interface StateSource {
  sandboxes(): ReadonlyArray<{ state: string }>;
  containers(): ReadonlyArray<{ state: string; monitorPid: number }>;
}

/** Steps and plugin execs run from a millisecond to tens of seconds (a slow CNI or runc). */
const STEP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Pulls run from a fraction of a second (all layers held) to minutes. */
const PULL_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
/**
 * How often the event-loop lag is sampled. prom-client's default, 10 ms, is a timer that wakes an
 * idle berthd a hundred times a second for as long as it runs. At 100 ms, a stall of 100 ms or more
 * still always shows (it spans a sample); shorter ones show in proportion to their length.
 */
const EVENT_LOOP_SAMPLE_MS = 100;

export class BerthMetrics {
  readonly registry = new Registry();
  private readonly rpcDuration: Histogram<'service' | 'method' | 'code'>;
  private readonly rpcTotal: Counter<'service' | 'method' | 'code'>;
  private readonly stepDuration: Histogram<'operation' | 'step'>;
  private readonly cniDuration: Histogram<'plugin' | 'command'>;
  private readonly pullBytes: Counter;
  private readonly pullDuration: Histogram;
  private readonly pullFailures: Counter<'reason'>;
  private readonly repairs: Counter<'kind'>;
  private readonly recoverySeconds: Gauge;

  constructor(state: StateSource) {
    const registers = [this.registry];
    // Unprefixed process_* and nodejs_*: the names dashboards and alerts for any Node service expect.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    this.rpcDuration = new Histogram({
      name: 'berth_grpc_request_duration_seconds',
      help: 'CRI calls by service, method and gRPC status, from receipt to reply (streams: to their end)',
      labelNames: ['service', 'method', 'code'],
      buckets: STEP_BUCKETS,
      registers,
    });
    this.rpcTotal = new Counter({
      name: 'berth_grpc_requests_total',
      help: 'CRI calls by service, method and gRPC status',
      labelNames: ['service', 'method', 'code'],
      registers,
    });
    this.stepDuration = new Histogram({
      name: 'berth_operation_step_duration_seconds',
      help: 'Steps of RunPodSandbox and CreateContainer, failed ones included',
      labelNames: ['operation', 'step'],
      buckets: STEP_BUCKETS,
      registers,
    });
    this.cniDuration = new Histogram({
      name: 'berth_cni_plugin_duration_seconds',
      help: 'CNI plugin execs by plugin type and command, failed ones included',
      labelNames: ['plugin', 'command'],
      buckets: STEP_BUCKETS,
      registers,
    });
    this.pullBytes = new Counter({
      name: 'berth_image_pull_bytes_total',
      help: 'Size of the images pulled (config and compressed layers), layers already held included',
      registers,
    });
    this.pullDuration = new Histogram({
      name: 'berth_image_pull_duration_seconds',
      help: 'Successful image pulls, from the first registry request to the image being recorded',
      buckets: PULL_BUCKETS,
      registers,
    });
    this.pullFailures = new Counter({
      name: 'berth_image_pull_failures_total',
      help: 'Failed image pulls by the kind of error',
      labelNames: ['reason'],
      registers,
    });
    this.repairs = new Counter({
      name: 'berth_recovery_repairs_total',
      help: 'What start-up recovery repaired, by kind (e.g. pod_rolled_back, container_exited_while_down)',
      labelNames: ['kind'],
      registers,
    });
    this.recoverySeconds = new Gauge({
      name: 'berth_recovery_duration_seconds',
      help: 'How long the last start-up recovery took',
      registers,
    });
    new Gauge({
      name: 'berth_pods',
      help: 'Pod sandboxes by state',
      labelNames: ['state'],
      registers,
      collect() {
        setCounts(this, SANDBOX_STATES, state.sandboxes());
      },
    });
    new Gauge({
      name: 'berth_containers',
      help: 'Containers by state',
      labelNames: ['state'],
      registers,
      collect() {
        setCounts(this, CONTAINER_STATES, state.containers());
      },
    });
    new Gauge({
      name: 'berth_monitors_running',
      help: 'Containers whose monitor (conmon) process is alive',
      registers,
      async collect() {
        const pids = state.containers().map((c) => c.monitorPid);
        const alive = await Promise.all(pids.map((pid) => isRunning(pid)));
        this.set(alive.filter(Boolean).length);
      },
    });
  }

  readonly rpcDone = ({ service, method, code, seconds }: RpcDone): void => {
    this.rpcDuration.observe({ service, method, code }, seconds);
    this.rpcTotal.inc({ service, method, code });
  };

  readonly stepDone = ({ operation, step, seconds }: StepOutcome): void => {
    this.stepDuration.observe({ operation, step }, seconds);
  };

  readonly cniPluginDone = ({ plugin, command, seconds }: PluginDone): void => {
    this.cniDuration.observe({ plugin, command }, seconds);
  };

  readonly pullDone = (done: PullDone): void => {
    if (done.ok) {
      this.pullBytes.inc(done.bytes);
      this.pullDuration.observe(done.seconds);
    } else {
      this.pullFailures.inc({ reason: reasonOf(done.error) });
    }
  };

  /**
   * From start-up recovery's report: every list in it counts as a kind of repair, the containers'
   * own report (nested under `containers`) prefixed `container_`, the rest `pod_`.
   */
  recovered(report: object, seconds: number): void {
    for (const [kind, count] of repairCounts(report, 'pod')) this.repairs.inc({ kind }, count);
    this.recoverySeconds.set(seconds);
  }

  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** Every known state, present or not, so that a state emptying shows as 0 rather than vanishing. */
function setCounts(
  gauge: Gauge<'state'>,
  known: readonly string[],
  records: ReadonlyArray<{ state: string }>,
): void {
  const counts = new Map(known.map((s) => [s, 0]));
  for (const { state } of records) counts.set(state, (counts.get(state) ?? 0) + 1);
  for (const [state, count] of counts) gauge.set({ state }, count);
}

export function repairCounts(report: object, prefix: string): Array<[string, number]> {
  const counts: Array<[string, number]> = [];
  for (const [key, value] of Object.entries(report)) {
    if (Array.isArray(value)) counts.push([`${prefix}_${snakeCase(key)}`, value.length]);
    else if (key === 'containers' && typeof value === 'object' && value !== null) {
      counts.push(...repairCounts(value, 'container'));
    }
  }
  return counts;
}

/** The error's class (RegistryError, ImageFormatError, AbortError, ...): few values, as a label must have. */
function reasonOf(error: unknown): string {
  return error instanceof Error ? error.name : 'unknown';
}

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
