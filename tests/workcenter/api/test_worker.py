"""Worker protocol (API.md §3): claims, leases, submissions, interruption, recovery, integration."""
from __future__ import annotations

import pytest

from workcenter.clock import iso_ms
from workcenter.models import Action, Event, Run, WorkItem

from .conftest import ISO_MS, checks_for, fence
from .support import error_of

pytestmark = pytest.mark.django_db


# --- the whole flow ----------------------------------------------------------------------------

def test_full_worker_flow_over_http(api, tmp_path):
    # given a linear software-change item: triage → implement → review → deliver
    item = api.create(title="Flow", work_item_type="software-change", acceptance_criteria=["works"],
                      work_dir=str(tmp_path))
    seen = []
    while True:
        # when a worker claims, reports progress, renews and submits
        r = api.post("/claims", {"owner_boot_id": "boot-W", "lease_ms": 30_000})
        if r.status_code == 204:
            assert r.content == b""
            break
        assert r.status_code == 201, r.content
        claim = r.json()
        assert set(claim) == {"work_item", "action", "run", "dependencies"}
        assert claim["dependencies"] == []
        run, action = claim["run"], claim["action"]
        assert run["status"] == "running" and run["owner_boot_id"] == "boot-W"
        assert action["status"] == "running" and action["current_run_id"] == run["id"]
        assert action["lease_epoch"] == run["lease_epoch"] == 1
        assert claim["work_item"]["status"] == "running"
        assert claim["work_item"]["current_run_id"] == run["id"]
        seen.append(action["stage_id"])

        r = api.post(f"/runs/{run['id']}/progress", {**fence(claim), "response": "half way", "loop_count": 2,
                                                      "total_tokens": 100, "checkpoint": {"tool_events": []}})
        assert r.status_code == 200, r.content
        progressed = r.json()["run"]
        assert progressed["response"] == "half way"
        assert progressed["loop_count"] == 2 and progressed["total_tokens"] == 100
        assert progressed["progress_revision"] == run["progress_revision"] + 1

        r = api.post(f"/runs/{run['id']}/renew", {**fence(claim), "lease_ms": 120_000})
        assert r.status_code == 200, r.content
        assert ISO_MS.match(r.json()["expires_at"])
        assert r.json()["expires_at"] > run["expires_at"]

        extra = {"review_decision": "approved"} if action["type"] == "review" else {}
        result = api.complete(claim, loop_count=3, total_tokens=150, **extra)
        assert set(result) == {"run", "action", "work_item", "next"} and result["next"] is None
        assert result["run"]["status"] == "completed", result["run"]["error"]
        assert result["run"]["loop_count"] == 3
        assert result["action"]["status"] == "completed"
        assert result["action"]["execution_stats"]["total_tokens"] == 150

    # then every stage ran once and the item is done
    assert seen == ["triage", "implement", "review", "deliver"]
    detail = api.get(f"/work-items/{item['id']}").json()
    assert detail["status"] == "done"
    assert detail["current_action_id"] is None
    assert [a["status"] for a in detail["actions"]] == ["completed"] * 4
    assert detail["execution_stats"]["total_tokens"] == 4 * 150
    assert detail["execution_stats"]["loop_count"] == 4 * 3
    types = [e["type"] for e in reversed(detail["events"])]
    assert types[0] == "work_item.created" and types[-1] == "work_item.completed"
    assert types.count("run.claimed") == 4 and types.count("action.completed") == 3
    assert {e["actor"] for e in detail["events"] if e["type"] != "work_item.created"} == {"worker:boot-W"}
    summary = api.get("/work-items").json()["items"][0]
    assert summary["execution_stats"]["total_tokens"] == 600
    assert summary["action_counts"] == {"completed": 4}


def test_claim_when_nothing_is_claimable_is_204(api):
    r = api.post("/claims", {"owner_boot_id": "b"})
    assert r.status_code == 204
    assert r.content == b""


def test_claim_input_is_validated(api):
    body = error_of(api.post("/claims", {}), 422, "invalid_input")
    assert [e["field"] for e in body["extra"]["errors"]] == ["owner_boot_id"]
    error_of(api.post("/claims", {"owner_boot_id": ""}), 422, "invalid_input")
    error_of(api.post("/claims", {"owner_boot_id": "b", "lease_ms": 0}), 422, "invalid_input")


def test_submission_validation_failure_is_a_failed_run_not_an_http_error(api):
    api.create(work_item_type="software-change")
    claim = api.claim()
    # completed without evidence
    result = api.submit(claim, outcome="completed", summary="trust me")
    assert result["run"]["status"] == "failed"
    assert "concrete evidence" in result["run"]["error"]
    assert result["work_item"]["status"] == "needs_attention"


def test_submit_unknown_outcome_is_422_and_changes_nothing(api):
    api.create()
    claim = api.claim()
    body = api.submit(claim, expect=422, outcome="finished-ish")
    assert body["code"] == "invalid_input"
    assert "Invalid" in body["message"] and "outcome" in body["message"]
    assert [e["field"] for e in body["extra"]["errors"]] == ["outcome"]
    assert Run.objects.get().status == "running"


def test_submit_waiting_without_reason_is_422(api):
    api.create()
    claim = api.claim()
    body = api.submit(claim, expect=422, outcome="waiting")
    assert "waiting outcome requires waitingReason" in body["message"]
    assert [e["field"] for e in body["extra"]["errors"]] == ["waiting_reason"]
    assert Run.objects.get().status == "running"


def test_submit_contract_patch_with_non_list_criteria_is_422(api):
    api.create()
    claim = api.claim()
    body = api.submit(claim, expect=422, outcome="completed", evidence=["x"],
                      contract_patch={"acceptance_criteria": "not a list"})
    assert body["code"] == "invalid_input"
    assert Run.objects.get().status == "running"


def test_submit_missing_fence_is_422(api):
    api.create()
    claim = api.claim()
    r = api.post(f"/runs/{claim['run']['id']}/submit", {"outcome": "failed"})
    body = error_of(r, 422, "invalid_input")
    assert {e["field"] for e in body["extra"]["errors"]} == {"owner_boot_id", "lease_epoch"}


def test_triage_contract_patch_and_waiting_fields_reach_the_run(api):
    item = api.create(acceptance_criteria=["old"])
    claim = api.claim()
    result = api.submit(claim, outcome="waiting", waiting_reason="Need input", response="asked",
                        input_tokens="junk", tool_count=-4)
    run = result["run"]
    assert run["status"] == "waiting" and run["waiting_reason"] == "Need input" and run["response"] == "asked"
    assert run["input_tokens"] == 0 and run["tool_count"] == 0
    assert result["work_item"]["status"] == "waiting"
    assert result["work_item"]["id"] == item["id"]


# --- fencing (409 stale_run) -------------------------------------------------------------------

def test_worker_calls_on_an_unknown_run_are_409_stale_run(api):
    f = {"owner_boot_id": "b", "lease_epoch": 1}
    for path, extra in [("renew", {}), ("progress", {}), ("submit", {"outcome": "completed"}),
                        ("integration", {"workspace": {}}), ("integration/reservation", {}),
                        ("integration/finish", {"token": "t", "workspace": {}}),
                        ("integration/rollback", {"token": "t"})]:
        body = error_of(api.post(f"/runs/no-such-run/{path}", {**f, **extra}), 409, "stale_run")
        assert "stale" in body["message"], path
    # interrupt answers false instead
    r = api.post("/runs/no-such-run/interrupt", f)
    assert r.status_code == 200 and r.json() == {"interrupted": False}


def test_wrong_boot_or_epoch_is_409_stale_run(api):
    api.create()
    claim = api.claim()
    rid = claim["run"]["id"]
    for f in ({"owner_boot_id": "other", "lease_epoch": 1}, {"owner_boot_id": "boot-A", "lease_epoch": 0}):
        for path, extra in [("renew", {}), ("progress", {"response": "x"}), ("submit", {"outcome": "failed"})]:
            body = error_of(api.post(f"/runs/{rid}/{path}", {**f, **extra}), 409, "stale_run")
            assert "stale" in body["message"]
        assert api.post(f"/runs/{rid}/interrupt", f).json() == {"interrupted": False}
    assert Run.objects.get().status == "running"
    assert Run.objects.get().response == ""


def test_expired_lease_is_409_stale_run(api, frozen_clock):
    api.create()
    claim = api.claim(lease_ms=1_000)
    frozen_clock.advance(1_001)
    rid = claim["run"]["id"]
    body = error_of(api.post(f"/runs/{rid}/renew", fence(claim)), 409, "stale_run")
    assert "expired" in body["message"]
    error_of(api.post(f"/runs/{rid}/progress", fence(claim)), 409, "stale_run")
    body = api.submit(claim, expect=409, outcome="failed")
    assert "stale" in body["message"] and "expired" in body["message"]
    # an expired run may still close itself
    assert api.post(f"/runs/{rid}/interrupt", fence(claim)).json() == {"interrupted": True}


def test_finished_run_submitting_again_answers_as_applied_and_other_fences_are_409(api):
    # the same fence again (the answer was lost): the applied submission, nothing new
    api.create()
    claim = api.claim()
    api.submit(claim, outcome="failed", error="boom")
    body = api.submit(claim, outcome="failed")
    assert body["run"]["status"] == "failed" and body["run"]["error"] == "boom"
    # another fence of the finished run: stale
    run = claim["run"]
    r = api.post(f"/runs/{run['id']}/submit", {"owner_boot_id": "boot-other", "lease_epoch": run["lease_epoch"],
                                                "outcome": "failed"})
    assert r.status_code == 409 and r.json()["code"] == "stale_run"
    assert "finished" in r.json()["message"]


# --- interrupt and recovery --------------------------------------------------------------------

def test_interrupt_puts_the_action_back(api):
    item = api.create()
    claim = api.claim()
    r = api.post(f"/runs/{claim['run']['id']}/interrupt",
                 {**fence(claim), "reason": "shutting down", "final_progress": {"response": "partial"}})
    assert r.status_code == 200 and r.json() == {"interrupted": True}
    run = Run.objects.get()
    assert run.status == "interrupted" and run.error == "shutting down" and run.response == "partial"
    detail = api.get(f"/work-items/{item['id']}").json()
    assert detail["status"] == "ready" and detail["actions"][0]["status"] == "ready"
    event = detail["events"][0]
    assert event["type"] == "run.interrupted"
    assert event["data"] == {"retryable": True, "reason": "shutting down"}
    assert event["actor"] == "worker:boot-A"
    # a second interrupt finds nothing to stop
    assert api.post(f"/runs/{claim['run']['id']}/interrupt", fence(claim)).json() == {"interrupted": False}


def test_recoveries_interrupt_runs_of_other_boots(api):
    item = api.create()
    api.claim(boot="dead-boot")
    r = api.post("/recoveries", {"owner_boot_id": "fresh-boot"})
    assert r.status_code == 200
    assert r.json() == {"recovered": 1}
    event = Event.objects.filter(work_item_id=item["id"]).latest("id")
    assert event.type == "run.interrupted" and event.actor == "recovery:fresh-boot"
    assert api.post("/recoveries", {"owner_boot_id": "fresh-boot"}).json() == {"recovered": 0}
    error_of(api.post("/recoveries", {}), 422, "invalid_input")


# --- integration and reservations --------------------------------------------------------------

PREPARED = {"path": "/tmp/wt", "integration": {"status": "prepared", "commits": ["abc"]}}


def _reserved(api):
    item = api.create()
    claim = api.claim()
    rid = claim["run"]["id"]
    r = api.post(f"/runs/{rid}/integration", {**fence(claim), "workspace": PREPARED})
    assert r.status_code == 200, r.content
    action = r.json()["action"]
    assert action["workspace_mode"] == "integrate" and action["workspace"] == PREPARED
    r = api.post(f"/runs/{rid}/integration/reservation", {**fence(claim), "reservation_ms": 60_000})
    assert r.status_code == 200, r.content
    return item, claim, r.json()


def test_reservation_acquire_finish(api):
    item, claim, reservation = _reserved(api)
    rid = claim["run"]["id"]
    assert set(reservation) == {"token", "expires_at", "action"}
    assert ISO_MS.match(reservation["expires_at"])
    assert reservation["action"]["workspace"]["integration"]["reservation"]["token"] == reservation["token"]
    # the run's lease moved to the reservation's expiry
    assert iso_ms(Run.objects.get().expires_at) == reservation["expires_at"]
    # a wrong token is refused without changing the record
    wrong = {**fence(claim), "token": "nope", "workspace": {"path": "/tmp/wt", "integration": {"status": "finalized"}}}
    body = error_of(api.post(f"/runs/{rid}/integration/finish", wrong), 409, "stale_run")
    assert "lost its Run lease" in body["message"]
    # the right token finishes
    finalized = {"path": "/tmp/wt", "integration": {"status": "finalized"}}
    r = api.post(f"/runs/{rid}/integration/finish", {**fence(claim), "token": reservation["token"],
                                                     "workspace": finalized})
    assert r.status_code == 200, r.content
    assert r.json()["action"]["workspace"] == finalized
    # now nothing is prepared any more: acquiring again is refused
    error_of(api.post(f"/runs/{rid}/integration/reservation", fence(claim)), 409, "stale_run")


def test_reservation_rollback(api):
    _item, claim, reservation = _reserved(api)
    rid = claim["run"]["id"]
    r = api.post(f"/runs/{rid}/integration/rollback", {**fence(claim), "token": reservation["token"]})
    assert r.status_code == 200, r.content
    assert r.json()["action"]["workspace"] is None
    assert r.json()["action"]["workspace_mode"] == "integrate"
    error_of(api.post(f"/runs/{rid}/integration/rollback", {**fence(claim), "token": reservation["token"]}),
           409, "stale_run")


def test_live_reservation_refuses_cancel_update_guidance_and_interrupt(api):
    item, claim, _reservation = _reserved(api)
    iid = item["id"]
    for response in (
        api.post(f"/work-items/{iid}/cancel"),
        api.patch(f"/work-items/{iid}", {"goal": "changed"}),
        api.post(f"/work-items/{iid}/guidance", {"action_id": claim["action"]["id"], "revision": 1,
                                                 "guidance": "stop"}),
        api.post(f"/runs/{claim['run']['id']}/interrupt", fence(claim)),
    ):
        body = error_of(response, 409, "reservation_active")
        assert "integration finalization currently owns" in body["message"]
    assert WorkItem.objects.get().status == "running"
    assert Action.objects.get().status == "running"


def test_reservation_on_a_non_integration_action_is_409(api):
    api.create()
    claim = api.claim()
    body = error_of(api.post(f"/runs/{claim['run']['id']}/integration/reservation", fence(claim)), 409, "stale_run")
    assert "stale" in body["message"]


def test_integration_workspace_must_be_an_object(api):
    api.create()
    claim = api.claim()
    body = error_of(api.post(f"/runs/{claim['run']['id']}/integration", {**fence(claim), "workspace": "x"}),
                  422, "invalid_input")
    assert [e["field"] for e in body["extra"]["errors"]] == ["workspace"]


# --- dependencies of graph claims --------------------------------------------------------------

def _collect_then_judge(api) -> None:
    """An item whose triage planned two stages: collect, then judge (depends on collect)."""
    api.create(acceptance_criteria=["c1"])
    triage = api.claim()
    plan = {"work_item_type": "analysis", "actions": [
        {"id": "collect", "type": "research", "objective": "Collect facts"},
        {"id": "judge", "type": "analysis", "objective": "Judge", "depends_on_action_ids": ["collect"]},
    ]}
    result = api.complete(triage, plan=plan)
    assert result["run"]["status"] == "completed", result["run"]["error"]
    assert result["work_item"]["execution_mode"] == "graph"


def test_claim_carries_dependencies_of_graph_actions(api):
    _collect_then_judge(api)
    collect = api.claim()
    assert collect["action"]["stage_id"] == "collect"
    assert collect["dependencies"] == []
    assert collect["work_item"]["current_run_id"] is None  # graph items never point at a run
    api.complete(collect, summary="facts gathered", evidence=["notes.md", {"kind": "file", "label": "data.csv"}])
    # when
    judge = api.claim()
    # then
    assert judge["action"]["stage_id"] == "judge"
    [dep] = judge["dependencies"]
    assert dep["action_id"] == collect["action"]["id"]
    assert dep["stage_id"] == "collect" and dep["type"] == "research" and dep["status"] == "completed"
    assert dep["summary"] == "facts gathered"
    assert [e["label"] for e in dep["evidence"]] == ["notes.md", "data.csv"]
    assert dep["vp_id"] is None
    api.complete(judge, acceptance_checks=checks_for(["c1"]))
    assert api.get(f"/work-items/{judge['work_item']['id']}").json()["status"] == "done"


def test_claim_dependencies_come_from_the_detail_rows(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from workcenter import selectors

    # given a graph item whose first stage failed once (retryable) before it completed
    _collect_then_judge(api)
    first = api.claim()
    assert api.submit(first, outcome="retryable", error="flaky", summary="first try")["run"]["status"] == "retryable"
    second = api.claim()
    assert second["action"]["id"] == first["action"]["id"] and second["run"]["id"] != first["run"]["id"]
    api.complete(second, summary="second try", evidence=["n.md"])
    # when the dependent stage is claimed
    judge = api.claim()
    # then its dependency is the completed run's, exactly what the query path answers
    [dep] = judge["dependencies"]
    assert dep["summary"] == "second try" and dep["status"] == "completed"
    action = Action.objects.get(pk=judge["action"]["id"])
    expected = selectors.claim_dependencies(action, WorkItem.objects.get(pk=judge["work_item"]["id"]))
    assert [{**d, "evidence": [e["label"] for e in d["evidence"]]} for d in expected] == \
        [{**d, "evidence": [e["label"] for e in d["evidence"]]} for d in judge["dependencies"]]
    # and given the detail's rows, the dependencies cost no query
    detail = selectors.work_item_detail(judge["work_item"]["id"])
    with CaptureQueriesContext(connection) as captured:
        from_rows = selectors.claim_dependencies(action, detail["item"], actions=detail["actions"],
                                                 runs=detail["runs"])
    assert captured.captured_queries == []
    assert [d["summary"] for d in from_rows] == ["second try"]
