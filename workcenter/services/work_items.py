"""User operations on work items (DOMAIN §8): create, start, update, cancel, guidance, retry.

Each is one transaction, and each but the retry's preview writes. What the caller sends is
cleaned first, before anything is read (workcenter/domain/work_item_input.py); a work_dir is
checked against the allowed roots and resolved by workcenter/work_dirs.py.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError

from .. import db
from ..db.guards import ACTION_OPEN, ACTION_OPEN_OR_FAILED, ITEM_AS_READ, ITEM_AT_REVISION, RUN_RUNNING, Fence
from ..errors import InvalidInput, InvalidState, RevisionConflict
from ..event_types import EventType
from ..events import event_append
from ..models import ExecutionMode, OPEN_ACTION_STATUSES, Action, ActionStatus, Run, RunStatus, WorkItem, WorkItemStatus, new_id
from ..domain import normalize, planning, rules, workflows
from ..domain.work_item_input import (
    clean_answer,
    clean_answers,
    clean_criteria,
    clean_guidance,
    clean_item_id,
    clean_origin,
    clean_patch,
    clean_session_ids,
    clean_text,
    clean_workflow,
)
from ..work_dirs import MISSING, canonicalize_dir, resolve_work_dir
from . import common, graph
from .state_tokens import check_state_token, state_token
from .common import resolve_now, store_transaction

def work_item_create(
    *,
    title: Any,
    goal: Any,
    acceptance_criteria: Any = None,
    work_dir: Any = MISSING,
    start: bool | None = None,
    work_item_type: str | None = None,
    reuse_memory: bool | None = True,
    origin: Any = None,
    linked_session_ids: Any = None,
    session_context: Any = None,
    workflow: dict | None = None,
    trusted: bool = False,
    id: str | None = None,
    actor: str = "system",
    now: datetime | None = None,
) -> WorkItem:
    """Create an item (`draft`, or `ready` with its first action when started). Validation first:
    a refused create writes nothing (DOMAIN §8.1)."""
    title = clean_text(title, "title", "title is required")
    goal = clean_text(goal, "goal", "goal is required")
    criteria = clean_criteria(acceptance_criteria)
    real_dir = resolve_work_dir(work_dir)
    id = clean_item_id(id)
    if trusted and workflow is not None:
        snapshot = clean_workflow(workflow)
        template = snapshot.get("id") or "custom"
    else:
        snapshot = planning.planning_snapshot(workflows.default_workflows(), work_item_type)
        template = "ai-planned"
    start = True if start is None else bool(start)
    with store_transaction():
        now = resolve_now(now)
        if id is not None and WorkItem.objects.filter(pk=id).exists():
            raise InvalidState(f"WorkItem already exists: {id}", extra={"id": id})
        item = WorkItem(
            id=id or new_id(),
            title=title,
            goal=goal,
            acceptance_criteria=criteria,
            workflow_template=template,
            workflow_snapshot=snapshot,
            status=WorkItemStatus.DRAFT,
            work_dir=real_dir,
            workspace_key=real_dir,
            reuse_memory=reuse_memory is not False,
            origin=clean_origin(origin, trusted),
            linked_session_ids=clean_session_ids(linked_session_ids),
            session_context=normalize.normalize_session_context(session_context) if trusted and session_context else [],
            created_at=now,
            updated_at=now,
        )
        try:
            item.save(force_insert=True)
        except IntegrityError:
            raise InvalidState(f"WorkItem already exists: {item.pk}", extra={"id": item.pk}) from None
        action = None
        if start:
            action = _insert_initial(item, now)
            common.save_item_state(item, now, status=WorkItemStatus.READY, current_action_id=action.pk)
            graph.sync_claimable(item)
        event_append(work_item_id=item.pk, type=EventType.WORK_ITEM_CREATED, data={"status": item.status},
                     action_id=action.pk if action else None, actor=actor, now=now)
        return item


def _insert_initial(item: WorkItem, now: datetime, *, context: list | None = None) -> Action:
    if context is None:
        context = common.reusable_context(item.work_dir, item.pk) if item.reuse_memory else []
    fields = rules.action_fields(item, stage=common.initial_stage(item), context=context)
    return common.insert_action(item, fields, now)


def work_item_start(*, item_id: str, actor: str = "system", now: datetime | None = None) -> WorkItem:
    """draft → ready with the initial action (DOMAIN §8.2); idempotent while the current action is ready."""
    with store_transaction():
        now = resolve_now(now)
        item = common.lock_item(item_id)
        if item.status in (WorkItemStatus.DONE, WorkItemStatus.CANCELLED):
            raise InvalidState(f"the item is {_label(item.status)}: only a draft can be started")
        if item.current_action_id and Action.objects.filter(pk=item.current_action_id, status=ActionStatus.READY).exists():
            return item
        if item.status != WorkItemStatus.DRAFT:
            raise InvalidState(f"the item is {_label(item.status)}: it must be resumed with retry, not started")
        action = _insert_initial(item, now)
        common.save_item_state(item, now, status=WorkItemStatus.READY, current_action_id=action.pk,
                               guard=_status_guard(item, WorkItemStatus.DRAFT))
        graph.sync_claimable(item)
        event_append(work_item_id=item.pk, type=EventType.WORK_ITEM_STARTED, data={}, action_id=action.pk, actor=actor, now=now)
        return item


def _status_guard(item: WorkItem, status: str, *, at_revision: bool = False) -> Fence:
    """The item's row as it was read under the lock (`status`, and its revision): its final state
    write is a guarded update (DOMAIN §6; the row lock already excludes writers, the guard makes
    any slip loud)."""
    if at_revision:
        return ITEM_AT_REVISION.row(item.pk, status, item.revision)
    return ITEM_AS_READ.row(item.pk, status)


def _invalidate(item: WorkItem, now: datetime, *, action_status: str, run_status: str, reason: str,
                include_failed: bool = False) -> list[str]:
    """Open actions ⇒ action_status; every running run of the item ⇒ run_status [DEV-2]."""
    statuses = list(OPEN_ACTION_STATUSES) + ([ActionStatus.FAILED] if include_failed else [])
    ids = list(Action.objects.filter(work_item_id=item.pk, status__in=statuses).order_by("pk").values_list("pk", flat=True))
    runs = list(Run.objects.filter(work_item_id=item.pk, status=RunStatus.RUNNING).values_list("pk", flat=True))
    db.update(RUN_RUNNING.rows(runs), {"status": run_status, "ended_at": now, "error": reason})
    db.update((ACTION_OPEN_OR_FAILED if include_failed else ACTION_OPEN).rows(ids),
              {"status": action_status, "current_run_id": None, "updated_at": now, "claimable": False})
    return ids


def _open_actions(item: WorkItem) -> list[Action]:
    return list(Action.objects.filter(work_item_id=item.pk, status__in=OPEN_ACTION_STATUSES).order_by("pk"))


def work_item_update(
    *,
    item_id: str,
    patch: dict,
    expected_revision: int | None = None,
    actor: str = "system",
    now: datetime | None = None,
) -> WorkItem:
    """Patch title/goal/criteria/work_dir (DOMAIN §8.3). A contract change supersedes every open
    action and running run, bumps the revision and restarts from triage (`workflow.retriaged`)."""
    patch = clean_patch(patch)
    if "work_dir" in patch and patch["work_dir"] is not None:
        patch["work_dir"] = resolve_work_dir(patch["work_dir"])
    with store_transaction():
        now = resolve_now(now)
        item = common.lock_item(item_id)
        if item.status in (WorkItemStatus.DONE, WorkItemStatus.CANCELLED):
            raise InvalidState(f"the item is {_label(item.status)}: its contract can no longer be edited")
        if expected_revision is not None and expected_revision != item.revision:
            raise RevisionConflict(
                f"WorkItem revision changed: expected {expected_revision}, current {item.revision}",
                extra={"revision": item.revision},
            )
        changed_fields = list(patch.keys())
        new = {k: v for k, v in patch.items() if v is not None}
        contract_changed = (
            ("goal" in new and new["goal"] != item.goal)
            or ("work_dir" in new and new["work_dir"] != item.work_dir)
            or ("acceptance_criteria" in new and list(new["acceptance_criteria"]) != list(item.acceptance_criteria or []))
        )
        # the row as read under the lock: each write below is a guarded update on it
        guard = _status_guard(item, item.status, at_revision=True)
        for k, v in new.items():
            setattr(item, k, v)
        item.workspace_key = canonicalize_dir(item.work_dir)
        if not contract_changed:
            item.updated_at = now
            db.update(guard, {**new, "workspace_key": item.workspace_key, "updated_at": now})
            event_append(work_item_id=item.pk, type=EventType.WORK_ITEM_UPDATED,
                         data={"revision": item.revision, "changed_fields": changed_fields}, actor=actor, now=now)
            return item
        common.refuse_if_reserved(_open_actions(item), now)
        _invalidate(item, now, action_status=ActionStatus.SUPERSEDED, run_status=RunStatus.SUPERSEDED,
                    reason=rules.REASON_CONTRACT, include_failed=item.execution_mode == ExecutionMode.GRAPH)
        db.update(guard, {**new, "workspace_key": item.workspace_key, "revision": item.revision + 1})
        item.revision += 1
        guard = _status_guard(item, item.status, at_revision=True)
        action = _insert_initial(item, now, context=[])
        common.save_item_state(item, now, status=WorkItemStatus.READY, current_action_id=action.pk, guard=guard)
        graph.sync_claimable(item)
        event_append(work_item_id=item.pk, type=EventType.WORKFLOW_RETRIAGED,
                     data={"revision": item.revision, "changed_fields": changed_fields},
                     action_id=action.pk, actor=actor, now=now)
        return item


def _check_revision(item: WorkItem, expected_revision: int | None, expected_state_token: int | None) -> None:
    """The fences of a caller that saw the item at `expected_revision` and `expected_state_token`
    (services/state_tokens.py): checked under the item lock, in the transaction that then writes."""
    if expected_revision is not None and expected_revision != item.revision:
        raise RevisionConflict(
            f"WorkItem revision changed: expected {expected_revision}, current {item.revision}",
            extra={"revision": item.revision, "expected_revision": expected_revision},
        )
    check_state_token(item, expected_state_token)


def _with_reason(data: dict, reason: str | None) -> dict:
    return {**data, "reason": reason} if reason is not None else data


def work_item_cancel(*, item_id: str, actor: str = "system", now: datetime | None = None,
                     expected_revision: int | None = None, reason: str | None = None,
                     refuse_cancelled: bool = False, expected_state_token: int | None = None) -> WorkItem:
    """Any non-terminal status → cancelled; open actions and running runs cancelled (DOMAIN §8.4).

    `expected_revision` / `expected_state_token`: refuse (revision_conflict / state_changed) unless
    the item still has it; `reason`: kept in the event's data; `refuse_cancelled`: an already cancelled item is invalid_state instead
    of an unchanged success."""
    with store_transaction():
        now = resolve_now(now)
        item = common.lock_item(item_id)
        _check_revision(item, expected_revision, expected_state_token)
        if item.status == WorkItemStatus.DONE:
            raise InvalidState("the item is done: a finished item cannot be cancelled")
        if item.status == WorkItemStatus.CANCELLED:
            if refuse_cancelled:
                raise InvalidState("WorkItem is already cancelled")
            return item
        common.refuse_if_reserved(_open_actions(item), now)
        guard = _status_guard(item, item.status)
        _invalidate(item, now, action_status=ActionStatus.CANCELLED, run_status=RunStatus.CANCELLED,
                    reason=rules.REASON_CANCELLED)
        common.save_item_state(item, now, status=WorkItemStatus.CANCELLED, current_action_id=None, guard=guard)
        graph.sync_claimable(item)
        event_append(work_item_id=item.pk, type=EventType.WORK_ITEM_CANCELLED, data=_with_reason({}, reason),
                     actor=actor, now=now)
        return item


def work_item_guide(
    *,
    item_id: str,
    guidance: Any,
    action_id: Any,
    revision: Any,
    attachments: list | None = None,
    actor: str = "system",
    now: datetime | None = None,
) -> WorkItem:
    """Restart the current action with the user's guidance (DOMAIN §8.5): linear supersedes it and
    inserts a copy; graph resets it in place [DEV-5]."""
    text, new_attachments = clean_guidance(guidance, attachments, action_id, revision)
    with store_transaction():
        now = resolve_now(now)
        item = common.lock_item(item_id)
        if item.current_action_id != action_id or item.revision != revision:
            raise RevisionConflict("the stage changed before your guidance reached it; reload and try again",
                                   extra={"current_action_id": item.current_action_id, "revision": item.revision})
        if item.status not in (WorkItemStatus.READY, WorkItemStatus.RUNNING):
            raise InvalidState(f"the item is {_label(item.status)}: guidance reaches only a stage that is ready or running")
        previous = Action.objects.select_for_update().get(pk=item.current_action_id)
        if previous.status not in (ActionStatus.READY, ActionStatus.RUNNING):
            raise InvalidState("the item has no stage ready or running to take guidance")
        common.refuse_if_reserved(_open_actions(item), now)
        guard = _status_guard(item, item.status, at_revision=True)
        entry = {"type": "guidance", "role": "user", "summary": text, "evidence": []}
        context = list(previous.context or []) + [entry]
        replacement = rules.action_fields(item, previous=previous, context=context)
        if item.execution_mode == ExecutionMode.GRAPH:
            target = graph.graph_reset(item, previous.effective_stage_id, replacement, reason=rules.REASON_GUIDANCE,
                                       now=now)
        else:
            _invalidate(item, now, action_status=ActionStatus.SUPERSEDED, run_status=RunStatus.SUPERSEDED,
                        reason=rules.REASON_GUIDANCE)
            target = common.insert_action(item, replacement, now)
        extra = {"attachments": new_attachments} if attachments is not None else {}
        common.save_item_state(item, now, status=WorkItemStatus.READY, current_action_id=target.pk, guard=guard,
                               **extra)
        graph.sync_claimable(item)
        event_append(work_item_id=item.pk, type=EventType.ACTION_GUIDANCE_ADDED, data={"guidance": text},
                     action_id=target.pk, actor=actor, now=now)
        return item


def _retry_plan(item: WorkItem, answer: Any, now: datetime):
    """Shared by retry and its preview: checks, replacement and (graph) the reset plan."""
    _refuse_unless_retryable(item)
    answer_text = clean_answer(answer)
    if item.status == WorkItemStatus.WAITING and not answer_text:
        raise InvalidInput(ANSWER_REQUIRED, fields=["answer"])
    previous = Action.objects.filter(pk=item.current_action_id).first() if item.current_action_id else None
    in_graph = item.execution_mode == ExecutionMode.GRAPH
    if previous is None:
        if in_graph:
            raise InvalidState("graph retry target is missing")
        return previous, None, rules.action_fields(item, stage=common.initial_stage(item), context=[]), None
    previous_run, replacement = _replacement(item, previous, answer_text or None)
    plan = None
    if in_graph:
        actions = common.item_actions(item, lock=True)
        plan = graph.plan_graph_reset(item, actions, previous.effective_stage_id, replacement, now)
    return previous, previous_run, replacement, plan


ANSWER_REQUIRED = "answer is required to resume a waiting item: it waits for your answer"


def _label(status: str) -> str:
    """A status as the pages label it ("needs attention", not needs_attention)."""
    return WorkItemStatus(status).label if status in WorkItemStatus.values else status


def not_retryable_message(status: str) -> str:
    """Why an item in `status` cannot be retried, in the words of its status label."""
    return f"the item is {_label(status)}: only an item that is waiting or needs attention can be retried"


def _refuse_unless_retryable(item: WorkItem) -> None:
    if item.status not in (WorkItemStatus.WAITING, WorkItemStatus.NEEDS_ATTENTION):
        raise InvalidState(not_retryable_message(item.status))


def _last_ended_run(action: Action) -> Run | None:
    """§8.6 `previous_run`: the action's most recent non-running run (by ended_at, then started_at)."""
    return (Run.objects.filter(action_id=action.pk).exclude(status=RunStatus.RUNNING)
            .order_by("-ended_at", "-started_at").first())


def _replacement(item: WorkItem, previous: Action, answer: str | None) -> tuple[Run | None, dict]:
    """§8.6's replacement of `previous`: its definition, its context plus the entry of its last run
    with that run's waiting reason and this answer."""
    previous_run = _last_ended_run(previous)
    context = list(previous.context or [])
    if previous_run is not None:
        context.append(common.run_context_entry(
            previous_run, previous, waiting_reason=previous_run.waiting_reason, answer=answer))
    return previous_run, rules.action_fields(item, previous=previous, context=context)


def waiting_actions(item: WorkItem, actions: list[Action] | None = None) -> list[Action]:
    """The stages that wait for an answer, by sequence: a graph item's canonical actions in
    `waiting` [DEV-4]; a waiting linear item's current action (it stays `completed`, §7.4)."""
    if item.execution_mode != ExecutionMode.GRAPH:
        if item.status != WorkItemStatus.WAITING or not item.current_action_id:
            return []
        current = Action.objects.filter(pk=item.current_action_id).first()
        return [current] if current else []
    if actions is None:
        actions = common.item_actions(item)
    canon = rules.canonical_actions(actions)
    return sorted((a for a in canon.values() if a.status == ActionStatus.WAITING), key=lambda a: a.sequence)


def _answer_targets(item: WorkItem, answers: dict[str, str], actions: list[Action] | None,
                    field: str = "answers") -> list[Action]:
    """What an `answers` retry resets, by sequence: every named stage, each of which must wait
    (graph: a waiting canonical action; linear: only the current action), and the item's current
    action; a waiting item's current action must be named (it needs its answer)."""
    if item.execution_mode != ExecutionMode.GRAPH:
        if list(answers) != [item.current_action_id]:
            raise InvalidInput(f"{field} of a linear WorkItem must name its current action only "
                               f"({item.current_action_id})", fields=[field])
        return []
    waiting = {a.pk: a for a in waiting_actions(item, actions)}
    unknown = [action_id for action_id in answers if action_id not in waiting]
    if unknown:
        raise InvalidInput(f"{field} must name stages of this item that wait for an answer; not waiting: "
                           + ", ".join(unknown), fields=[field])
    if item.status == WorkItemStatus.WAITING and item.current_action_id not in answers:
        raise InvalidInput(f"{ANSWER_REQUIRED}: {field} must include its current stage "
                           f"({waiting[item.current_action_id].effective_stage_id})"
                           if item.current_action_id in waiting else ANSWER_REQUIRED, fields=[field])
    targets = {a.pk: a for a in waiting.values() if a.pk in answers}
    if item.current_action_id not in targets:
        current = next((a for a in actions or [] if a.pk == item.current_action_id), None)
        if current is None:
            raise InvalidState("graph retry target is missing")
        targets[current.pk] = current
    return sorted(targets.values(), key=lambda a: a.sequence)


def _answers_retry(item: WorkItem, answers: dict[str, str], now: datetime, actor: str,
                   reason: str | None = None) -> WorkItem:
    """The graph `answers` form, under the item lock: reset each target stage in place (§7.8),
    each with its own answer in its replacement's context, then the item `ready` with the first
    target current and one `work_item.retried {target_stage_id}` event per stage. Every write is
    a guarded update on the rows as read here; the first that misses rolls all of them back."""
    actions = common.item_actions(item, lock=True)
    targets = _answer_targets(item, answers, actions)
    # every replacement from the rows as they were: a reset of one stage must not feed another's
    replacements = [(t, _replacement(item, t, answers.get(t.pk))[1]) for t in targets]
    guard = _status_guard(item, item.status)
    reset = []
    for target, replacement in replacements:
        # planned on the actions as the previous resets left them (a reset updates them in place)
        reset.append(graph.graph_reset(item, target.effective_stage_id, replacement, reason=rules.RESET_REASON_RETRY,
                                       now=now, actions=actions))
    common.save_item_state(item, now, status=WorkItemStatus.READY, current_action_id=reset[0].pk, guard=guard)
    graph.sync_claimable(item)
    for target in reset:
        event_append(work_item_id=item.pk, type=EventType.WORK_ITEM_RETRIED,
                     data=_with_reason({"target_stage_id": target.effective_stage_id}, reason), action_id=target.pk,
                     actor=actor, now=now)
    return item


def work_item_retry(*, item_id: str, answer: Any = None, answers: Any = None, actor: str = "system",
                    now: datetime | None = None, expected_revision: int | None = None, reason: str | None = None,
                    answer_for_waiting_only: bool = False, expected_state_token: int | None = None) -> WorkItem:
    """waiting/needs_attention → ready (DOMAIN §8.6): linear inserts a replacement action; graph
    resets the blocked stage in place with every dependant and running sibling.

    `answers` ([{action_id, answer}], instead of `answer`): one answer per waiting stage. A graph
    item resets every named stage (and its current action) in place in this one transaction,
    each with its own answer; a linear item takes it for its current action only, as `answer`.

    `expected_revision` / `expected_state_token` refuse (revision_conflict / state_changed) unless
    the item still has it (the bulk form and a dialog that showed a preview),
    `reason` is kept in the event's data, `answer_for_waiting_only` drops `answer` unless the item
    (as locked here) is waiting."""
    if answers is not None and answer is not None:
        raise InvalidInput("give either answer or answers, not both", fields=["answer", "answers"])
    with store_transaction():
        now = resolve_now(now)
        item = common.lock_item(item_id)
        _check_revision(item, expected_revision, expected_state_token)
        if answer_for_waiting_only and item.status != WorkItemStatus.WAITING:
            answer = None
        if answers is not None:
            # after the status: an item that needs no retry says so whatever the answers
            _refuse_unless_retryable(item)
            cleaned = clean_answers(answers)
            if item.execution_mode == ExecutionMode.GRAPH:
                return _answers_retry(item, cleaned, now, actor, reason)
            _answer_targets(item, cleaned, None)
            answer = cleaned[item.current_action_id]
        previous, _run, replacement, plan = _retry_plan(item, answer, now)
        guard = _status_guard(item, item.status)
        if plan is not None:
            target = graph.graph_reset(item, plan.target.effective_stage_id, replacement,
                                       reason=rules.RESET_REASON_RETRY, now=now, plan=plan)
            data = {"target_stage_id": target.effective_stage_id}
        else:
            target = common.insert_action(item, replacement, now)
            data = {}
        common.save_item_state(item, now, status=WorkItemStatus.READY, current_action_id=target.pk, guard=guard)
        graph.sync_claimable(item)
        event_append(work_item_id=item.pk, type=EventType.WORK_ITEM_RETRIED, data=_with_reason(data, reason),
                     action_id=target.pk, actor=actor, now=now)
        return item


def _waiting_entry(action: Action, run: Run | None, reset_action_ids: list[str]) -> dict:
    return {
        "action_id": action.pk,
        "stage_id": action.effective_stage_id,
        "run_id": run.pk if run else None,
        "waiting_reason": (run.waiting_reason or "") if run else "",
        "waiting_since": run.ended_at if run else None,
        "reset_action_ids": reset_action_ids,
    }


def _by_sequence(actions) -> list[str]:
    return [a.pk for a in sorted(actions, key=lambda a: a.sequence)]


def work_item_retry_preview(*, item_id: str, action_ids: list[str] | None = None,
                            now: datetime | None = None) -> dict:
    """What a retry would do, computed by the retry's own planning code without writing.

    Always: `waiting_stages`, each stage that waits for an answer with its question and what
    answering it resets. With `action_ids` (the stages an `answers` retry would name): the reset
    and the stopped runs of that retry — the union of its per-stage resets (§7.8 resets every
    running action in each of them, so applying them one after another touches the same set).
    `state_token`: the item's, read under its lock (a retry given it is refused if it moved)."""
    with store_transaction():
        now = resolve_now(now)
        item = common.lock_item(item_id)
        if action_ids:
            _refuse_unless_retryable(item)
            if len(set(action_ids)) != len(action_ids):
                raise InvalidInput("action_id names an action twice", fields=["action_id"])
        # The preview must not be refused for a missing answer: it runs the plan as if one were given.
        previous, _run, _replacement, plan = _retry_plan(item, "preview", now)
        actions = common.item_actions(item) if plan is not None else None
        waiting = []
        for action in waiting_actions(item, actions):
            run = _last_ended_run(action)
            resets = []
            if plan is not None:
                alone = graph.plan_graph_reset(item, actions, action.effective_stage_id, None, now)
                resets = _by_sequence(alone.affected)
            waiting.append(_waiting_entry(action, run, resets))
        if plan is None:
            if action_ids:
                _answer_targets(item, dict.fromkeys(action_ids, "preview"), None, "action_id")
            return {
                "target_action_id": item.current_action_id,
                "target_stage_id": previous.effective_stage_id if previous else _replacement["stage_id"],
                "mode": ExecutionMode.LINEAR,
                "reset_action_ids": [],
                "superseded_run_ids": [],
                "new_action": True,
                "waiting_stages": waiting,
                "state_token": state_token(item.pk),
            }
        affected = {a.pk: a for a in plan.affected}
        runs = list(plan.superseded_run_ids)
        if action_ids:
            for target in _answer_targets(item, dict.fromkeys(action_ids, "preview"), actions, "action_id"):
                other = graph.plan_graph_reset(item, actions, target.effective_stage_id, None, now)
                affected.update({a.pk: a for a in other.affected})
                runs += [r for r in other.superseded_run_ids if r not in runs]
        return {
            "target_action_id": plan.target.pk,
            "target_stage_id": plan.target.effective_stage_id,
            "mode": ExecutionMode.GRAPH,
            "reset_action_ids": _by_sequence(affected.values()),
            "superseded_run_ids": runs,
            "new_action": False,
            "waiting_stages": waiting,
            "state_token": state_token(item.pk),
        }
