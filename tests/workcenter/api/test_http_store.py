"""The HTTP workers' client (workcenter.worker.HttpStore) against a real daphne server: keep-alive
connections reused across calls and threads, a server-closed connection replaced without sending
a request twice, API errors as StoreError."""
from __future__ import annotations

import collections
import threading
import time
from datetime import datetime, timezone

import pytest
from django.contrib.auth.models import Permission, User

from tests.conftest import checks_for
from tests.live import free_port, start_daphne, stop_process
from workcenter import services
from workcenter.auth import api_token_create
from workcenter.models import Run, RunLogChunk, WorkItem
from workcenter.worker import HttpStore, StoreError

pytestmark = pytest.mark.django_db(transaction=True)


class Server:
    def __init__(self):
        self.port = free_port()
        self.proc = None

    def start(self) -> None:
        self.proc = start_daphne(self.port, {"DJANGO_DEBUG": "0", "WORKCENTER_LOG_LEVEL": "WARNING"})

    def stop(self) -> None:
        stop_process(self.proc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def server():
    s = Server()
    s.start()
    yield s
    s.stop()


@pytest.fixture
def token():
    user = User.objects.create_user("robot")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    return api_token_create(user=user, name="store")[1]


def _item():
    return services.work_item_create(title="Store", goal="keep-alive", work_item_type="research",
                                     acceptance_criteria=["works"], actor="test")


def _local_ports(store: HttpStore) -> set[int]:
    return {c.sock.getsockname()[1] for c in store._idle}


def test_calls_share_one_keep_alive_connection(server, token):
    # given a claimable item
    item = _item()
    store = HttpStore(server.url, token)
    ports = set()
    # when a worker recovers, claims, renews, reports progress and submits
    assert store.recover("boot-S") == 0
    ports |= _local_ports(store)
    task = store.claim("boot-S", 30_000)
    ports |= _local_ports(store)
    assert task["work_item"]["id"] == item.pk and task["run"]["owner_boot_id"] == "boot-S"
    assert store.renew(task["run"], 30_000) is True
    ports |= _local_ports(store)
    assert store.progress(task["run"], {"response": "half"}) is True
    at = datetime.now(timezone.utc)
    assert store.log(task["run"], [{"stream": "stdout", "text": "half\n", "at": at}]) is True
    assert list(RunLogChunk.objects.filter(run_id=task["run"]["id"]).values_list("text", "at")) == [("half\n", at)]
    out = store.submit(task["run"], {"outcome": "completed", "summary": "done", "evidence": ["did it"]})
    ports |= _local_ports(store)
    # then every call used the same connection
    assert out["run"]["id"] == task["run"]["id"] and out["run"]["status"] != "running"
    assert len(store._idle) == 1 and len(ports) == 1
    # a submission sent again with its fence answers as applied
    assert store.submit(task["run"], {"outcome": "completed"})["run"] == out["run"]
    # and API errors arrive as StoreError with the API's code and status, the connection still usable
    with pytest.raises(StoreError) as err:
        store.submit({**task["run"], "owner_boot_id": "boot-other"}, {"outcome": "completed"})
    assert err.value.code == "stale_run" and err.value.status == 409
    assert store.renew(task["run"], 30_000) is False  # stale: the run has finished
    assert store.log(task["run"], [{"stream": "stdout", "text": "late\n", "at": at}]) is False
    assert _local_ports(store) == ports
    bad = HttpStore(server.url, "wc_nope_nope")
    with pytest.raises(StoreError) as err:
        bad.claim("boot-S", 30_000)
    assert err.value.code == "not_authenticated"
    store.close()
    assert store._idle == []


def test_threads_share_the_pool(server, token):
    _item()
    store = HttpStore(server.url, token)
    task = store.claim("boot-T", 60_000)
    results, errors = [], []

    def renew_many():
        try:
            for _ in range(5):
                results.append(store.renew(task["run"], 60_000))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=renew_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and results == [True] * 20
    assert 1 <= len(store._idle) <= 4  # at most one connection per concurrent caller
    store.close()


def test_a_connection_the_server_closed_is_replaced_not_retried(server, token):
    # given a store with an idle keep-alive connection
    _item()
    _item()
    store = HttpStore(server.url, token)
    first = store.claim("boot-R", 60_000)
    (old_port,) = _local_ports(store)
    # when the server restarts on the same port (closing that connection)
    server.stop()
    server.start()
    time.sleep(0.2)  # let the FIN arrive
    # then the next call notices before sending, opens a new connection and claims exactly once
    second = store.claim("boot-R", 60_000)
    assert second is not None and second["run"]["id"] != first["run"]["id"]
    assert _local_ports(store) != {old_port}
    assert Run.objects.filter(owner_boot_id="boot-R").count() == 2
    assert WorkItem.objects.filter(status="running").count() == 2
    store.close()


def test_store_refuses_urls_it_cannot_call():
    with pytest.raises(ValueError):
        HttpStore("ftp://example.org", "t")


def test_a_response_longer_than_the_store_keeps_is_submitted_not_refused(server, token):
    # given a claimed run and an output of 2 million characters (over the server's body limit)
    _item()
    store = HttpStore(server.url, token)
    task = store.claim("boot-L", 60_000)
    output = "x" * 2_000_000
    # when the worker submits it
    out = store.submit(task["run"], {"outcome": "completed", "summary": "long", "evidence": ["did it"],
                                       "acceptance_checks": checks_for(["works"]), "response": output})
    # then the submission is taken (not a 413), with the first 65,536 characters the store keeps
    # (DOMAIN §12.3); the run is finished, whatever the triage thought of its plan
    assert out["run"]["id"] == task["run"]["id"] and out["run"]["status"] != "running"
    assert Run.objects.get(pk=task["run"]["id"]).response == output[:65536]
    store.close()


def test_a_worker_needs_one_request_per_action_with_claim_next(server, token):
    # given five ready items, and a worker over HTTP whose requests are counted
    from workcenter.executors.simulated import SimulatedExecutor
    from workcenter.worker import Worker

    ids = {_item().pk for _ in range(5)}
    store = HttpStore(server.url, token)
    calls: list[str] = []
    real_call = store._call

    def counted(path, body, **kwargs):
        calls.append(path.rsplit("/", 1)[-1] + ("+next" if "claim_next" in body else ""))
        return real_call(path, body, **kwargs)
    store._call = counted
    worker = Worker(store, SimulatedExecutor(scale=0.01, failure_rate=0, waiting_rate=0, retry_rate=0),
                    concurrency=1, lease_ms=30_000, boot_id="boot-one-trip", wait_ms=5_000)
    # when it works until nothing is left (and then waits in a long-poll claim)
    loop = threading.Thread(target=worker.run_forever, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 60
        while WorkItem.objects.filter(pk__in=ids, status="done").count() < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.state = "stopping"
        worker.wake.set()
        store.abort_waits()
        loop.join(10)
    assert not loop.is_alive()  # the long poll in flight ended with the stop
    # then each action after the first was claimed by the previous submission
    finished = Run.objects.filter(work_item_id__in=ids, status="completed").count()
    assert finished >= 5 and WorkItem.objects.filter(pk__in=ids, status="done").count() == 5
    # the first claim, and the long poll that found nothing left (at most one more, cut by the stop)
    assert 1 <= calls.count("claims") <= 3, calls
    assert calls.count("submit+next") == finished
    assert calls.count("recoveries") <= 3  # at start, then at most once per renewal interval
    per_action = (len(calls) - calls.count("progress")) / finished
    print(f"\n{finished} actions, {len(calls)} requests ({per_action:.2f} per action without progress reports): "
          f"{collections.Counter(calls)}")
    store.close()
