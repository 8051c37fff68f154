"""Who may listen to the stream's groups: nothing is rendered for a group nobody is in.

An in-memory layer knows its groups (`may_have_members`, from its own table, asked per event);
a channels_redis layer is asked once per batch which of its groups have live members
(`RedisGroupProbe`, one pipelined count per Redis host). A group found empty after the commit can
be skipped: a consumer joins its group before it reads its snapshot or backlog, so one that joins
later reads the event from the database.
"""
from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import time

from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer

logger = logging.getLogger("workcenter.events")


def may_have_members(layer, groups: list[str]) -> bool:
    """An in-memory layer knows its groups (`groups`, its public table): False when nobody in
    this process listens. Any other layer: True (asked per batch by `RedisGroupProbe`)."""
    if not isinstance(layer, InMemoryChannelLayer):  # first: the pub/sub layer's attributes need a running loop
        return True
    known = getattr(layer, "groups", None)
    return any(known.get(g) for g in groups) if isinstance(known, dict) else True


class RedisGroupProbe:
    """Which groups of a channels_redis layer have live members, read from the layer's own keys.

    The one place that relies on channels_redis internals (`_group_key`, `consistent_hash`,
    `connection`, `group_expiry`; a group is a sorted set of channels scored by join time, and
    `group_send` discards those scored at or below now - group_expiry). Checked against the
    channels_redis series below: with any other version the probe is off and every group counts
    as listened to (a render for nobody, never a lost message), and a warning says so once.
    tests/dashboard/test_publisher.py fails when the installed version leaves the series."""

    SERIES = "4.3"
    ATTRIBUTES = ("_group_key", "consistent_hash", "connection", "group_expiry")
    TIMEOUT = 2.0

    def __init__(self) -> None:
        try:
            self.version = importlib.metadata.version("channels_redis")
        except importlib.metadata.PackageNotFoundError:
            self.version = None
        self.pinned = self.version is not None and (self.version == self.SERIES
                                                    or self.version.startswith(self.SERIES + "."))
        self._warned = False

    def applies(self, layer) -> bool:
        if not isinstance(layer, RedisChannelLayer):
            return False
        if self.pinned and all(hasattr(layer, a) for a in self.ATTRIBUTES):
            return True
        if not self._warned:
            self._warned = True
            logger.warning("channels_redis %s is not the %s series the group probe knows: every group "
                           "counts as listened to", self.version, self.SERIES)
        return False

    async def listened(self, layer, groups: list[str]) -> set[str]:
        """The groups with a member that `group_send` would not discard as expired (one
        pipelined ZCOUNT per Redis host)."""
        by_host: dict[int, list[str]] = {}
        for g in groups:
            by_host.setdefault(layer.consistent_hash(g), []).append(g)
        floor = int(time.time()) - int(layer.group_expiry)
        out: set[str] = set()
        for index, names in by_host.items():
            pipe = layer.connection(index).pipeline(transaction=False)
            for g in names:
                pipe.zcount(layer._group_key(g), f"({floor}", "+inf")
            for g, n in zip(names, await pipe.execute()):
                if n:
                    out.add(g)
        return out

    def members(self, layer, groups: list[str], loop: asyncio.AbstractEventLoop) -> set[str] | None:
        """Which of `groups` have members, asked on `loop` (where the layer's connections live) from
        another thread; None when unknown (another layer, Redis not answering)."""
        if not groups or not self.applies(layer):
            return None
        future = asyncio.run_coroutine_threadsafe(self.listened(layer, groups), loop)
        try:
            return future.result(self.TIMEOUT)
        except Exception:
            future.cancel()
            logger.warning("counting the members of %s groups failed; sending to all", len(groups), exc_info=True)
            return None
