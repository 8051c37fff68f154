"""The claim → submit hot path in fixed SQL: rows read as the ORM reads them, a bounded
number of statements, keyset walking past blocked candidates, and the fault hook of the claim."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import completed, make_graph
from workcenter import services
from workcenter.models import Action, Event, Run, WorkItem
from workcenter import db
from workcenter.db import guards, hot, rows
from workcenter.services import common, graph
from workcenter.services.hooks import inject_fault


def _started(fn):
    """`fn` on a thread of its own (its own database connection, closed when it returns)."""
    import threading

    from django.db import connections

    def run():
        try:
            fn()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _fields(obj):
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_lease_rows_read_what_the_orm_reads(store):
    # given a running graph action whose rows carry JSON, datetimes, booleans and nulls
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    c = store.claim()
    services.run_set_snapshots(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch,
                               snapshots={"role_snapshot": {"id": "r", "n": [1, 2]}}, now=store.now())
    # when the fused read loads run, action and item
    run, action, got_item = common.lease_rows(c.run.pk)
    # then every column equals the ORM's load
    assert _fields(run) == _fields(Run.objects.get(pk=c.run.pk))
    assert _fields(action) == _fields(Action.objects.get(pk=c.action.pk))
    assert _fields(got_item) == _fields(WorkItem.objects.get(pk=item.pk))
    assert run.role_snapshot == {"id": "r", "n": [1, 2]} and run.vp_snapshot is None
    assert action.depends_on_stage_ids == [] and action.claimable is False and got_item.execution_mode == "graph"
    assert run._state.adding is False and run._state.db == connection.alias


def test_lease_rows_of_a_missing_run_are_empty(store):
    assert common.lease_rows("no-such-run") == (None, None, None)


def test_partial_row_defers_the_other_columns(store):
    item = make_graph(store, [{"id": "a"}])
    with connection.cursor() as cur:
        (action,) = graph.graph_actions(cur, item.pk)
    assert action.get_deferred_fields() >= {"instruction", "context", "brief"}
    assert action.instruction == "do a"  # a deferred column loads on access, as with .only()


def test_claim_and_submit_use_a_bounded_number_of_statements(store):
    # given a graph item a -> b
    make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    # when a claim runs: candidate, then action update, item update, run insert, event insert, and
    # whether another action is claimable (on PostgreSQL the tail of the write statement)
    with CaptureQueriesContext(connection) as claim_q:
        c = store.claim()
    # and its submit: lease read, run and action updates with the actions read, then item, flag
    # update and event
    with CaptureQueriesContext(connection) as submit_q:
        store.submit(c, completed())
    # then (transaction control aside: BEGIN/COMMIT, or savepoints inside the test's transaction)
    # the statement counts stay fixed; PostgreSQL sends each batch of writes as one statement, the
    # event's webhook deliveries (the outbox) included; SQLite writes those after the event
    def statements(q):
        control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")
        return [x["sql"] for x in q.captured_queries if x["sql"].split()[0].upper() not in control]

    if connection.vendor == "postgresql":
        assert len(statements(claim_q)) == 2, statements(claim_q)
        assert len(statements(submit_q)) == 3, statements(submit_q)
    else:
        assert len(statements(claim_q)) == 7, statements(claim_q)
        assert len(statements(submit_q)) == 8, statements(submit_q)
    assert Action.objects.get(stage_id="b").claimable is True


def test_a_claim_says_whether_another_action_was_claimable_beside_it(store):
    # given a graph item with two ready branches and a dependant
    make_graph(store, [{"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a", "b"]}])
    # the first claim saw the other branch; the second saw nothing more (c waits for both)
    first, second = store.claim(), store.claim()
    assert (first.action.stage_id, first.more) == ("a", True)
    assert (second.action.stage_id, second.more) == ("b", False)
    assert store.claim() is None


def test_a_write_batch_that_misses_a_guard_writes_nothing(store):
    from django.db import transaction

    from workcenter.errors import FenceLost

    # given two ready actions
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    a, b = Action.objects.filter(work_item_id=item.pk).order_by("stage_id")
    before = list(Action.objects.order_by("pk").values_list("pk", "status", "attempt"))
    # when one batch updates the first (its guard holds) and the second with a guard that misses
    with pytest.raises(FenceLost, match="action_as_read"), transaction.atomic(), db.hot_cursor() as cur:
        w = db.Writes(cur)
        w.update(guards.ACTION_AS_READ.of(a), {"attempt": 7})
        w.update(guards.ACTION_AS_READ.row(b.pk, "running", None, b.lease_epoch), {"attempt": 7})
        w.flush()
    # then FenceLost rolled both back
    assert list(Action.objects.order_by("pk").values_list("pk", "status", "attempt")) == before
    # and a batch whose guards hold writes both and hands back a returned column
    got = {}
    with transaction.atomic(), db.hot_cursor() as cur:
        w = db.Writes(cur)
        table = Action._meta.db_table
        w.add(f'UPDATE "{table}" SET "attempt" = 3 WHERE "id" = %s', [a.pk], returning='"attempt"',
              on_result=lambda v: got.setdefault("a", v))
        w.add(f'UPDATE "{table}" SET "attempt" = 4 WHERE "work_item_id" = %s AND "id" <> %s', [item.pk, a.pk])
        w.flush()
    assert got == {"a": 3}
    assert dict(Action.objects.values_list("stage_id", "attempt")) == {"a": 3, "b": 4}


def test_a_guarded_update_binds_null_as_is_null_and_must_hit_every_row(store):
    from django.db import transaction

    from workcenter.errors import FenceLost

    # given two ready actions, held by no run
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    a, b = Action.objects.filter(work_item_id=item.pk).order_by("stage_id")
    # a bound None compares as IS NULL, as the ORM's filters do
    sql, _ = db.update_sql(connection, guards.ACTION_AS_READ.of(a), {"attempt": 1})
    assert '"current_run_id" IS NULL' in sql
    assert db.update_if(guards.ACTION_AS_READ.of(a), {"attempt": 1}) is True
    # a fence that misses answers False and writes nothing
    assert db.update_if(guards.ACTION_AS_READ.row(a.pk, "running", None, a.lease_epoch), {"attempt": 5}) is False
    # over several rows every one must be hit: one that left the guard rolls the transaction back
    with pytest.raises(FenceLost, match="action_open"), transaction.atomic():
        Action.objects.filter(pk=b.pk).update(status="failed")
        db.update(guards.ACTION_OPEN.rows([a.pk, b.pk]), {"attempt": 9})
    assert dict(Action.objects.values_list("stage_id", "attempt")) == {"a": 1, "b": 0}
    assert Action.objects.get(pk=b.pk).status == "ready"
    # no rows: nothing to write; a guard binds exactly its own values
    db.update(guards.RUN_RUNNING.rows([]), {"error": "x"})
    with pytest.raises(TypeError, match="action_of_lease binds 2 values"):
        guards.ACTION_OF_LEASE.row(a.pk, "some-run")


@pytest.mark.postgres
def test_hot_statements_are_prepared_on_postgresql(db):
    # PostgreSQL parses and plans each fixed statement once per connection (settings.py)
    if connection.vendor != "postgresql":
        pytest.skip("SQLite keeps its own statement cache")
    connection.ensure_connection()
    assert connection.connection.prepare_threshold == 2


@pytest.mark.postgres
def test_hot_reads_load_timestamps_as_the_orm_does_with_psycopgs_loader(store):
    # the hot cursor loads timestamptz with psycopg's own loader, the ORM's cursors keep Django's
    if connection.vendor != "postgresql":
        pytest.skip("the timestamptz loader is PostgreSQL's")
    import datetime

    item = make_graph(store, [{"id": "a"}])
    c = store.claim()
    with db.hot_cursor() as cur:
        loader = cur.adapters.get_loader(db.TIMESTAMPTZ_OID, 0)
        cur.execute(f'SELECT started_at, expires_at FROM "{Run._meta.db_table}" WHERE id = %s', [c.run.pk])
        started, expires = cur.fetchone()
    with connection.cursor() as orm_cur:
        django_loader = orm_cur.cursor.adapters.get_loader(db.TIMESTAMPTZ_OID, 0)
    assert loader.__name__ == "TimestamptzLoader" and loader is not django_loader
    assert started.tzinfo is datetime.timezone.utc and expires.tzinfo is datetime.timezone.utc
    run = Run.objects.get(pk=c.run.pk)
    assert (started, expires) == (run.started_at, run.expires_at)
    assert run.started_at.tzinfo is datetime.timezone.utc
    detail = db.RUN_ROW.build_many([r for r in db.read_all([("detail_runs", [item.pk])])[0]])[0]
    assert _fields(detail) == _fields(run)


@pytest.mark.postgres
def test_reads_keep_a_cursor_per_statement_and_connection(store):
    # on PostgreSQL each read runs on the connection's own cursor for that statement
    if connection.vendor != "postgresql":
        pytest.skip("SQLite reads on one cursor")
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    store.claim()
    reads = [("detail_item", [item.pk]), ("detail_actions", [item.pk]), ("detail_runs", [item.pk])]
    first = db.read_all(reads)
    cursors = [hot._statement_cursor(connection, name) for name, _ in reads]
    # when the same reads run again: the same cursors, and what they read is what the ORM reads
    again = db.read_all(reads)
    assert [hot._statement_cursor(connection, name) for name, _ in reads] == cursors
    assert again == first and len(first[1]) == 2 and len(first[2]) == 1
    assert [a.pk for a in db.ACTION_ROW.build_many(again[1], connection)] == list(
        Action.objects.filter(work_item=item).order_by("sequence").values_list("pk", flat=True))
    # a statement read twice in one call gets both results
    twice = db.read_all([("detail_actions", [item.pk]), ("detail_actions", ["no-such-item"])])
    assert twice == [first[1], []]
    # what observes statements sees them
    with CaptureQueriesContext(connection) as seen:
        assert db.read_all(reads) == first
    assert len(seen.captured_queries) == 3
    # another connection (another thread) has cursors of its own
    seen_there = []

    def other():
        from django.db import connections

        seen_there.append((db.read_all([("detail_item", ["no-such-item"])]),
                           hot._statement_cursor(connections["default"], "detail_item")))

    _started(other).join()
    assert seen_there[0][0] == [[]] and seen_there[0][1] is not cursors[0]


def test_action_claim_walks_past_blocked_candidates_in_claim_order(store, tmp_path):
    # given two older candidates blocked by a running shared action in their workspace
    ws = str(tmp_path)
    make_graph(store, [{"id": "holder"}], work_dir=ws)
    holder = store.claim()
    assert holder.action.stage_id == "holder"
    make_graph(store, [{"id": "x1"}], work_dir=ws)
    make_graph(store, [{"id": "x2"}], work_dir=ws)
    free = make_graph(store, [{"id": "free"}])
    # when another worker claims
    c = store.claim(boot="boot-B")
    # then the first allowed candidate after the blocked ones is taken
    assert (c.work_item.pk, c.action.stage_id) == (free.pk, "free")
    assert store.claim(boot="boot-C") is None


def test_claim_fault_after_the_action_update_commits_nothing(store):
    item = make_graph(store, [{"id": "a"}])
    with inject_fault("after_claim_update"), pytest.raises(RuntimeError):
        store.claim()
    action = Action.objects.get(work_item_id=item.pk)
    assert (action.status, action.attempt, action.lease_epoch, action.claimable) == ("ready", 0, 0, True)
    assert not Run.objects.exists() and not Event.objects.filter(type="run.claimed").exists()
    assert store.claim().action.pk == action.pk


def test_claim_returns_the_rows_it_wrote(store):
    item = make_graph(store, [{"id": "a"}])
    c = store.claim()
    assert _fields(c.run) == _fields(Run.objects.get(pk=c.run.pk))
    assert _fields(c.action) == _fields(Action.objects.get(pk=c.action.pk))
    assert _fields(c.work_item) == _fields(WorkItem.objects.get(pk=item.pk))
    event = Event.objects.get(type="run.claimed")
    assert (event.run_id, event.action_id, event.data) == (c.run.pk, c.action.pk,
                                                           {"owner_boot_id": "boot-A", "lease_epoch": 1})


def test_submit_refreshes_the_graph_and_flags_from_one_read(store):
    # given a -> (b, c) -> d
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["a"]},
                              {"id": "d", "deps": ["b", "c"]}])
    store.complete(store.claim())
    flags = dict(Action.objects.filter(work_item_id=item.pk).values_list("stage_id", "claimable"))
    assert flags == {"a": False, "b": True, "c": True, "d": False}
    b = store.claim()
    run, action, got = store.submit(b, completed())
    assert (action.status, got.status) == ("completed", "ready")
    assert got.current_action_id == Action.objects.get(stage_id="c").pk
    flags = dict(Action.objects.filter(work_item_id=item.pk).values_list("stage_id", "claimable"))
    assert flags == {"a": False, "b": False, "c": True, "d": False}
    store.complete(store.claim())
    assert Action.objects.get(stage_id="d").claimable is True
    assert store.item(item.pk).status == "ready"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_stream_reads_wait_for_every_drawn_event_id_while_writers_never_wait(clock):
    """PostgreSQL: writers take the stream key shared (before drawing an id, to their commit), so a
    second writer commits while the first is still open; a stream read takes it exclusively, so it
    waits for the open writer and never returns a page that a later commit would extend below."""
    import threading
    import time

    from django.db import transaction

    from workcenter import selectors
    from workcenter.events import event_append

    if connection.vendor != "postgresql":
        pytest.skip("the stream key is PostgreSQL's (SQLite serialises writers)")
    # given a writer that appended an event and has not committed yet
    now = clock()
    item = WorkItem.objects.create(title="t", goal="g", created_at=now, updated_at=now)
    inserted, release = threading.Event(), threading.Event()
    ids, pages = {}, {}

    def first():
        with transaction.atomic():
            ids["first"] = event_append(work_item_id=item.pk, type="test.first", now=now).id
            inserted.set()
            release.wait(20)

    def second():
        with transaction.atomic():
            ids["second"] = event_append(work_item_id=item.pk, type="test.second", now=now).id

    def reader():
        pages["read"] = [e.id for e in selectors.events_after(after_id=0)]

    t1 = _started(first)
    assert inserted.wait(20)
    # when a second writer appends, it commits without waiting for the first
    t2 = _started(second)
    t2.join(20)
    assert not t2.is_alive() and ids["second"] == ids["first"] + 1
    # and a stream read meanwhile waits for the open writer instead of returning [second]
    t3 = _started(reader)
    time.sleep(0.3)
    assert t3.is_alive() and "read" not in pages
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        assert cur.fetchone()[0] == 1
    release.set()
    t1.join(20)
    t3.join(20)
    # then the page holds both ids, in order, with no hole
    assert pages["read"] == [ids["first"], ids["second"]]
    assert list(Event.objects.order_by("id").values_list("type", flat=True)) == ["test.first", "test.second"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_lease_read_waits_for_the_item_and_returns_the_rows_as_committed(clock):
    """PostgreSQL: the one-statement lease read locks item, run and action, the item first; when
    it had to wait, the rows it returns are those the other transaction committed."""
    import threading
    import time

    from django.db import transaction

    from tests.conftest import Store

    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite serialises writers)")
    # given a claimed run, and a transaction holding its item that interrupts the run
    store = Store(clock)
    make_graph(store, [{"id": "a"}])
    c = store.claim()
    locked, go, got = threading.Event(), threading.Event(), {}

    def holder():
        with transaction.atomic():
            common.lock_item(c.work_item.pk)
            locked.set()
            go.wait(20)
            Run.objects.filter(pk=c.run.pk).update(status="interrupted")
            Action.objects.filter(pk=c.action.pk).update(status="ready", current_run_id=None)

    def reader():
        with transaction.atomic():
            run, action, item = common.lease_rows(c.run.pk)
            got["rows"] = (run.status, action.status, action.current_run_id, item.pk)

    t1 = _started(holder)
    assert locked.wait(20)
    # when the lease read starts meanwhile
    t2 = _started(reader)
    time.sleep(0.3)
    # then it waits for the item, holding neither the run nor the action (the item comes first)
    assert t2.is_alive() and "rows" not in got
    with transaction.atomic():
        assert Run.objects.select_for_update(nowait=True).filter(pk=c.run.pk).exists()
        assert Action.objects.select_for_update(nowait=True).filter(pk=c.action.pk).exists()
    # and once the holder has changed run and action and committed, it returns them as committed
    go.set()
    t1.join(20)
    t2.join(20)
    assert got["rows"] == ("interrupted", "ready", None, c.work_item.pk)


def test_json_columns_decode_as_the_orm_decodes_them(store):
    # given the JSON texts these rows hold, and one that is not JSON (a plain JSONField: the
    # evidence, checkpoint and context fields also normalise what they read)
    field = Action._meta.get_field("brief")
    col = field.get_col("a")
    texts = ["[]", "{}", "null", '[{"a": 1}]', '{"k": [1, "x"]}', "3", '"s"', "not json", None]
    # when the hot path's converter reads them
    got = [rows._json_from_db(t, col, connection) for t in texts]
    # then it returns what JSONField.from_db_value returns
    assert got == [field.from_db_value(t, col, connection) for t in texts]
    # and the empty containers are fresh objects: a caller mutating one cannot change another row's
    first, second = (db.ACTION_ROW.build_many([row], connection)[0] for row in _two_action_rows(store))
    assert first.context == [] and second.context == [] and first.context is not second.context
    first.context.append("x")
    assert second.context == []


def test_datetime_columns_convert_as_the_orm_converts_them(store):
    import datetime

    col = Run._meta.get_field("started_at").get_col("r")
    convs = [c for i, name, c, _ in db.RUN_ROW.converters(connection) if name == "started_at"]
    utc = datetime.timezone.utc
    naive = datetime.datetime(2026, 1, 2, 3, 4, 5, 6)
    minus5 = datetime.timezone(datetime.timedelta(hours=-5))
    values = [None, naive, naive.replace(microsecond=0), "2026-01-02 03:04:05.000006", "2026-01-02 03:04:05",
              "2026-01-02T03:04:05+02:00", naive.replace(tzinfo=minus5)]
    expected = [None, naive.replace(tzinfo=utc), naive.replace(microsecond=0, tzinfo=utc),
                naive.replace(tzinfo=utc), naive.replace(microsecond=0, tzinfo=utc),
                datetime.datetime(2026, 1, 2, 1, 4, 5, tzinfo=utc), naive.replace(tzinfo=minus5)]
    got = [rows._sqlite_utc(v, col, connection) for v in values]
    # the same instants, and every value aware
    assert got == expected and all(g is None or g.tzinfo is not None for g in got)
    if connection.vendor == "sqlite":
        # the hot path's rows use it for this column, and it answers what Django's converter answers
        assert convs == [rows._sqlite_utc]
        django_conv = connection.ops.convert_datetimefield_value
        assert got == [django_conv(v, col, connection) for v in values]
    else:
        # PostgreSQL hands back aware datetimes itself: the backend's converters stand
        assert rows._sqlite_utc not in convs


def _two_action_rows(store):
    make_graph(store, [{"id": "a"}])
    make_graph(store, [{"id": "b"}])
    with connection.cursor() as cur:
        cur.execute(f'SELECT {db.ACTION_ROW.columns()} FROM {Action._meta.db_table} a ORDER BY a."stage_id"')
        return cur.fetchall()


def test_hot_execute_maps_database_errors_and_rolls_back(store):
    from django.db import IntegrityError, transaction

    # given an action
    item = make_graph(store, [{"id": "a"}])
    action = Action.objects.get(work_item_id=item.pk)
    # when a hot statement violates a constraint (a second row with the same id), outside a debug cursor
    sql = f'UPDATE {Action._meta.db_table} SET "id" = %s WHERE "id" <> %s'
    other = make_graph(store, [{"id": "b"}])
    with pytest.raises(IntegrityError), transaction.atomic(), db.hot_cursor() as cur:
        db.hot_execute(cur, sql, [action.pk, action.pk])
    # then Django's error is raised and nothing was written
    assert Action.objects.filter(work_item_id=other.pk).count() == 1
    assert Action.objects.get(pk=action.pk).work_item_id == item.pk


def test_new_instance_is_what_the_model_constructor_builds(store):
    now = store.now()
    values = {"id": "r1", "action_id": "a1", "work_item_id": "w1", "owner_boot_id": "b", "lease_epoch": 1,
              "status": "running", "started_at": now, "expires_at": now}
    built, constructed = db.new_instance(Run, connection.alias, values), Run(**values)
    assert _fields(built) == _fields(constructed)
    assert built._state.adding is False and built._state.db == connection.alias
    # callable defaults are called per instance
    a, b = (db.new_instance(Event, connection.alias, {"type": "t"}) for _ in range(2))
    assert a.data == {} and a.data is not b.data
