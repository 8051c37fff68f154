"""One round trip per action: a submission may claim the worker's next action (`claim_next`)."""
from __future__ import annotations


import pytest

from workcenter.models import Action, Run

from .conftest import checks_for, fence
from .support import error_of

pytestmark = pytest.mark.django_db


def completed(claim: dict) -> dict:
    criteria = claim["work_item"]["acceptance_criteria"]
    extra = {"review_decision": "approved"} if claim["action"]["type"] == "review" else {}
    return {"outcome": "completed", "summary": "done", "evidence": ["did it"],
            "acceptance_checks": checks_for(criteria), **extra}


def submit(api, claim: dict, body: dict):
    return api.post(f"/runs/{claim['run']['id']}/submit", {**fence(claim), **body})


def test_a_submission_claims_the_next_action_in_the_same_request(api, tmp_path):
    # given a linear item (triage, implement, review, deliver) and its first claim
    api.create(title="Chain", work_item_type="software-change", acceptance_criteria=["works"], work_dir=str(tmp_path))
    claim = api.claim("boot-N", lease_ms=30_000)
    stages = [claim["action"]["stage_id"]]
    while True:
        # when each submission asks for the next claim
        r = submit(api, claim, {**completed(claim), "claim_next": {"owner_boot_id": "boot-N", "lease_ms": 20_000}})
        assert r.status_code == 200, r.content
        body = r.json()
        # then the submission is committed, and the next claim comes with it, shaped as a claim
        assert body["run"]["status"] == "completed" and body["action"]["status"] == "completed"
        following = body["next"]
        if following is None:
            break
        assert set(following) == {"work_item", "action", "run", "dependencies"}
        assert following["run"]["owner_boot_id"] == "boot-N" and following["run"]["status"] == "running"
        assert following["action"]["current_run_id"] == following["run"]["id"]
        stored = Run.objects.get(pk=following["run"]["id"])
        assert (stored.expires_at - stored.started_at).total_seconds() == pytest.approx(20, abs=0.01)
        claim = following
        stages.append(claim["action"]["stage_id"])
    # every stage was claimed through a submission but the first; the last found nothing
    assert stages == ["triage", "implement", "review", "deliver"]
    assert api.claim("boot-N") is None


def test_without_claim_next_the_answer_says_next_null(api):
    api.create(title="Plain")
    claim = api.claim()
    body = api.submit(claim, **completed(claim))
    assert body["next"] is None
    assert Action.objects.filter(status="running").count() == 0  # nothing claimed


def test_claim_next_on_a_stale_fence_claims_nothing(api):
    # given two ready items and a claim whose fence is then broken
    api.create(title="First")
    api.create(title="Second")
    claim = api.claim("boot-S")
    runs = Run.objects.count()
    # when the submission carries a wrong epoch and asks for the next claim
    r = api.post(f"/runs/{claim['run']['id']}/submit", {
        "owner_boot_id": "boot-S", "lease_epoch": claim["run"]["lease_epoch"] + 1, **completed(claim),
        "claim_next": {"owner_boot_id": "boot-S"}})
    # then it is refused as stale, and no claim was made
    error_of(r, 409, "stale_run")
    assert Run.objects.count() == runs
    assert Action.objects.filter(status="ready").count() == 1


def test_claim_next_is_validated_like_a_claim(api):
    api.create(title="Bad next")
    claim = api.claim()
    for bad in ({"owner_boot_id": ""}, {"owner_boot_id": "b", "lease_ms": 0}, {"owner_boot_id": "b", "x": 1}, "b"):
        r = submit(api, claim, {**completed(claim), "claim_next": bad})
        assert r.status_code == 422, (bad, r.content)
        assert "claim_next" in r.json()["message"]
    assert Run.objects.get(pk=claim["run"]["id"]).status == "running"  # nothing was done
