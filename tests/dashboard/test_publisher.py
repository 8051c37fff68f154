"""The publisher (dashboard/stream/): committed events are rendered off the committing thread, in
batches (one stream read and one summary read per batch), and leave in id order with the previous
ids of each event (the largest stored ids below it, overall and in its item), each id once whether
the commit's hook or the event pump hands it over."""
from __future__ import annotations

import json

import asyncio
import logging
import multiprocessing
import os
import threading
import time

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.stream import batcher as batching
from dashboard.stream.consumers import WorkItemStreamConsumer
from dashboard.stream.messages import ITEMS_GROUP, item_group
from dashboard.stream.probe import RedisGroupProbe
from dashboard.stream.publisher import publisher
from workcenter import events, selectors, services
from workcenter.models import Event
from workcenter.redis_layer import redis_layer_config

from .conftest import TIMEOUT, open_stream, receive_all, run
from tests.live import redis_db_url

pytestmark = pytest.mark.django_db(transaction=True)

db_call = database_sync_to_async
REDIS_URL = os.environ.get("WORKCENTER_TEST_PUBLISHER_REDIS_URL", redis_db_url(14))


def bearer(token: str):
    return [(b"authorization", f"Bearer {token}".encode())]


@pytest.fixture
def group_messages(monkeypatch):
    """Every group message a consumer is handed (before its duplicate check)."""
    seen: list[dict] = []
    real = WorkItemStreamConsumer.stream_event

    async def stream_event(self, message):
        seen.append(message)
        await real(self, message)

    monkeypatch.setattr(WorkItemStreamConsumer, "stream_event", stream_event)
    return seen


@pytest.fixture
def stream_reads(monkeypatch):
    """The batches `selectors.events_previous_ids` answered (the real function runs; a try that
    found the stream key busy, on PostgreSQL, answers None and is tried again: not counted)."""
    calls: list[list[int]] = []
    real = selectors.events_previous_ids

    def spy(events_, **kwargs):
        out = real(events_, **kwargs)
        if out is not None:
            calls.append(sorted(e.id for e in events_))
        return out

    monkeypatch.setattr(selectors, "events_previous_ids", spy)
    return calls


def expected_previous(ids: list[int]) -> dict[int, tuple[int, int]]:
    """The previous ids worked out with the ORM, independently of the selectors under test."""
    from django.db.models import Max

    out = {}
    for i in ids:
        item_id = Event.objects.get(pk=i).work_item_id
        overall = Event.objects.filter(id__lt=i).aggregate(m=Max("id"))["m"] or 0
        in_item = Event.objects.filter(id__lt=i, work_item_id=item_id).aggregate(m=Max("id"))["m"] or 0
        out[i] = (overall, in_item)
    return out


def orm_summary(item_id: str) -> tuple:
    """What WorkItemSummary shows beyond the row, worked out with the ORM."""
    from collections import Counter

    from workcenter.models import COUNTER_FIELDS, Action, Run, WorkItem

    item = WorkItem.objects.get(pk=item_id)
    counts = dict(Counter(Action.objects.filter(work_item_id=item_id).values_list("status", flat=True)))
    runs = list(Run.objects.filter(work_item_id=item_id))
    stats = {f: sum(getattr(r, f) or 0 for r in runs) for f in COUNTER_FIELDS}
    current = Action.objects.filter(pk=item.current_action_id).first()
    return (item.status, item.revision, counts, stats,
            current and {"id": current.pk, "type": current.type, "stage_id": current.stage_id or current.type,
                         "status": current.status})


def test_burst_is_rendered_in_batches_and_leaves_in_id_order(store, viewer_token, group_messages, stream_reads,
                                                               monkeypatch):
    # given: a slow batch rhythm, so that the burst below waits while the first batch is rendered
    monkeypatch.setattr(batching, "RENDER_INTERVAL", 0.4)
    items = [store.linear(title=f"burst {i}") for i in range(3)]

    def burst():
        for item in items:
            services.work_item_cancel(item_id=item.pk, now=store.now())
        for i in range(3):
            store.linear(title=f"more {i}")

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        # when: many commits in a row
        await db_call(burst)()
        want = [e.id for e in await db_call(lambda: list(Event.objects.filter(id__gt=hello["last_event_id"])
                                                              .order_by("id")))()]
        got = await receive_all(comm, len(want))
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()
        return want, got

    want, got = run(scenario)
    # then: every event once, in id order, with their true previous ids
    assert len(want) >= 6
    assert [m["event"]["id"] for m in got] == want
    assert [m["id"] for m in group_messages] == want  # no message was overtaken or read back
    previous = expected_previous(want)
    assert [(m["prev_id"], m["item_prev_id"]) for m in group_messages] == [previous[i] for i in want]
    # ... from fewer stream reads than events: the burst was rendered together
    assert sorted(i for batch in stream_reads for i in batch) == want
    assert len(stream_reads) < len(want) and max(len(b) for b in stream_reads) >= 3
    # each message carries its item's summary as the REST list shows it now
    assert {m["work_item"]["status"] for m in got if m["event"]["type"] == "work_item.cancelled"} == {"cancelled"}


def test_an_event_the_pump_reads_before_its_hook_runs_leaves_once_in_id_order(store, viewer_token, group_messages,
                                                                            monkeypatch):
    """A loaded machine deschedules a committing thread between its commit and its after-commit
    hook; the event pump (polling the table meanwhile) reads that commit first. Whichever hands
    an id over first, it leaves once, in id order with the events before it."""
    monkeypatch.setattr(batching, "RENDER_INTERVAL", 0.4)  # the earlier events wait for their batch
    items = [store.linear(title=f"late hook {i}") for i in range(3)]

    def late_hook(event):
        time.sleep(0.12)  # more than two of the pump's polls
        publisher.publish(event)

    def burst():
        for item in items:
            services.work_item_cancel(item_id=item.pk, now=store.now())

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        events.set_publisher(late_hook)  # (the publisher is registered again after the test)
        await db_call(burst)()
        want = await db_call(lambda: list(Event.objects.filter(id__gt=hello["last_event_id"])
                                          .order_by("id").values_list("id", flat=True)))()
        got = await receive_all(comm, len(want))
        assert await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()
        return want, got

    want, got = run(scenario)
    assert len(want) == 3
    assert [m["event"]["id"] for m in got] == want
    assert [m["id"] for m in group_messages] == want  # one copy each, none overtaken or read back


def test_batch_reads_give_each_event_its_previous_ids_and_each_item_its_summary(store):
    a = store.linear(title="A")
    b = store.linear(title="B")
    services.work_item_cancel(item_id=a.pk, now=store.now())
    store.linear(title="C")
    services.work_item_cancel(item_id=b.pk, now=store.now())
    stored = list(Event.objects.order_by("id"))
    assert len(stored) >= 5
    expected = expected_previous([e.id for e in stored])
    assert selectors.events_previous_ids(stored) == expected
    assert {e.id: selectors.events_previous_ids([e])[e.id] for e in stored} == expected
    assert selectors.events_previous_ids(stored, wait=False) in (None, expected)
    summaries = selectors.work_item_summaries([a.pk, b.pk, "no-such-item"])
    assert set(summaries) == {a.pk, b.pk}
    for pk in (a.pk, b.pk):
        for got in (summaries[pk], selectors.work_item_summary(pk)):
            assert (got.status, got.revision, got.action_counts, got.execution_stats, got.current_action) == \
                orm_summary(pk)
    assert any(orm_summary(pk)[2] for pk in (a.pk, b.pk))  # the items have actions to count


def _is_stream_or_summary_read(sql: str) -> bool:
    s = sql.lower()
    return "max(" in s or "pg_advisory_xact_lock(" in s or "pg_try_advisory_xact_lock(" in s or "group by" in s


def test_committing_thread_does_not_render(store, viewer_token, group_messages):
    item = store.linear()

    def cancel_and_capture():
        with CaptureQueriesContext(connection) as queries:
            services.work_item_cancel(item_id=item.pk, now=store.now())  # commits inside the context
        return [q["sql"] for q in queries.captured_queries]

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        sql = await db_call(cancel_and_capture)()
        message = await comm.receive_json_from(timeout=TIMEOUT)
        await comm.disconnect()
        return hello, sql, message

    hello, sql, message = run(scenario)
    assert message["event"]["type"] == "work_item.cancelled" and message["work_item"]["status"] == "cancelled"
    assert sql, "the service's own statements were captured"
    assert not [s for s in sql if _is_stream_or_summary_read(s)], sql
    event = Event.objects.get(pk=message["event"]["id"])
    assert (group_messages[0]["prev_id"], group_messages[0]["item_prev_id"]) == expected_previous([event.id])[event.id]


def test_publisher_failure_never_reaches_the_caller_and_the_stream_heals(store, viewer_token, monkeypatch):
    item = store.linear()
    other = store.linear(title="other")
    real = selectors.work_item_summaries
    failing = [True]

    def summaries(ids):
        if failing[0]:
            raise RuntimeError("summary read failed")
        return real(ids)

    monkeypatch.setattr(selectors, "work_item_summaries", summaries)

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        # the caller returns normally although rendering its event fails
        cancelled = await db_call(services.work_item_cancel)(item_id=item.pk, now=store.now())
        assert cancelled.status == "cancelled"
        assert await comm.receive_nothing(timeout=0.3)
        # the thread lives on: the next event arrives and names the lost one, which is read back
        failing[0] = False
        await db_call(services.work_item_cancel)(item_id=other.pk, now=store.now())
        want = await db_call(lambda: list(Event.objects.filter(id__gt=hello["last_event_id"])
                                          .order_by("id").values_list("id", flat=True)))()
        got = await receive_all(comm, len(want))
        assert [m["event"]["id"] for m in got] == want and len(want) == 2
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()

    run(scenario)


def test_send_failure_never_reaches_the_caller(store, viewer_token, monkeypatch):
    item = store.linear()
    sent = []

    def broken_send(layer, groups, message):
        sent.append(message["id"])
        raise ConnectionError("channel layer down")

    async def scenario():
        comm, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        monkeypatch.setattr(publisher, "send", broken_send)
        cancelled = await db_call(services.work_item_cancel)(item_id=item.pk, now=store.now())
        assert cancelled.status == "cancelled"
        await asyncio.to_thread(publisher.drain, 5)
        assert sent and publisher.published_here(sent[0])
        await comm.disconnect()

    run(scenario)


def test_drain_waits_for_the_queued_events(store, viewer_token, monkeypatch, group_messages):
    monkeypatch.setattr(batching, "RENDER_INTERVAL", 0.3)
    items = [store.linear(title=f"drain {i}") for i in range(3)]

    async def scenario():
        comm, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        for item in items:
            await db_call(services.work_item_cancel)(item_id=item.pk, now=store.now())
        # the committing calls returned before their messages were rendered; drain waits for them
        await asyncio.to_thread(publisher.drain, 5)
        assert publisher.batcher().idle()
        await asyncio.sleep(0.05)  # the in-memory layer hands them to the consumer on this loop
        got = await receive_all(comm, 3)
        assert [m["event"]["type"] for m in got] == ["work_item.cancelled"] * 3
        await comm.disconnect()

    run(scenario)


def _child_batcher(parent_pid: int, parent_native_id: int, out) -> None:
    r = publisher.batcher()  # the parent held the publisher's and the queue's locks when it forked
    out.put((parent_pid != os.getpid(), r.pid == os.getpid(), r.thread.native_id != parent_native_id,
             r.thread.is_alive()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_starts_its_own_batching_thread():
    parent = publisher.batcher()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    with publisher.lock, publisher.queue.cond:  # held at fork time: the child must not inherit them held
        child = ctx.Process(target=_child_batcher, args=(os.getpid(), parent.thread.native_id, out))
        child.start()
    try:
        assert out.get(timeout=10) == (True, True, True, True)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert publisher.batcher() is parent


# --- Redis ----------------------------------------------------------------------------------------

@pytest.fixture
def redis_layer(monkeypatch):
    import redis
    from channels_redis.core import RedisChannelLayer

    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError:
        pytest.skip(f"no Redis at {REDIS_URL}")
    layer = RedisChannelLayer(**redis_layer_config(REDIS_URL))
    monkeypatch.setattr(publisher, "layer", lambda: layer)
    # and for the event pump: one still polling in this process (a consumer or a long-poll claim
    # of an earlier test on a loop that lives on) offers the test's events with the settings'
    # in-memory layer, where nobody listens, before their commit hook does; each id is offered
    # once, so the hook's offer to this layer was dropped and the listener waited in vain
    monkeypatch.setattr("dashboard.stream.pump.get_channel_layer", lambda: layer)
    asyncio.run_coroutine_threadsafe(layer.flush(), publisher.own_loop()).result(10)
    yield layer
    asyncio.run_coroutine_threadsafe(layer.flush(), publisher.own_loop()).result(10)


def _on_send_loop(coro):
    return asyncio.run_coroutine_threadsafe(coro, publisher.own_loop()).result(30)


def test_redis_groups_nobody_is_in_are_not_rendered(store, redis_layer, stream_reads):
    item = store.linear()
    other = store.linear(title="other")
    group = item_group(item.pk)
    assert publisher.members(redis_layer, [ITEMS_GROUP, group]) == set()
    # nobody listens: the events are neither rendered nor sent
    services.work_item_cancel(item_id=other.pk, now=store.now())
    publisher.drain(5)
    assert stream_reads == []
    # a member of one item's group: only that item's events are rendered, sent to that group only
    channel = _on_send_loop(redis_layer.new_channel())
    _on_send_loop(redis_layer.group_add(group, channel))
    assert publisher.members(redis_layer, [ITEMS_GROUP, group]) == {group}
    other2 = store.linear(title="other 2")
    services.work_item_cancel(item_id=item.pk, now=store.now())
    services.work_item_cancel(item_id=other2.pk, now=store.now())
    publisher.drain(5)
    message = _on_send_loop(asyncio.wait_for(redis_layer.receive(channel), 20))
    cancel = Event.objects.filter(work_item_id=item.pk).latest("id")
    assert (message["type"], message["id"]) == ("stream.event", cancel.id)
    assert (message["prev_id"], message["item_prev_id"]) == expected_previous([cancel.id])[cancel.id]
    assert json.loads(message["text"])["work_item"]["status"] == "cancelled"  # encoded once, by the publisher
    assert [i for batch in stream_reads for i in batch] == [cancel.id]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.name} {record.levelname} {record.getMessage()} {record.exc_text or ''}"[:600])


@pytest.fixture
def publisher_log():
    """What the publisher logged during the test, whatever an earlier test did to logging."""
    handler = _Records()
    logger = logging.getLogger("workcenter.events")
    was = logger.disabled
    logger.disabled = False
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.disabled = was


def _publisher_facts(want, got, batches_before, log, repeats_before=0, sent_before=0, unheard_before=0) -> str:
    """What the publisher of this process was doing when a listener waited in vain."""
    from workcenter.send_loop import send_loop

    from dashboard.stream.pump import pump

    queue = publisher.queue
    locks = {id(loop): lock.locked() for loop, lock in publisher._send_locks.items()}
    return (f"no message for 20 s: want {want}, got {sorted(m['id'] for m in got)}; batches rendered "
            f"{queue.batches - batches_before} since, waiting {len(queue.waiting)}, busy {queue.busy}, "
            f"thread alive {queue.thread is not None and queue.thread.is_alive()}, known {[i for i in want if i in queue]}, "
            f"offered again since the test began {queue.repeats - repeats_before}, unheard since the test began {queue.unheard - unheard_before}, group sends done since the test began {publisher.sent - sent_before}, "
            f"sends in flight {len(send_loop.pending)}, send locks held {locks}; event pump running {pump.running} "
            f"for {len(pump.consumers)} consumers, {pump.published} offered; the probe finds now "
            f"{publisher.members(publisher.layer(), [ITEMS_GROUP])}; logged: {log.lines}")


def test_redis_burst_reaches_a_listener_in_id_order(store, redis_layer, monkeypatch, publisher_log):
    monkeypatch.setattr(batching, "RENDER_INTERVAL", 0.2)
    channel = _on_send_loop(redis_layer.new_channel())
    _on_send_loop(redis_layer.group_add(ITEMS_GROUP, channel))
    before = selectors.event_last_id()
    repeats, sent, unheard = publisher.queue.repeats, publisher.sent, publisher.queue.unheard
    errors = []

    def commit(n):
        try:
            for i in range(n):
                item = store.linear(title=f"t{threading.get_ident()} {i}")
                services.work_item_cancel(item_id=item.pk, now=store.now())
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=commit, args=(4,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    publisher.drain(5)
    want = list(Event.objects.filter(id__gt=before).order_by("id").values_list("id", flat=True))
    got, messages = [], 0  # a batch of several events arrives as one `stream.events` message
    batches = publisher.queue.batches
    while len(got) < len(want):
        try:
            message = _on_send_loop(asyncio.wait_for(redis_layer.receive(channel), 20))
        except TimeoutError:
            raise AssertionError(_publisher_facts(want, got, batches, publisher_log, repeats, sent, unheard)) from None
        mine = [m for m in (message["events"] if message["type"] == "stream.events" else [message])
                if m["id"] > before]  # an earlier test's batch may still reach the group
        got.extend(mine)
        messages += 1 if mine else 0
    assert messages < len(want)  # some events travelled together: one send for a batch
    previous = expected_previous(want)
    # two committing threads: every event once; each message names its true previous ids, so a
    # consumer puts any two that crossed back in order
    assert sorted(m["id"] for m in got) == want
    assert all((m["prev_id"], m["item_prev_id"]) == previous[m["id"]] for m in got)


def test_the_group_probe_knows_the_installed_channels_redis():
    """The probe reads channels_redis internals: an upgrade out of its series turns it off, and
    this test says so (recheck `RedisGroupProbe` against the new version, then move SERIES)."""
    import importlib.metadata

    from channels_redis.core import RedisChannelLayer

    probe = RedisGroupProbe()
    assert probe.version == importlib.metadata.version("channels_redis")
    assert probe.pinned, (probe.version, probe.SERIES)
    assert probe.applies(RedisChannelLayer(**redis_layer_config(REDIS_URL)))
