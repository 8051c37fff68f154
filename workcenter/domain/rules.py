"""The store's rules as pure functions: no database, no clock, no transaction.

The services read rows, ask these functions what the rules say, and write the answer with a
guarded update. Each rule is written here once: the lease predicate and its stale reasons
(DOMAIN §6), graph status and readiness (§5.3, §7.6), which actions a graph reset touches
(§7.8), the workspace exclusivity table (§5.4), retry on interruption (§8), integration
reservations (§10.2) and the fields an action takes from its stage or its previous action (§4.5).

The rules read rows by the shapes below (`RunRow`, `ActionRow`, `ItemRow`): the fields of a
Run, an Action and a WorkItem that they look at. A model instance has them, so has any plain
object that carries them; nothing here needs the models themselves.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Protocol

from django.utils.dateparse import parse_datetime

from ..choices import ActionStatus, ActionType, ExecutionMode, RunStatus, WorkItemStatus, WorkspaceMode
from . import instructions, normalize, workflows


class RunRow(Protocol):
    """The fields of a Run that the rules read."""
    pk: str
    status: str
    owner_boot_id: str
    lease_epoch: int
    expires_at: datetime


class ActionRow(Protocol):
    """The fields of an Action that the rules read."""
    pk: str
    status: str
    type: str
    sequence: int
    effective_stage_id: str
    depends_on_stage_ids: list | None
    current_run_id: str | None
    lease_epoch: int
    attempt: int
    max_attempts: int
    workspace: dict | None
    workspace_mode: str
    brief: dict | None
    assignment_policy: Any
    model_policy: Any
    changes_requested_stage_id: str | None
    required_role: str


class ItemRow(Protocol):
    """The fields of a WorkItem that the rules read."""
    pk: str
    status: str
    execution_mode: str
    current_action_id: str | None
    current_run_id: str | None
    title: str
    goal: str
    acceptance_criteria: list | None
    session_context: list | None


# the item statuses in which a run of the item may still hold its lease (DOMAIN §6.1)
RUNNING_ITEM_OK = (WorkItemStatus.READY, WorkItemStatus.RUNNING, WorkItemStatus.WAITING)
# the actions that count for their stage (DOMAIN §5.3 [DEV-1])
NOT_CANONICAL = (ActionStatus.SUPERSEDED, ActionStatus.CANCELLED)

RESET_REASON_CHANGES = "Superseded by review changes request"
RESET_REASON_RETRY = "Superseded by manual graph retry"
REASON_GUIDANCE = "Action restarted after user guidance"
REASON_CONTRACT = "WorkItem contract changed while this Run was active"
REASON_CANCELLED = "WorkItem was cancelled"


# --- fencing (DOMAIN §6) ---------------------------------------------------------------------

@dataclass
class Lease:
    """The rows that hold a live lease, as the caller read them (the services pass model instances)."""
    run: RunRow
    action: ActionRow
    item: ItemRow


def stale_reason(run: RunRow | None, action: ActionRow | None, item: ItemRow | None, now: datetime,
                 require_live: bool) -> str:
    if run is None:
        return "stale Run: it does not exist or has already finished"
    if (item and item.status == WorkItemStatus.CANCELLED) or run.status == RunStatus.CANCELLED:
        return "stale Run: the WorkItem was cancelled"
    if run.status != RunStatus.RUNNING:
        return f"stale Run: it has already finished ({run.status})"
    if require_live and run.expires_at <= now:
        return "stale Run: its lease expired"
    return "stale Run: it no longer owns the Action lease (superseded, reset or already finished)"


def lease_check(run: RunRow | None, action: ActionRow | None, item: ItemRow | None, owner_boot_id: str,
                lease_epoch: int, now: datetime, *, require_live: bool) -> tuple[Lease | None, str]:
    """The active-run predicate (DOMAIN §6.1) over the run, its action and its item: (lease | None, reason)."""
    ok = (
        run is not None
        and action is not None
        and item is not None
        and run.owner_boot_id == owner_boot_id
        and run.lease_epoch == lease_epoch
        and run.status == RunStatus.RUNNING
        and action.status == ActionStatus.RUNNING
        and action.current_run_id == run.pk
        and action.lease_epoch == run.lease_epoch
        and item.status in RUNNING_ITEM_OK
        and (
            item.execution_mode == ExecutionMode.GRAPH
            or (
                item.status == WorkItemStatus.RUNNING
                and item.current_action_id == action.pk
                and item.current_run_id == run.pk
            )
        )
        and (not require_live or run.expires_at > now)
    )
    if ok:
        return Lease(run=run, action=action, item=item), ""
    return None, stale_reason(run, action, item, now, require_live)


def retryable_on_interrupt(action: ActionRow) -> bool:
    """An interrupted run's action goes back to ready unless it delivers or its attempts are spent (§8)."""
    return action.type != ActionType.DELIVER and action.attempt < action.max_attempts


# --- graph rules (DOMAIN §5.3, §7.6, §7.8) ---------------------------------------------------

def canonical_actions(actions: Iterable[ActionRow]) -> dict[str, ActionRow]:
    """Canonical action per stage: highest sequence among non-superseded, non-cancelled [DEV-1]."""
    out: dict[str, ActionRow] = {}
    for a in actions:
        if a.status in NOT_CANONICAL:
            continue
        cur = out.get(a.effective_stage_id)
        if cur is None or a.sequence > cur.sequence:
            out[a.effective_stage_id] = a
    return out


def deps_satisfied(action: ActionRow, canonical: dict[str, ActionRow]) -> bool:
    for stage in action.depends_on_stage_ids or []:
        c = canonical.get(stage)
        if c is None or c.status != ActionStatus.COMPLETED:
            return False
    return True


_OPEN = (ActionStatus.READY, ActionStatus.RUNNING, ActionStatus.WAITING, ActionStatus.FAILED)
_BLOCKED = (ActionStatus.WAITING, ActionStatus.FAILED)
_RUNNABLE = (ActionStatus.READY, ActionStatus.RUNNING)


def graph_status(actions: list[ActionRow]) -> tuple[str, str | None]:
    """Graph refresh (DOMAIN §7.6): the item status and current action id."""
    open_ = [a for a in sorted(actions, key=lambda a: a.sequence) if a.status in _OPEN]
    blocked = next((a for a in open_ if a.status in _BLOCKED), None)
    runnable = next((a for a in open_ if a.status in _RUNNABLE), None)
    if blocked is not None:
        status = WorkItemStatus.WAITING if blocked.status == ActionStatus.WAITING else WorkItemStatus.NEEDS_ATTENTION
        return status, blocked.pk
    if runnable is not None:
        running = any(a.status == ActionStatus.RUNNING for a in open_)
        return (WorkItemStatus.RUNNING if running else WorkItemStatus.READY), runnable.pk
    return WorkItemStatus.DONE, None


def claimable_ids(item: ItemRow, actions: list[ActionRow]) -> set[str]:
    """The actions whose derived `claimable` flag is set (DOMAIN §5.1-§5.3), workspace aside."""
    want: set[str] = set()
    if item.execution_mode == ExecutionMode.GRAPH:
        if item.status in (WorkItemStatus.READY, WorkItemStatus.RUNNING):
            canon = canonical_actions(actions)
            for a in actions:
                if a.status == ActionStatus.READY and not a.current_run_id and deps_satisfied(a, canon):
                    want.add(a.pk)
    elif item.status == WorkItemStatus.READY and not item.current_run_id:
        for a in actions:
            if a.pk == item.current_action_id and a.status == ActionStatus.READY and not a.current_run_id:
                want.add(a.pk)
    return want


def reset_scope(actions: list[ActionRow], target_stage: str) -> tuple[ActionRow | None, list[ActionRow]]:
    """Steps 1-3 of DOMAIN §7.8: the target's canonical action and every live action the reset
    touches (the target's stage, every running stage, and what depends on them, transitively)."""
    live = [a for a in actions if a.status not in NOT_CANONICAL]
    target = canonical_actions(live).get(target_stage)
    if target is None:
        return None, []
    stages = {target_stage} | {a.effective_stage_id for a in live if a.status == ActionStatus.RUNNING}
    changed = True
    while changed:
        changed = False
        for a in live:
            s = a.effective_stage_id
            if s not in stages and any(d in stages for d in (a.depends_on_stage_ids or [])):
                stages.add(s)
                changed = True
    return target, [a for a in live if a.effective_stage_id in stages]


def preserved_workspace(target: ActionRow, replacement: dict | None) -> dict | None:
    """Step 4 of DOMAIN §7.8: a prepared or finalized integration survives a reset of its
    integrate action (unless the replacement is no longer an integrate action)."""
    ws = target.workspace if isinstance(target.workspace, dict) else None
    integ = ws.get("integration") if ws else None
    if (
        target.workspace_mode == WorkspaceMode.INTEGRATE
        and isinstance(integ, dict)
        and integ.get("status") in ("prepared", "finalized")
        and (replacement is None or replacement.get("workspace_mode") == WorkspaceMode.INTEGRATE)
    ):
        return ws
    return None


# --- workspace exclusivity (DOMAIN §5.4) -----------------------------------------------------

ALWAYS, OTHER_ITEM, NEVER = "always", "other item", "never"
_S, _R, _W, _I = WorkspaceMode.SHARED, WorkspaceMode.READ, WorkspaceMode.ISOLATED_WRITE, WorkspaceMode.INTEGRATE
# WORKSPACE_CONFLICT[candidate mode][running mode]: whether a running action in one workspace keeps
# a candidate from starting there — always, only when the two belong to different items, or never.
WORKSPACE_CONFLICT: dict[str, dict[str, str]] = {
    _S: {_S: ALWAYS, _R: ALWAYS, _W: ALWAYS, _I: ALWAYS},
    _R: {_S: ALWAYS, _R: NEVER, _W: NEVER, _I: ALWAYS},
    _W: {_S: ALWAYS, _R: NEVER, _W: OTHER_ITEM, _I: ALWAYS},
    _I: {_S: ALWAYS, _R: ALWAYS, _W: ALWAYS, _I: ALWAYS},
}


def _mode(value: str) -> str:
    # a mode this store does not know (imported rows) is held to the isolated-write rule
    return value if value in WORKSPACE_CONFLICT else _W


def workspace_blocks(candidate_mode: str, candidate_item_id: str, running: Iterable[tuple[str, str]]) -> bool:
    """Whether the running (mode, item id) pairs of one workspace keep the candidate from starting."""
    row = WORKSPACE_CONFLICT[_mode(candidate_mode)]
    for r_mode, r_item in running:
        rule = row[_mode(r_mode)]
        if rule == ALWAYS or (rule == OTHER_ITEM and r_item != candidate_item_id):
            return True
    return False


# --- integration reservations (DOMAIN §10.2) -------------------------------------------------

def reservation_of(action: ActionRow) -> dict | None:
    ws = action.workspace if isinstance(action.workspace, dict) else None
    integ = ws.get("integration") if ws else None
    res = integ.get("reservation") if isinstance(integ, dict) else None
    return res if isinstance(res, dict) else None


def as_datetime(value: Any) -> datetime | None:
    """A stored timestamp: a datetime, an ISO text, or integer milliseconds (reference databases)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return parse_datetime(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, tz=timezone.utc)
    return None


def has_live_reservation(action: ActionRow, now: datetime) -> bool:
    res = reservation_of(action)
    if not res:
        return False
    exp = as_datetime(res.get("expires_at"))
    return exp is not None and exp > now


# --- action fields (DOMAIN §4.5, §12.9) ------------------------------------------------------

# what a graph reset's replacement rewrites on the target action (everything but its stage id)
RESET_FIELDS = ("type", "required_role", "assignment_policy", "model_policy", "depends_on_stage_ids",
                "workspace_mode", "changes_requested_stage_id", "instruction", "brief", "context", "max_attempts")


def action_fields(item: ItemRow, *, context: list, stage: dict | None = None, previous: ActionRow | None = None,
                  policy_text: str | None = None) -> dict:
    """The fields an action is made of, from its stage (DOMAIN §4.5) or, for retry and guidance,
    from the previous action of that stage with its type's default policy text."""
    if previous is not None:
        atype, brief = previous.type, previous.brief
        policy = workflows.default_policy_text(atype)
        fields = {
            "stage_id": previous.effective_stage_id,
            "assignment_policy": previous.assignment_policy,
            "model_policy": previous.model_policy,
            "depends_on_stage_ids": list(previous.depends_on_stage_ids or []),
            "workspace_mode": previous.workspace_mode or WorkspaceMode.SHARED,
            "changes_requested_stage_id": previous.changes_requested_stage_id,
            "max_attempts": previous.max_attempts or workflows.DEFAULT_MAX_ATTEMPTS,
            "required_role": previous.required_role or "",
        }
    else:
        atype = stage.get("type") or ActionType.CUSTOM
        brief = normalize.normalize_brief(
            {k: stage.get(k) for k in normalize.BRIEF_FIELDS if stage.get(k)}, workflows.default_brief(atype))
        policy = policy_text if policy_text is not None else (
            stage.get("instruction") or workflows.default_policy_text(atype))
        fields = {
            "stage_id": stage.get("id") or atype,
            "assignment_policy": stage.get("assignment_policy"),
            "model_policy": stage.get("model_policy"),
            "depends_on_stage_ids": list(stage.get("depends_on_stage_ids") or []),
            "workspace_mode": stage.get("workspace_mode") or WorkspaceMode.SHARED,
            "changes_requested_stage_id": stage.get("changes_requested_stage_id") if atype == ActionType.REVIEW else None,
            "max_attempts": stage.get("max_attempts") or workflows.DEFAULT_MAX_ATTEMPTS,
            "required_role": workflows.required_role_for(stage),
        }
    fields.update(type=atype, brief=brief, context=list(context),
                  instruction=instructions.render_instruction(
                      title=item.title, goal=item.goal, criteria=list(item.acceptance_criteria or []),
                      session_context=list(item.session_context or []), context=context, policy_text=policy,
                      action_type=atype, brief=brief))
    return fields
