"""Shared fixtures: small factories that drive the real services (no row-level shortcuts)."""
from __future__ import annotations

import itertools
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from workcenter import services
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.domain import workflows

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=timezone.utc)
TESTS = Path(__file__).resolve().parent

# Where a test runs (docs/testing.md): the store, the API and the stream on both databases; a
# browser, fleet or deployment test once, on PostgreSQL + Redis, the team deployment (marker
# `deployment`, given here by its folder or module); the demo path once, on SQLite (marker `demo`,
# set by the module: the demo is the embedded default).
ONCE_FOLDERS = ("browser", "e2e")
ONCE_MODULES = ("test_deploy.py",  # production settings and serving processes
                "test_shell_executor.py")  # worker processes running commands: what a host allows


# In parallel runs (pytest-xdist --dist loadgroup) the browser modules go to one group per test
# process, each module whole and each group in one process: a process starts one server and one
# chromium for its group (tests/browser/conftest.py), not one per module it happens to get; the
# modules that name a Redis database of their own form one group each (they flush it).
BROWSER_GROUPS = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def _names_a_redis_database(module) -> bool:
    """A module that names a Redis database of its own at module level (`redis://…/N`): its tests
    flush that database, so two of them must not run at once in two test processes."""
    return any(isinstance(value, str) and value.startswith("redis://") for value in vars(module).values())


def _flush_again_after_a_deadlock() -> None:
    """A transactional test ends by emptying the tables (one TRUNCATE of them all). On PostgreSQL a
    server process the test started may still be reading them, holding one table and waiting for
    another: PostgreSQL then ends one of the two as a deadlock, and when it ends the TRUNCATE the
    next test starts on rows left over. The TRUNCATE is tried again once that read is gone."""
    import time

    from django.db import OperationalError
    from django.db.backends.base.operations import BaseDatabaseOperations

    flush = BaseDatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        for attempt in range(5):
            try:
                return flush(self, sql_list)
            except OperationalError as exc:
                if "deadlock detected" not in str(exc) or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    BaseDatabaseOperations.execute_sql_flush = execute_sql_flush


_flush_again_after_a_deadlock()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    modules = sorted({item.path for item in items if item.path.relative_to(TESTS).parts[0] == "browser"})
    group_of = {path: f"browser-{n % BROWSER_GROUPS}" for n, path in enumerate(modules)}
    for item in items:
        parts = item.path.relative_to(TESTS).parts
        if parts[0] in ONCE_FOLDERS or parts[-1] in ONCE_MODULES:
            item.add_marker(pytest.mark.deployment)
        if item.path in group_of:
            item.add_marker(pytest.mark.xdist_group(group_of[item.path]))
        elif getattr(item, "module", None) is not None and _names_a_redis_database(item.module):
            item.add_marker(pytest.mark.xdist_group(f"redis-{item.module.__name__}"))


class LongFirst:
    """The long tests first (the browser groups, the servers and processes, the fuzzer): a test
    process that draws one late runs on alone after the others have finished. After
    pytest-django's order (by kind of database access, which would put them last), kept within."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        items.sort(key=lambda item: 0 if _long(item) else 1)


def pytest_configure(config):
    config.pluginmanager.register(LongFirst(), "workcenter-long-first")


LONG_MODULES = ("test_openapi_fuzz.py", "test_deploy.py", "test_shell_executor.py", "test_demo_process.py")


def _long(item) -> bool:
    parts = item.path.relative_to(TESTS).parts
    return parts[0] in ONCE_FOLDERS or parts[-1] in LONG_MODULES


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """TESTS_MAY_SKIP=postgres-only: only a `postgres`-marked test may skip (the SQLite run);
    =none: no test may skip (the PostgreSQL run). A skip that breaks the rule is a failure, so a
    missing browser, Redis or fixture cannot hide behind a green run."""
    report = (yield).get_result()
    rule = os.environ.get("TESTS_MAY_SKIP", "")
    if report.skipped and rule and not hasattr(report, "wasxfail"):
        if rule == "none" or item.get_closest_marker("postgres") is None:
            report.outcome = "failed"
            report.longrepr = f"skipped, and TESTS_MAY_SKIP={rule} forbids it: {report.longrepr}"


@pytest.fixture(autouse=True)
def _publisher_forgets_the_ids_of_the_test():
    """The publisher offers each event id once (dashboard/stream/batcher.py remembers the last
    10,000). A test that runs its on-commit hooks inside a transaction it then rolls back
    (`django_capture_on_commit_callbacks(execute=True)`) offers ids that SQLite hands out again
    to the next test's events, which the publisher would then drop as already sent (a listener
    of that test waited for them in vain). A process of the product never sees an id twice.
    Forgotten before the test as well as after it: what an earlier test's late commit offered
    (a thread of it that outlived its teardown) would drop this test's events the same way."""
    from dashboard.stream.publisher import publisher

    def forget():
        queue = publisher.queue
        with queue.cond:
            queue.known.clear()
            queue.known_order.clear()

    forget()
    yield
    forget()


@pytest.fixture(scope="session", autouse=True)
def _close_idle_test_connections(django_db_setup, django_db_blocker):
    """Before the test database is dropped (PostgreSQL), end the idle sessions that threads of
    this process still hold: the in-process servers' request threads, channels' database
    threads and the publisher keep their connections (CONN_MAX_AGE) and cannot be closed from
    here, and DROP DATABASE refuses while they exist."""
    yield
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'")


class Clock:
    """A movable clock passed to services as `now=`."""

    def __init__(self, start: datetime = T0):
        self.t = start

    def __call__(self) -> datetime:
        return self.t

    def tick(self, ms: int = 1) -> datetime:
        self.t = self.t + timedelta(milliseconds=ms)
        return self.t


@pytest.fixture
def clock():
    return Clock()


_ids = itertools.count(1)
_UNSET = object()


def checks_for(criteria, status="passed"):
    return [{"criterion": c, "status": status, "evidence": f"checked {c}"} for c in criteria]


def completed(criteria=(), **extra):
    result = {"outcome": "completed", "summary": "done", "evidence": ["did the work"],
              "acceptance_checks": checks_for(criteria)}
    result.update(extra)
    return result


def item_snapshot(item_id):
    """Every stored row of one item (item, actions, runs, events): equal before and after a refused
    call means nothing was written."""
    return (
        list(WorkItem.objects.filter(pk=item_id).values()),
        list(Action.objects.filter(work_item_id=item_id).order_by("sequence").values()),
        list(Run.objects.filter(work_item_id=item_id).order_by("pk").values()),
        list(Event.objects.filter(work_item_id=item_id).order_by("id").values()),
    )


class Store:
    """Test driver over the public services with an explicit clock."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.boot = "boot-A"

    def now(self):
        return self.clock.tick(1)

    def create(self, *, workflow=None, criteria=(), start=True, work_dir=_UNSET, id=None, **kw):
        args = dict(title=kw.pop("title", "Item"), goal=kw.pop("goal", "Do the thing"),
                    acceptance_criteria=list(criteria), start=start, now=self.now(), **kw)
        if workflow is not None:
            args.update(workflow=workflow, trusted=True)
        if work_dir is not _UNSET:
            args["work_dir"] = work_dir
        if id is not None:
            args["id"] = id
        return services.work_item_create(**args)

    def linear(self, **kw):
        return self.create(workflow=workflows.default_workflows()[0], **kw)

    def claim(self, boot=None, lease_ms=60_000):
        return services.action_claim(owner_boot_id=boot or self.boot, lease_ms=lease_ms, now=self.now())

    def submit(self, claim, result, boot=None, epoch=None):
        return services.run_submit(run_id=claim.run.pk, owner_boot_id=boot or claim.run.owner_boot_id,
                                   lease_epoch=claim.run.lease_epoch if epoch is None else epoch,
                                   result=result, now=self.now())

    def complete(self, claim, criteria=None, **extra):
        item = WorkItem.objects.get(pk=claim.work_item.pk)
        crit = item.acceptance_criteria if criteria is None else criteria
        return self.submit(claim, completed(crit, **extra))

    def planned(self, actions, *, criteria=(), work_item_type="analysis", work_dir=_UNSET, **kw):
        """A graph item built the real way: planning triage submits a plan."""
        item = self.create(criteria=criteria, work_dir=work_dir, work_item_type=work_item_type, **kw)
        claim = self.claim_item(item.pk)
        assert claim.action.type == "triage"
        self.submit(claim, completed(criteria, plan={"work_item_type": work_item_type, "actions": actions}))
        return WorkItem.objects.get(pk=item.pk)

    def claim_item(self, item_id, boot=None, stage=None):
        """Claim until an action of the given item (and stage) is returned; other claims are released."""
        others = []
        try:
            while True:
                c = self.claim(boot)
                if c is None:
                    return None
                if c.work_item.pk == item_id and (stage is None or c.action.effective_stage_id == stage):
                    return c
                others.append(c)
        finally:
            for o in others:
                services.run_interrupt(run_id=o.run.pk, owner_boot_id=o.run.owner_boot_id,
                                       lease_epoch=o.run.lease_epoch, reason="test release", now=self.now())

    def item(self, item_id):
        return WorkItem.objects.get(pk=item_id)

    def actions(self, item_id):
        return list(Action.objects.filter(work_item_id=item_id).order_by("sequence"))

    def by_stage(self, item_id):
        out = {}
        for a in self.actions(item_id):
            out[a.effective_stage_id] = a
        return out

    def runs(self, item_id):
        return list(Run.objects.filter(work_item_id=item_id).order_by("started_at"))

    def event_types(self, item_id):
        from workcenter.models import Event
        return list(Event.objects.filter(work_item_id=item_id).order_by("id").values_list("type", flat=True))


@pytest.fixture
def store(clock, db):
    return Store(clock)


def make_graph(store: Store, stages, *, work_dir: str = "", status: str = "ready", id=None, title="Graph item"):
    """A graph item built directly with a stage-less `{execution_mode: graph}` snapshot (DOMAIN §4.2).

    `stages` is a list of dicts: {id, deps=[], mode="shared", type="research", max_attempts=2,
    return_to=None, status="ready"}.
    """
    from workcenter.models import new_id
    from workcenter.services import graph
    from workcenter.work_dirs import canonicalize_dir

    now = store.now()
    item = WorkItem.objects.create(
        id=id or new_id(), title=title, goal="Graph goal", acceptance_criteria=[],
        workflow_template="test-graph", workflow_snapshot={"execution_mode": "graph"},
        status=status, work_dir=work_dir, workspace_key=canonicalize_dir(work_dir),
        created_at=now, updated_at=now,
    )
    for seq, st in enumerate(stages, start=1):
        Action.objects.create(
            id=new_id(), work_item=item, sequence=seq, type=st.get("type", "research"), stage_id=st["id"],
            depends_on_stage_ids=list(st.get("deps", [])), workspace_mode=st.get("mode", "shared"),
            changes_requested_stage_id=st.get("return_to"), max_attempts=st.get("max_attempts", 2),
            status=st.get("status", "ready"), instruction=f"do {st['id']}", created_at=store.now(), updated_at=store.now(),
        )
    graph.sync_claimable(item)
    return WorkItem.objects.get(pk=item.pk)


@pytest.fixture
def viewer(db):
    """A person who may only look: `view_workitem` alone."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("viewer", password="pw")
    user.user_permissions.add(Permission.objects.get(content_type__app_label="workcenter", codename="view_workitem"))
    return User.objects.get(pk=user.pk)
