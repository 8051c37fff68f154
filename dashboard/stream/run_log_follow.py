"""Following one run's log on an item's stream: the item page's panel asks for the log of the run
it shows and receives its chunks as they are stored (docs/live-stream.md).

Client to server, on the per-item stream only (anything else a client sends is ignored):

* `{"type": "log.follow", "run_id": str, "after_seq": int?}`: follow this run's log; one per
  socket, a new follow replaces the last;
* `{"type": "log.unfollow"}`.

Server to client: `{"type": "log", ...}`, the run's log page as `GET /runs/{id}/log` answers it
(run id, chunks, next_seq, what was dropped, `older`, `run_status`) plus `live`: first the last
`FIRST_PAGE` chunks (or, with `after_seq`, those after it), then each batch of chunks as it is
stored, while the run runs; the message with `live: false` is the last (the run has ended, its
worker sent its log before its outcome). A run that is not one of the item's answers
`{"type": "log", "run_id", "error": "not_found"}`.

How: the consumer joins the run's group (`messages.run_log_group`); a process that stores chunks
wakes the group after the commit (`publisher.publish_run_log`), and the follower reads what is
after its cursor (one indexed read, `run_logs.run_log_page`) and sends it, at most one read per
`MIN_READ_S`. On the in-memory layer an append in another process (a worker beside the database)
wakes nobody here, so the follower also reads every `POLL_MEMORY_S`; with Redis every
`POLL_REDIS_S` (a lost wake-up costs at most that). Only a followed, running run is read: a page
with no panel open costs nothing, whatever its workers print.
"""
from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer

from workcenter import run_logs
from workcenter.errors import NotFound
from workcenter.render import render
from workcenter.schemas_out import RunLogOut

from .messages import run_log_group

logger = logging.getLogger("workcenter.events")

FIRST_PAGE = 200  # chunks in the first message (older ones load on scroll-up, through the API)
READ_PAGE = 500  # chunks per later read
MIN_READ_S = 0.1
POLL_MEMORY_S = 0.2
POLL_REDIS_S = 2.0
MAX_RUN_ID = 200


def parse_follow(message) -> tuple[str, int | None] | None:
    """(run id, after_seq) of a `log.follow` message, or None when it is not a usable one."""
    run_id, after = message.get("run_id"), message.get("after_seq")
    if not isinstance(run_id, str) or not 0 < len(run_id) <= MAX_RUN_ID:
        return None
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**31):
        return None
    return run_id, after


def _page(run_id: str, after: int | None, limit: int) -> dict:
    return render(RunLogOut, run_logs.run_log_page(run_id, after=after, limit=limit))


class LogFollow:
    """The one run log a consumer follows (see the module doc)."""

    def __init__(self, consumer) -> None:
        self.consumer = consumer
        self.run_id: str | None = None
        self._group: str | None = None
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()

    async def follow(self, run_id: str, after: int | None) -> None:
        await self.stop()
        layer = self.consumer.channel_layer
        self.run_id, self._group = run_id, run_log_group(run_id)
        await layer.group_add(self._group, self.consumer.channel_name)  # join first, then read
        poll = POLL_MEMORY_S if isinstance(layer, InMemoryChannelLayer) else POLL_REDIS_S
        self._task = asyncio.get_running_loop().create_task(self._loop(run_id, after, poll),
                                                            name=f"workcenter-runlog-{self.consumer.channel_name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        group, self._group = self._group, None
        self.run_id = None
        if group is not None:
            await self.consumer.channel_layer.group_discard(group, self.consumer.channel_name)

    def woken(self, run_id: str) -> None:
        if run_id == self.run_id:
            self._wake.set()

    async def _loop(self, run_id: str, cursor: int | None, poll: float) -> None:
        first = True
        try:
            while True:
                self._wake.clear()
                page = await database_sync_to_async(_page)(run_id, cursor, FIRST_PAGE if first else READ_PAGE)
                if page["work_item_id"] != self.consumer.item_id:
                    raise NotFound(run_id)
                chunks = page["chunks"]
                live = page["run_status"] == "running"
                full = len(chunks) == (FIRST_PAGE if first else READ_PAGE)
                if cursor is None and not chunks:
                    cursor = page["next_seq"] - 1
                if chunks:
                    cursor = chunks[-1]["seq"]
                if chunks or first or not live:
                    await self.consumer.send_json({"type": "log", **page, "live": live or full})
                first = False
                if full:
                    continue
                if not live:
                    return  # the run has ended and its log is read: nothing more will come
                try:
                    await asyncio.wait_for(self._wake.wait(), poll)
                except asyncio.TimeoutError:
                    pass
                await asyncio.sleep(MIN_READ_S)  # wake-ups meanwhile join this read
        except NotFound:
            await self.consumer.send_json({"type": "log", "run_id": run_id, "error": "not_found"})
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("following the log of run %s failed", run_id)
