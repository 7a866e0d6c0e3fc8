/**
 * The Stream* rpcs of KEP-5825 (StreamContainers, StreamPodSandboxes, StreamImages and the stats
 * ones): the answer of the matching List rpc, one item per message. A List answer is one message,
 * and kubelet receives at most 16 MiB in one: a node with ten thousand or so containers could not
 * be listed at all. One item per message keeps every message as small as its item, and it is also
 * what the KEP specifies: a repeated field holding one item is, on the wire, the very bytes of the
 * single `item` field of the KEP's own messages, so a kubelet built with either form reads it.
 *
 * The list is taken whole first, as the List rpc takes it: a pod created or removed while the
 * stream is read is in it or not, and nothing is sent twice. An empty list is a stream with no
 * message, ended with OK.
 */
import type { StreamHandler, UnaryHandler } from './handler.js';

/**
 * A Stream* handler from the List handler `list` whose answer's items `items` picks, each sent in a
 * message of its own made by `message`.
 */
export function itemByItem<Req, Res, Item, Message>(
  list: UnaryHandler<Req, Res>,
  items: (answer: Res) => readonly Item[],
  message: (item: Item) => Message,
): StreamHandler<Req, Message> {
  return async function* (request, context) {
    for (const item of items(await list(request, context))) {
      // A client gone needs no more; the edge stops reading at once too, this only stops early.
      if (context.signal.aborted) return;
      yield message(item);
    }
  };
}
