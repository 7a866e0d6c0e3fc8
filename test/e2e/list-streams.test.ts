/**
 * The Stream* rpcs of KEP-5825 against a real berthd with real pods and containers (busybox from a
 * docker-registry on 127.0.0.1): each answers what its List rpc answers, one item per message,
 * with the same filters; an empty answer is a stream of no message; a client that goes away
 * mid-stream costs berthd nothing. The client decodes the stream with the proto, as kubelet's
 * would. Needs root.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { useDaemon } from '../harness/daemon.js';
import { useBusyboxImage } from '../harness/images.js';
import { containerConfig, runPod, startContainer, waitContainerState } from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 300_000;

type Message = Record<string, unknown[]>;

/** The one item each message of a Stream* answer holds, in order. */
function itemsOf(messages: Message[], field: string): unknown[] {
  return messages.map((message, i) => {
    const items = message[field];
    assert.ok(Array.isArray(items), `message ${i} has no ${field}: ${JSON.stringify(message)}`);
    assert.equal(items.length, 1, `message ${i} holds ${items.length} items, not one`);
    return items[0];
  });
}

const idOf = (item: unknown): string => {
  const record = item as { id?: string; attributes?: { id?: string }; pod_sandbox_id?: string };
  return record.id ?? record.attributes?.id ?? record.pod_sandbox_id ?? '';
};

describe('Stream* list rpcs', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const imageRef = useBusyboxImage('berth/list-streams');
  let pods: { a: string; b: string };
  let containers: { running: string; exited: string };

  const daemon = useDaemon({}, async (d) => {
    await d.cri.callImage('PullImage', { image: { image: imageRef() } });
    const a = await runPod(d.cri, d.pod('stream-a', { labels: { app: 'a', group: 'streams' } }));
    const b = await runPod(d.cri, d.pod('stream-b', { labels: { app: 'b', group: 'streams' } }));
    const running = await startContainer(
      d.cri,
      a,
      containerConfig('sleeper', imageRef(), { labels: { role: 'sleeper' } }),
    );
    const exited = await startContainer(
      d.cri,
      b,
      containerConfig('quitter', imageRef(), { command: ['/bin/true'], labels: { role: 'quitter' } }),
    );
    await waitContainerState(d.cri, exited, 'CONTAINER_EXITED');
    pods = { a: a.id, b: b.id };
    containers = { running, exited };
  });

  test('StreamPodSandboxes and StreamContainers answer what the List rpcs answer, with their filters', async () => {
    const { cri } = daemon();
    const cases: { list: string; listField: string; stream: string; field: string; filters: object[] }[] = [
      {
        list: 'ListPodSandbox',
        listField: 'items',
        stream: 'StreamPodSandboxes',
        field: 'pod_sandboxes',
        filters: [
          {},
          { filter: { id: pods.a } },
          { filter: { label_selector: { app: 'b' } } },
          { filter: { state: { state: 'SANDBOX_READY' }, label_selector: { group: 'streams' } } },
        ],
      },
      {
        list: 'ListContainers',
        listField: 'containers',
        stream: 'StreamContainers',
        field: 'containers',
        filters: [
          {},
          { filter: { id: containers.running } },
          { filter: { pod_sandbox_id: pods.b } },
          { filter: { state: { state: 'CONTAINER_EXITED' } } },
          { filter: { label_selector: { role: 'sleeper' } } },
        ],
      },
    ];
    for (const c of cases) {
      for (const filter of c.filters) {
        const listed = (await cri.call<Message>(c.list, filter))[c.listField] ?? [];
        const streamed = itemsOf(await cri.stream<Message>(c.stream, filter), c.field);
        assert.ok(listed.length > 0, `${c.list} ${JSON.stringify(filter)} lists something`);
        assert.deepEqual(streamed, listed, `${c.stream} ${JSON.stringify(filter)}`);
      }
    }
  });

  test('StreamImages answers what ListImages answers', async () => {
    const { cri } = daemon();
    for (const filter of [{}, { filter: { image: { image: imageRef() } } }]) {
      const listed = (await cri.callImage<Message>('ListImages', filter)).images ?? [];
      const streamed = itemsOf(
        await cri.stream<Message>('StreamImages', filter, { service: 'image' }),
        'images',
      );
      assert.equal(listed.length, 1);
      assert.deepEqual(streamed, listed);
    }
  });

  test('the stats and metrics streams hold the items of their List rpcs, filtered alike', async () => {
    const { cri } = daemon();
    // Figures move between two calls: the items are compared by whose they are.
    const cases = [
      {
        list: 'ListContainerStats',
        listField: 'stats',
        stream: 'StreamContainerStats',
        field: 'container_stats',
      },
      {
        list: 'ListPodSandboxStats',
        listField: 'stats',
        stream: 'StreamPodSandboxStats',
        field: 'pod_sandbox_stats',
      },
      {
        list: 'ListPodSandboxMetrics',
        listField: 'pod_metrics',
        stream: 'StreamPodSandboxMetrics',
        field: 'pod_sandbox_metrics',
      },
    ];
    for (const c of cases) {
      const listed = ((await cri.call<Message>(c.list, {}))[c.listField] ?? []).map(idOf).sort();
      const streamed = itemsOf(await cri.stream<Message>(c.stream, {}), c.field)
        .map(idOf)
        .sort();
      assert.ok(listed.length > 0, `${c.list} lists something`);
      assert.deepEqual(streamed, listed, c.stream);
    }
    const one = itemsOf(
      await cri.stream<Message>('StreamContainerStats', { filter: { id: containers.running } }),
      'container_stats',
    );
    assert.deepEqual(one.map(idOf), [containers.running]);
    const pod = itemsOf(
      await cri.stream<Message>('StreamPodSandboxStats', { filter: { label_selector: { app: 'a' } } }),
      'pod_sandbox_stats',
    );
    assert.deepEqual(pod.map(idOf), [pods.a]);
  });

  test('an empty answer is a stream of no message, ended with OK', async () => {
    const { cri } = daemon();
    const nothing = { filter: { label_selector: { app: 'none' } } };
    assert.deepEqual(await cri.stream('StreamPodSandboxes', nothing), []);
    assert.deepEqual(await cri.stream('StreamContainers', nothing), []);
    assert.deepEqual(await cri.stream('StreamContainerStats', nothing), []);
    assert.deepEqual(await cri.stream('StreamPodSandboxStats', nothing), []);
    assert.deepEqual(
      await cri.stream('StreamImages', { filter: { image: { image: 'not/there:1' } } }, { service: 'image' }),
      [],
    );
  });

  test('streams of many items, and clients that give up on them, leave berthd serving', async () => {
    const { cri } = daemon();
    // Each message is one item however many there are, and a deadline that cuts streams off
    // mid-way (some end before it, some not) is the client's business only.
    const rounds = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) =>
        cri.stream('StreamContainers', {}, i % 2 === 0 ? { deadlineMs: 1 } : {}),
      ),
    );
    for (const [i, round] of rounds.entries()) {
      if (i % 2 === 1)
        assert.equal(
          round.status,
          'fulfilled',
          `stream ${i}: ${String(round.status === 'rejected' && round.reason)}`,
        );
    }
    const listed = (await cri.call<Message>('ListContainers', {})).containers ?? [];
    assert.equal(listed.length, 2);
  });
});
