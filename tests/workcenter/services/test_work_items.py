"""User operations (DOMAIN §8): create, start, update, cancel, guidance, retry."""
import pytest

from tests.conftest import completed, make_graph
from workcenter import services
from workcenter.errors import InvalidInput, InvalidState, RevisionConflict
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.domain import workflows


# --- create --------------------------------------------------------------------------------------

def test_work_item_create_started_planning_item(store):
    item = store.create(criteria=[" a ", "", "b"])
    assert item.status == "ready" and item.revision == 1
    assert item.acceptance_criteria == ["a", "b"]
    assert item.workflow_template == "ai-planned" and item.workflow_snapshot["planning_mode"] == "ai"
    (action,) = store.actions(item.pk)
    assert action.type == "triage" and action.sequence == 1 and item.current_action_id == action.pk
    ev = Event.objects.get(work_item=item)
    assert ev.type == "work_item.created" and ev.data == {"status": "ready"} and ev.action_id == action.pk


def test_work_item_create_draft(store):
    item = store.create(start=False)
    assert item.status == "draft" and store.actions(item.pk) == []
    ev = Event.objects.get(work_item=item)
    assert ev.data == {"status": "draft"} and ev.action_id is None


@pytest.mark.parametrize("work_dir", ["", "   ", None, 42, "/definitely/not/here"])
def test_work_item_create_bad_work_dir_writes_nothing(store, work_dir):
    with pytest.raises(InvalidInput) as exc:
        store.create(work_dir=work_dir)
    assert "workDir" in str(exc.value)
    assert WorkItem.objects.count() == 0 and Action.objects.count() == 0 and Event.objects.count() == 0


def test_work_item_create_canonicalises_work_dir(store, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    item = store.create(work_dir=str(link) + "/")
    assert item.work_dir == str(real) and item.workspace_key == str(real)


@pytest.mark.parametrize("field", ["title", "goal"])
def test_work_item_create_requires_title_and_goal(store, field):
    with pytest.raises(InvalidInput) as exc:
        store.create(**{field: "  "})
    assert exc.value.extra["errors"][0]["field"] == field
    assert WorkItem.objects.count() == 0


def test_work_item_create_untrusted_workflow_is_ignored(store):
    item = services.work_item_create(title="t", goal="g", workflow=workflows.default_workflows()[0], trusted=False,
                                     now=store.now())
    assert item.workflow_template == "ai-planned"


def test_work_item_create_requested_template_type(store):
    item = store.create(work_item_type="software-change")
    assert item.workflow_template == "ai-planned"
    assert [s["id"] for s in item.workflow_snapshot["stages"]] == ["triage", "implement", "review", "deliver"]


def test_work_item_create_duplicate_id(store):
    store.create(id="integration-item")
    with pytest.raises(InvalidState):
        store.create(id="integration-item")
    assert WorkItem.objects.count() == 1


def test_work_item_create_reusable_context(store, tmp_path):
    first = store.linear(work_dir=str(tmp_path), title="First")
    for _ in range(4):
        c = store.claim()
        store.complete(c, review_decision="approved")
    assert store.item(first.pk).status == "done"
    second = store.create(work_dir=str(tmp_path) + "/")
    ctx = Action.objects.get(pk=second.current_action_id).context
    assert len(ctx) == 4 and ctx[0]["source_title"] == "First" and ctx[0]["type"] == "triage"
    third = store.create(work_dir=str(tmp_path), reuse_memory=False)
    assert Action.objects.get(pk=third.current_action_id).context == []


# --- start ---------------------------------------------------------------------------------------

def test_work_item_start(store):
    item = store.create(start=False)
    item = services.work_item_start(item_id=item.pk, now=store.now())
    assert item.status == "ready" and item.current_action_id
    assert Event.objects.filter(work_item=item).last().type == "work_item.started"
    # idempotent while the current action is ready
    services.work_item_start(item_id=item.pk, now=store.now())
    assert Event.objects.filter(work_item=item).count() == 2 and len(store.actions(item.pk)) == 1


@pytest.mark.parametrize("status,words", [("done", "is done: only a draft can be started"),
                                          ("cancelled", "is cancelled: only a draft can be started"),
                                          ("waiting", "must be resumed with retry"),
                                          ("needs_attention", "must be resumed with retry")])
def test_work_item_start_refusals(store, status, words):
    item = store.create(start=False)
    WorkItem.objects.filter(pk=item.pk).update(status=status)
    with pytest.raises(InvalidState) as exc:
        services.work_item_start(item_id=item.pk, now=store.now())
    assert words in str(exc.value)


def test_unknown_item_is_not_found(store):
    from workcenter.errors import NotFound
    for fn in (services.work_item_start, services.work_item_cancel):
        with pytest.raises(NotFound) as exc:
            fn(item_id="missing", now=store.now())
        assert "no work item has the id missing" in str(exc.value)


# --- update --------------------------------------------------------------------------------------

def test_work_item_update_title_only_is_not_a_contract_change(store):
    item = store.linear()
    c = store.claim()
    item = services.work_item_update(item_id=item.pk, patch={"title": "New", "goal": "Do the thing"}, now=store.now())
    assert item.revision == 1 and item.title == "New"
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "work_item.updated" and ev.data == {"revision": 1, "changed_fields": ["title", "goal"]}
    assert Run.objects.get(pk=c.run.pk).status == "running"


def test_work_item_update_contract_change_retriages(store):
    item = store.linear(criteria=["a"])
    store.complete(store.claim())
    c = store.claim()
    item = services.work_item_update(item_id=item.pk, patch={"acceptance_criteria": ["a", "b"]}, now=store.now())
    assert item.revision == 2 and item.status == "ready"
    run = Run.objects.get(pk=c.run.pk)
    assert run.status == "superseded" and run.error == "WorkItem contract changed while this Run was active"
    assert Action.objects.get(pk=c.action.pk).status == "superseded"
    new = Action.objects.get(pk=item.current_action_id)
    assert new.type == "triage" and new.contract_revision == 2 and new.sequence == 3
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "workflow.retriaged" and ev.data == {"revision": 2, "changed_fields": ["acceptance_criteria"]}
    assert ev.action_id == new.pk


def test_work_item_update_draft_starts(store):
    item = store.create(start=False)
    item = services.work_item_update(item_id=item.pk, patch={"goal": "other"}, now=store.now())
    assert item.status == "ready" and item.current_action_id


def test_work_item_update_graph_supersedes_failed_actions(store):
    # DEV-6 + DEV-2: every running run and failed action of the old plan is superseded
    item = store.planned([{"id": "a", "objective": "o", "depends_on_action_ids": []},
                          {"id": "b", "objective": "o", "depends_on_action_ids": []}])
    ca, cb = store.claim(), store.claim()
    store.submit(ca, {"outcome": "failed", "error": "x"})
    services.work_item_update(item_id=item.pk, patch={"goal": "new"}, now=store.now())
    statuses = {a.effective_stage_id: a.status for a in store.actions(item.pk) if a.sequence <= 3}
    assert statuses == {"triage": "completed", "a": "superseded", "b": "superseded"}
    assert Run.objects.get(pk=cb.run.pk).status == "superseded"
    # then a new triage with a new plan runs: DEV-1 canonical resolution lets the new plan proceed
    c = store.claim()
    assert c.action.type == "triage"
    store.submit(c, completed([], plan={"work_item_type": "analysis", "actions": [
        {"id": "a", "objective": "o"}, {"id": "b", "objective": "o"}]}))
    assert store.item(item.pk).status == "ready"
    store.complete(store.claim())
    store.complete(store.claim())
    assert store.item(item.pk).status == "done"


@pytest.mark.parametrize("status", ["done", "cancelled"])
def test_work_item_update_terminal_refused(store, status):
    item = store.create(start=False)
    WorkItem.objects.filter(pk=item.pk).update(status=status)
    with pytest.raises(InvalidState) as exc:
        services.work_item_update(item_id=item.pk, patch={"goal": "x"}, now=store.now())
    assert "its contract can no longer be edited" in str(exc.value)


def test_work_item_update_expected_revision(store):
    item = store.create()
    with pytest.raises(RevisionConflict):
        services.work_item_update(item_id=item.pk, patch={"goal": "x"}, expected_revision=7, now=store.now())
    assert store.item(item.pk).goal == "Do the thing"


# --- cancel --------------------------------------------------------------------------------------

def test_work_item_cancel_graph_ends_every_running_run(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a"]}])
    ca, cb = store.claim(), store.claim()
    item = services.work_item_cancel(item_id=item.pk, now=store.now())
    assert (item.status, item.current_action_id, item.current_run_id) == ("cancelled", None, None)
    for c in (ca, cb):
        run = Run.objects.get(pk=c.run.pk)
        assert run.status == "cancelled" and run.error == "WorkItem was cancelled"
    assert {a.status for a in store.actions(item.pk)} == {"cancelled"}
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "work_item.cancelled" and ev.data == {} and ev.action_id is None
    # cancelling again is a no-op without event
    n = Event.objects.count()
    services.work_item_cancel(item_id=item.pk, now=store.now())
    assert Event.objects.count() == n
    # recovery finds nothing to resurrect
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 0


def test_work_item_cancel_done_refused(store):
    item = make_graph(store, [{"id": "a"}])
    store.complete(store.claim())
    with pytest.raises(InvalidState) as exc:
        services.work_item_cancel(item_id=item.pk, now=store.now())
    assert "cannot be cancelled" in str(exc.value)


# --- guidance ------------------------------------------------------------------------------------

def test_work_item_guide_linear_inserts_copy(store):
    item = store.linear()
    c = store.claim()
    item = services.work_item_guide(item_id=item.pk, guidance=" focus on tests ", action_id=c.action.pk,
                                     revision=1, now=store.now())
    old = Action.objects.get(pk=c.action.pk)
    new = Action.objects.get(pk=item.current_action_id)
    assert old.status == "superseded" and Run.objects.get(pk=c.run.pk).status == "superseded"
    assert Run.objects.get(pk=c.run.pk).error == "Action restarted after user guidance"
    assert new.type == old.type and new.sequence == 2 and new.status == "ready"
    assert new.context[-1] == {"type": "guidance", "role": "user", "summary": "focus on tests", "evidence": []}
    assert "focus on tests" in new.instruction
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "action.guidance_added" and ev.data == {"guidance": "focus on tests"} and ev.action_id == new.pk


def test_work_item_guide_graph_resets_in_place(store):
    # DEV-5: same action id, dependencies and mode kept, the rest of the plan survives
    item = store.planned([{"id": "a", "objective": "o", "workspace_mode": "read"}, {"id": "b", "objective": "o"}])
    c = store.claim()
    n = Action.objects.filter(work_item=item).count()
    item = services.work_item_guide(item_id=item.pk, guidance="more", action_id=c.action.pk, revision=1,
                                    now=store.now())
    a = Action.objects.get(pk=c.action.pk)
    assert item.current_action_id == a.pk and item.status == "ready"
    assert a.status == "ready" and a.workspace_mode == "read" and a.lease_epoch == 2 and a.attempt == 0
    assert a.context[-1]["type"] == "guidance"
    assert Action.objects.filter(work_item=item).count() == n
    store.complete(store.claim())
    store.complete(store.claim())
    assert store.item(item.pk).status == "done"


def test_work_item_guide_refusals(store):
    item = store.linear()
    with pytest.raises(InvalidInput) as exc:
        services.work_item_guide(item_id=item.pk, guidance=" ", action_id=item.current_action_id, revision=1)
    assert "guidance or attachments are required" in str(exc.value)
    with pytest.raises(InvalidInput) as exc:
        services.work_item_guide(item_id=item.pk, guidance="x", action_id=None, revision=1)
    assert "actionId and revision are required" in str(exc.value)
    with pytest.raises(RevisionConflict) as exc:
        services.work_item_guide(item_id=item.pk, guidance="x", action_id=item.current_action_id, revision=2)
    assert "the stage changed before your guidance" in str(exc.value)
    store.submit(store.claim(), {"outcome": "failed", "error": "x"})
    with pytest.raises(InvalidState) as exc:
        services.work_item_guide(item_id=item.pk, guidance="x", action_id=item.current_action_id, revision=1)
    assert "guidance reaches only a stage that is ready or running" in str(exc.value)


def test_work_item_guide_attachment_summary(store):
    item = store.linear()
    services.work_item_guide(item_id=item.pk, guidance="", action_id=item.current_action_id, revision=1,
                             attachments=[{"id": "f1", "name": "a.png"}], now=store.now())
    item = store.item(item.pk)
    assert item.attachments == [{"id": "f1", "name": "a.png"}]
    ev = Event.objects.filter(work_item=item).last()
    assert ev.data["guidance"] == "The user added 1 attachment(s) as additional context for this Action."


# --- retry ---------------------------------------------------------------------------------------

def test_work_item_retry_linear_from_needs_attention(store):
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "failed", "error": "bad", "summary": "tried"})
    item = services.work_item_retry(item_id=item.pk, now=store.now())
    new = Action.objects.get(pk=item.current_action_id)
    assert item.status == "ready" and new.pk != c.action.pk and new.sequence == 2
    assert Action.objects.get(pk=c.action.pk).status == "failed"
    assert new.context[-1]["summary"] == "tried" and new.context[-1]["answer"] is None
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "work_item.retried" and ev.data == {} and ev.action_id == new.pk


def test_work_item_retry_linear_waiting_requires_answer(store):
    item = store.linear()
    store.submit(store.claim(), {"outcome": "waiting", "waiting_reason": "which?"})
    with pytest.raises(InvalidInput) as exc:
        services.work_item_retry(item_id=item.pk, answer="  ", now=store.now())
    assert "answer is required" in str(exc.value)
    item = services.work_item_retry(item_id=item.pk, answer="this one", now=store.now())
    new = Action.objects.get(pk=item.current_action_id)
    assert "User answer: this one" in new.instruction and "Waiting reason: which?" in new.instruction


@pytest.mark.parametrize("status", ["draft", "ready", "running", "done", "cancelled"])
def test_work_item_retry_wrong_status(store, status):
    item = store.create(start=False)
    WorkItem.objects.filter(pk=item.pk).update(status=status)
    with pytest.raises(InvalidState) as exc:
        services.work_item_retry(item_id=item.pk, now=store.now())
    assert "only an item that is waiting or needs attention can be retried" in str(exc.value)
