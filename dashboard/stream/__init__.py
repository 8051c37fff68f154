"""The live stream (API.md §4): committed events, progress and overviews, from the store's
after-commit hooks to the websocket clients.

The path of an event, module by module:

* `publisher.py` — the store's after-commit hooks, and the one send path: every event, whether
  this process committed it or the event pump read it, is offered once per id to
* `batcher.py` — the queue and the batching thread, which takes the events in batches and has
  them rendered by
* `batches.py` — one stream read and one summary read per batch, one group message per group,
  for the groups that
* `probe.py` — says may have members; the messages themselves are built by
* `messages.py` — the groups and every message shape the stream carries;
* `live_state.py` — what rides along: the items' states (diffs) and the list's overview;
* `pump.py` — on the embedded default (in-memory layer), other processes' commits read from the
  event table and handed to the same path;
* `consumers.py` — the websocket consumers: join, snapshot or replay, then live, each event once
  in id order.
"""
