"""End to end over Redis: two daphne processes share the database and a Redis channel layer. A
websocket client on server A receives, in id order and exactly once, the events committed by
server B's HTTP API and by a separate worker process."""
import os
import subprocess
import sys
import time

import pytest
import redis
from django.contrib.auth.models import Permission, User

from workcenter.auth import api_token_create
from workcenter.models import Event

from tests.live import ROOT, Listener, database_url, free_port, port_open, wait_until

from .test_worker_recovery import _post
from tests.live import redis_db_url

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("WORKCENTER_TEST_REDIS_URL", redis_db_url(2))


def _daphne(port: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "workcenter.asgi:application"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)




def test_events_from_other_processes_reach_a_websocket_client_in_order():
    redis.Redis.from_url(REDIS_URL).flushdb()  # a Redis that is down fails here, loudly
    user = User.objects.create_user("robot")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    _, token = api_token_create(user=user, name="e2e-ws")
    env = dict(os.environ, DATABASE_URL=database_url(), REDIS_URL=REDIS_URL, PYTHONUNBUFFERED="1",
               WORKCENTER_SIM_SCALE="0.05", WORKCENTER_SIM_RATES="0,0,0")
    port_a, port_b = free_port(), free_port()
    procs = [_daphne(port_a, env), _daphne(port_b, env)]
    listeners = []
    try:
        assert wait_until(lambda: port_open(port_a) and port_open(port_b), 30)
        everything = Listener(f"ws://127.0.0.1:{port_a}/ws/work-items/?token={token}")
        listeners.append(everything)
        assert everything.hello["type"] == "hello" and everything.hello["last_event_id"] == 0

        # server B's HTTP API commits
        status, body = _post(f"http://127.0.0.1:{port_b}/api/v1/work-items", token, {
            "title": "over redis", "goal": "End to end", "acceptance_criteria": ["works"],
            "work_item_type": "research"})
        assert status == 201
        item_id = body["id"]
        one = Listener(f"ws://127.0.0.1:{port_b}/ws/work-items/{item_id}/?token={token}")
        listeners.append(one)
        assert one.hello["graph"]["work_item_id"] == item_id
        # a separate worker process commits claims, progress and submissions with the local store
        worker = subprocess.run([sys.executable, "manage.py", "workcenter_worker", "--once", "--concurrency", "1"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert worker.returncode == 0, worker.stdout + worker.stderr

        stored = list(Event.objects.order_by("id").values_list("id", "type", "work_item_id"))
        assert {t for _, t, _ in stored} >= {"work_item.created", "run.claimed"} and len(stored) >= 3
        want = [i for i, _, _ in stored]
        want_item = [i for i, _, w in stored if w == item_id and i > one.hello["last_event_id"]]
        assert wait_until(lambda: len(everything.event_ids()) >= len(want)
                           and len(one.event_ids()) >= len(want_item), 20, step=0.05), everything.messages
        time.sleep(0.5)  # nothing more (no duplicate) arrives
        assert everything.event_ids() == want
        assert one.event_ids() == want_item
        sent = {m["event"]["id"]: m for m in everything.messages if m["type"] == "event"}
        assert [sent[i]["event"]["type"] for i in want] == [t for _, t, _ in stored]
        assert all(sent[i]["work_item"]["id"] == item_id for i in want)
        progress = [m for m in everything.messages if m["type"] == "progress"]
        print(f"{len(want)} events, {len(progress)} progress messages")
        assert all(p["work_item_id"] == item_id for p in progress)
    finally:
        for listener in listeners:
            listener.close()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
