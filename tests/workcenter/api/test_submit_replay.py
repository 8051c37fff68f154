"""POST /runs/{id}/submit sent again after it was applied (the answer was lost on the way back):
200 with the applied run, action and item, nothing written; `next` the claim the lost answer
carried (its worker never saw it), else a new one."""
from __future__ import annotations

import pytest

from tests.conftest import item_snapshot
from workcenter.models import Event, Run

from .conftest import checks_for, fence

pytestmark = pytest.mark.django_db


def _completed(claim: dict, **extra) -> dict:
    return {**fence(claim), "outcome": "completed", "summary": "done", "evidence": ["did it"],
            "acceptance_checks": checks_for(claim["work_item"]["acceptance_criteria"]), **extra}


def test_a_submission_sent_again_answers_as_applied(api):
    # given a claimed triage whose submission was applied
    item = api.create(title="Replay", work_item_type="software-change", acceptance_criteria=["works"])
    claim = api.claim("boot-R")
    run_id = claim["run"]["id"]
    first = api.post(f"/runs/{run_id}/submit", _completed(claim))
    assert first.status_code == 200, first.content
    before = item_snapshot(item["id"])
    events = Event.objects.count()
    # when the worker sends it again (its answer never arrived)
    again = api.post(f"/runs/{run_id}/submit", _completed(claim))
    # then it is answered as applied, in the same shape, and nothing was written
    assert again.status_code == 200, again.content
    body = again.json()
    assert set(body) == set(first.json()) == {"run", "action", "work_item", "next"}
    assert body["run"] == first.json()["run"]
    assert body["action"]["status"] == "completed" and body["work_item"]["id"] == item["id"]
    assert body["next"] is None
    assert item_snapshot(item["id"]) == before and Event.objects.count() == events


def test_a_resubmission_with_another_outcome_answers_with_what_was_applied(api):
    api.create(title="Replay", work_item_type="software-change", acceptance_criteria=["works"])
    claim = api.claim("boot-R")
    run_id = claim["run"]["id"]
    assert api.post(f"/runs/{run_id}/submit", _completed(claim)).status_code == 200
    again = api.post(f"/runs/{run_id}/submit", {**fence(claim), "outcome": "failed", "error": "no"})
    assert again.status_code == 200, again.content
    assert again.json()["run"]["status"] == "completed" and again.json()["run"]["error"] is None
    assert Run.objects.get(pk=run_id).status == "completed"


def test_a_resubmission_with_claim_next_answers_the_claim_the_lost_answer_carried(api):
    # given a submission with claim_next whose answer (and the next claim in it) was lost
    api.create(title="One", work_item_type="software-change", acceptance_criteria=["works"])
    claim = api.claim("boot-R")
    run_id = claim["run"]["id"]
    claim_next = {"owner_boot_id": "boot-R", "lease_ms": 30_000}
    lost = api.post(f"/runs/{run_id}/submit", {**_completed(claim), "claim_next": claim_next})
    assert lost.status_code == 200 and lost.json()["next"] is not None
    events = Event.objects.count()
    # when it comes again: the same next claim, no second one
    again = api.post(f"/runs/{run_id}/submit", {**_completed(claim), "claim_next": claim_next})
    assert again.status_code == 200, again.content
    assert again.json()["next"]["run"] == lost.json()["next"]["run"]
    assert Run.objects.filter(status="running").count() == 1 and Event.objects.count() == events


def test_a_resubmission_with_claim_next_claims_afresh_when_the_lost_answer_had_none(api):
    # given an applied submission without claim_next, and a second item claimable since
    api.create(title="One", work_item_type="software-change", acceptance_criteria=["works"])
    claim = api.claim("boot-R")
    run_id = claim["run"]["id"]
    assert api.post(f"/runs/{run_id}/submit", _completed(claim)).status_code == 200
    # when it comes again with claim_next: the next action (the item's implement stage) is claimed now
    again = api.post(f"/runs/{run_id}/submit",
                     {**_completed(claim), "claim_next": {"owner_boot_id": "boot-R", "lease_ms": 30_000}})
    assert again.status_code == 200, again.content
    following = again.json()["next"]
    assert following is not None and following["run"]["owner_boot_id"] == "boot-R"
    assert following["run"]["id"] != run_id
    assert Run.objects.filter(status="running").count() == 1


def test_a_renewed_run_is_not_taken_for_the_lost_claim(api):
    # the owner's only running run was renewed: its worker has it, so a new claim is made instead
    api.create(title="One", work_item_type="software-change", acceptance_criteria=["works"])
    api.create(title="Two", work_item_type="software-change", acceptance_criteria=["works"])
    claim = api.claim("boot-R")
    assert api.post(f"/runs/{claim['run']['id']}/submit", _completed(claim)).status_code == 200
    held = api.claim("boot-R")
    assert api.post(f"/runs/{held['run']['id']}/renew", {**fence(held), "lease_ms": 30_000}).status_code == 200
    again = api.post(f"/runs/{claim['run']['id']}/submit",
                     {**_completed(claim), "claim_next": {"owner_boot_id": "boot-R", "lease_ms": 30_000}})
    assert again.status_code == 200, again.content
    assert again.json()["next"]["run"]["id"] not in (held["run"]["id"], claim["run"]["id"])


def test_an_interrupted_run_is_still_stale(api):
    api.create(title="Stale", work_item_type="software-change", acceptance_criteria=["works"])
    claim = api.claim("boot-R")
    run_id = claim["run"]["id"]
    r = api.post(f"/runs/{run_id}/interrupt", {**fence(claim), "reason": "stop"})
    assert r.status_code == 200 and r.json()["interrupted"] is True
    again = api.post(f"/runs/{run_id}/submit", _completed(claim))
    assert again.status_code == 409 and again.json()["code"] == "stale_run"
