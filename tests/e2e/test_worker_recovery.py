"""End to end: a daphne server and two real worker processes over HTTP; one worker is killed with
SIGKILL mid-run and its run is recovered and reclaimed with a higher epoch."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request

import pytest
from django.contrib.auth.models import Permission, User

from tests.live import ROOT, database_url, free_port, port_open, wait_until
from workcenter.auth import api_token_create
from workcenter.models import Action, Event, Run, WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def _post(url, token, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def test_killed_worker_run_is_recovered_and_everything_finishes(tmp_path):
    user = User.objects.create_user("robot")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    _, token = api_token_create(user=user, name="e2e")
    port = free_port()
    env = dict(os.environ, DATABASE_URL=database_url(), WORKCENTER_SIM_SCALE="1.5", WORKCENTER_SIM_RATES="0,0,0",
               PYTHONUNBUFFERED="1")
    procs = []
    try:
        server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                   "workcenter.asgi:application"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(server)
        base = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: port_open(port), 30)
        scripts = {}
        for i in range(6):
            title = f"e2e item {i}" + (" [sim:waiting]" if i == 5 else "")
            status, body = _post(f"{base}/api/v1/work-items", token, {
                "title": title, "goal": "End to end", "acceptance_criteria": ["works"],
                "work_item_type": "research"})
            assert status == 201
            scripts[body["id"]] = "waiting" if i == 5 else "done"

        def start_worker():
            p = subprocess.Popen([sys.executable, "manage.py", "workcenter_worker", "--server", base, "--token", token,
                                  "--concurrency", "2", "--lease-ms", "3000", "--poll-ms", "200"],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(p)
            seen = []
            for _ in range(50):  # the first line naming the boot id (warnings may come before it)
                line = p.stdout.readline()
                seen.append(line)
                match = re.search(r"worker (\S+) starting", line)
                if match:
                    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()  # drain
                    return p, match.group(1)
            raise AssertionError("worker did not start: " + "".join(seen))

        victim, victim_boot = start_worker()
        survivor, _ = start_worker()
        # kill the victim while it holds a running run
        assert wait_until(lambda: Run.objects.filter(owner_boot_id=victim_boot, status="running").exists(), 60)
        held = set(Run.objects.filter(owner_boot_id=victim_boot, status="running").values_list("pk", flat=True))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)

        def settled():
            statuses = dict(WorkItem.objects.values_list("pk", "status"))
            return all(statuses.get(pk) == want for pk, want in scripts.items())

        assert wait_until(settled, 150), dict(WorkItem.objects.values_list("title", "status"))
        survivor.send_signal(signal.SIGTERM)
        survivor.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)

    # the killed runs were interrupted by recovery and their actions reclaimed with a higher epoch;
    # a run the victim held a moment before the kill may have been submitted in that moment (its
    # request already on its way): done, not killed
    killed = set(Run.objects.filter(pk__in=held).exclude(status="completed").values_list("pk", flat=True))
    assert killed, "the victim submitted every run it held in the instant before it was killed"
    for run_id in killed:
        run = Run.objects.get(pk=run_id)
        assert run.status == "interrupted"
        assert "lease ended" in run.error
        later = Run.objects.filter(action_id=run.action_id, lease_epoch__gt=run.lease_epoch)
        assert later.exists()
        assert Event.objects.filter(run_id=run_id, type="run.interrupted").exists()
    # no action was ever held by two runs at once; epochs grow with every claim
    for action in Action.objects.all():
        runs = list(Run.objects.filter(action=action).order_by("started_at"))
        assert [r.lease_epoch for r in runs] == sorted({r.lease_epoch for r in runs})
        for a, b in zip(runs, runs[1:]):
            assert a.ended_at is not None and a.ended_at <= b.started_at
    assert Run.objects.filter(status="running").count() == 0
    assert Event.objects.filter(type="run.claimed").count() == Run.objects.count()


