/**
 * Every rpc of the two CRI services and what serves it, typed by the interfaces generated from
 * proto/: an rpc missing here, misspelled, or given a handler of another request type does not
 * compile. Every one is served; an rpc a later proto adds would start as `edge.unimplemented()`.
 */
import type { ContainerCheckpoint } from '../checkpoint/service.js';
import type { BerthConfig } from '../config/types.js';
import type { ContainerService } from '../container/service.js';
import type { HostFeatures } from '../host/features.js';
import type { ImageService } from '../image/service.js';
import type { NodeState } from '../node/state.js';
import type { PodStatsService } from '../podstats/service.js';
import type { SandboxService } from '../sandbox/service.js';
import { checkpointHandlers } from './checkpoint.js';
import { containerHandlers } from './container.js';
import { eventHandlers, type PodEventHub } from './events.js';
import type { ImageServiceHandlers } from './generated/runtime/v1/ImageService.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { RpcEdge } from './handler.js';
import { imageHandlers } from './image.js';
import { itemByItem } from './item-stream.js';
import { runtimeHandlers } from './runtime.js';
import { sandboxHandlers } from './sandbox.js';
import { sandboxResourcesHandlers } from './sandbox-resources.js';
import { podStatsHandlers } from './stats.js';
import { streamingHandlers, type StreamUrls } from './streaming.js';

export interface CriDomains {
  node: NodeState;
  sandboxes: SandboxService;
  images: ImageService;
  containers: ContainerService;
  checkpoints: ContainerCheckpoint;
  events: PodEventHub;
  podStats: PodStatsService;
  streams: StreamUrls;
  /** What the host can do, shown by verbose Status. */
  host: HostFeatures;
}

export function runtimeService(
  config: BerthConfig,
  domains: CriDomains,
  edge: RpcEdge,
): RuntimeServiceHandlers {
  const runtime = runtimeHandlers(config, domains.node, domains.host);
  const sandbox = sandboxHandlers(domains.sandboxes, domains.containers);
  const sandboxResources = sandboxResourcesHandlers(domains.sandboxes);
  const container = containerHandlers(domains.containers);
  const checkpoint = checkpointHandlers(domains.checkpoints);
  const events = eventHandlers(domains.events);
  const podStats = podStatsHandlers(domains.podStats);
  const streaming = streamingHandlers(domains.containers, domains.sandboxes, domains.streams);
  return {
    Version: edge.unary(runtime.Version),
    Status: edge.unary(runtime.Status),
    RuntimeConfig: edge.unary(runtime.RuntimeConfig),
    UpdateRuntimeConfig: edge.unary(runtime.UpdateRuntimeConfig),

    RunPodSandbox: edge.unary(sandbox.RunPodSandbox),
    StopPodSandbox: edge.unary(sandbox.StopPodSandbox),
    RemovePodSandbox: edge.unary(sandbox.RemovePodSandbox),
    PodSandboxStatus: edge.unary(sandbox.PodSandboxStatus),
    ListPodSandbox: edge.unary(sandbox.ListPodSandbox),
    StreamPodSandboxes: edge.serverStream(
      itemByItem(
        sandbox.ListPodSandbox,
        (a) => a.items,
        (item) => ({ pod_sandboxes: [item] }),
      ),
    ),
    UpdatePodSandboxResources: edge.unary(sandboxResources.UpdatePodSandboxResources),

    CreateContainer: edge.unary(container.CreateContainer),
    StartContainer: edge.unary(container.StartContainer),
    StopContainer: edge.unary(container.StopContainer),
    RemoveContainer: edge.unary(container.RemoveContainer),
    ListContainers: edge.unary(container.ListContainers),
    StreamContainers: edge.serverStream(
      itemByItem(
        container.ListContainers,
        (a) => a.containers,
        (item) => ({ containers: [item] }),
      ),
    ),
    ContainerStatus: edge.unary(container.ContainerStatus),
    UpdateContainerResources: edge.unary(container.UpdateContainerResources),
    ReopenContainerLog: edge.unary(container.ReopenContainerLog),
    CheckpointContainer: edge.unary(checkpoint.CheckpointContainer),
    GetContainerEvents: edge.serverStream(events.GetContainerEvents),

    ExecSync: edge.unary(container.ExecSync),
    Exec: edge.unary(streaming.Exec),
    Attach: edge.unary(streaming.Attach),
    PortForward: edge.unary(streaming.PortForward),

    ContainerStats: edge.unary(container.ContainerStats),
    ListContainerStats: edge.unary(container.ListContainerStats),
    StreamContainerStats: edge.serverStream(
      itemByItem(
        container.ListContainerStats,
        (a) => a.stats,
        (item) => ({ container_stats: [item] }),
      ),
    ),
    PodSandboxStats: edge.unary(podStats.PodSandboxStats),
    ListPodSandboxStats: edge.unary(podStats.ListPodSandboxStats),
    StreamPodSandboxStats: edge.serverStream(
      itemByItem(
        podStats.ListPodSandboxStats,
        (a) => a.stats,
        (item) => ({ pod_sandbox_stats: [item] }),
      ),
    ),
    ListMetricDescriptors: edge.unary(podStats.ListMetricDescriptors),
    ListPodSandboxMetrics: edge.unary(podStats.ListPodSandboxMetrics),
    StreamPodSandboxMetrics: edge.serverStream(
      itemByItem(
        podStats.ListPodSandboxMetrics,
        (a) => a.pod_metrics,
        (item) => ({ pod_sandbox_metrics: [item] }),
      ),
    ),
  };
}

export function imageService(
  { images, containers }: Pick<CriDomains, 'images' | 'containers'>,
  edge: RpcEdge,
): ImageServiceHandlers {
  const image = imageHandlers(images, () => containers.stats.writableLayers());
  return {
    ListImages: edge.unary(image.ListImages),
    StreamImages: edge.serverStream(
      itemByItem(
        image.ListImages,
        (a) => a.images,
        (item) => ({ images: [item] }),
      ),
    ),
    ImageStatus: edge.unary(image.ImageStatus),
    PullImage: edge.unary(image.PullImage),
    RemoveImage: edge.unary(image.RemoveImage),
    ImageFsInfo: edge.unary(image.ImageFsInfo),
  };
}
