"""The inbox's read (docs/dashboard.md "Inbox"): every stage that waits for an answer and every
item that needs attention, with what the stage already tried, in five reads whatever the number
of items — and what a person chose for themselves (their settings).

The reads, in this order:

1. the state token (services/state_tokens.py) of every waiting or needs_attention item: the id of
   its newest event. It is read first, so anything that changes an item while the rest is read
   moves its token past what the page sends back: the bulk retry it leads to is refused
   (state_changed), never applied to a state nobody saw. An item that entered the inbox after
   this read is left to the next one (its event makes the page read again);
2. who made each item's newest change (the actor of that event): a page does not announce a
   person's own doing to them;
3. those items;
4. their actions: a graph item's stages that wait are its canonical actions in `waiting`; a
   waiting linear item's is its current action (it stays `completed`, DOMAIN §7.4); a
   needs_attention item's failed stage is its current action (as WorkItemSummary.attention);
5. the ended runs of those stages (of every action of the stage: a linear retry inserts a new
   action of the same stage): the newest one's question or error, the attempt count and what the
   last few tried.

Rows come oldest first (by when the run that asked or failed ended), one per waiting stage and
one per failed item; `items` counts the items (the nav badge's figure: items waiting or needing
attention, as the overview counts them).
"""
from __future__ import annotations

from django.db.models import Max

from .choices import ActionStatus, RunStatus, WorkItemStatus
from .domain import rules
from .models import Action, Event, PersonSettings, Run, WorkItem

NEEDS_PERSON = (WorkItemStatus.WAITING, WorkItemStatus.NEEDS_ATTENTION)
MAX_ITEMS = 500  # the oldest first: an inbox longer than this says so (`truncated`)
TRIED = 5  # the newest runs of a stage shown with their summaries
SUMMARY_CHARS = 300
TEXT_CHARS = 4000


def inbox_count() -> int:
    """The items waiting or needing attention: the nav badge's figure (one indexed count)."""
    return WorkItem.objects.filter(status__in=NEEDS_PERSON).count()


def _cut(text: str | None, n: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _tried(runs: list[tuple]) -> list[dict]:
    return [{"run_id": pk, "status": status, "summary": _cut(summary, SUMMARY_CHARS), "error": _cut(error, SUMMARY_CHARS),
             "ended_at": ended} for _a, pk, status, summary, error, _w, ended in runs[:TRIED]]


def _ended_runs(action_ids: list[str]) -> dict[str, list[tuple]]:
    """{action id: its ended runs, newest first} in one read."""
    out: dict[str, list[tuple]] = {}
    if not action_ids:
        return out
    rows = (Run.objects.filter(action_id__in=action_ids).exclude(status=RunStatus.RUNNING)
            .order_by("-ended_at", "-started_at")
            .values_list("action_id", "pk", "status", "summary", "error", "waiting_reason", "ended_at"))
    for row in rows:
        out.setdefault(row[0], []).append(row)
    return out


def _targets(items: dict[str, WorkItem], actions: dict[str, list[Action]]) -> list[tuple[str, WorkItem, Action]]:
    """(kind, item, action) of every row: the stages that wait, the failed stage of each item."""
    out = []
    for item in items.values():
        mine = actions.get(item.pk, [])
        current = next((a for a in mine if a.pk == item.current_action_id), None)
        waiting = sorted((a for a in rules.canonical_actions(mine).values() if a.status == ActionStatus.WAITING),
                         key=lambda a: a.sequence)
        if item.status == WorkItemStatus.WAITING and not waiting and current is not None:
            waiting = [current]  # a linear item: the action that asked stays completed
        out += [("question", item, a) for a in waiting]
        if item.status == WorkItemStatus.NEEDS_ATTENTION and current is not None:
            out.append(("failure", item, current))
    return out


def _row(kind: str, item: WorkItem, action: Action, token: tuple[int, str], stage_runs: list[tuple], own: list[tuple],
         failed_stages: int) -> dict:
    last = own[0] if own else None
    if kind == "question":
        text = (last[5] or "") if last else ""
    else:
        text = (last[4] or f"the last run ended {last[2]}") if last else ""
    return {
        "kind": kind,
        "item_id": item.pk,
        "title": item.title,
        "item_status": item.status,
        "revision": item.revision,
        "state_token": token[0],
        "last_actor": token[1],
        "action_id": action.pk,
        "stage_id": action.effective_stage_id,
        "run_id": last[1] if last else None,
        "text": _cut(text, TEXT_CHARS),
        "since": (last[6] if last else None) or item.updated_at,
        "current": action.pk == item.current_action_id,
        "attempts": len(stage_runs),
        "tried": _tried(stage_runs),
        "failed_stages": failed_stages if kind == "failure" else 0,
    }


def inbox() -> dict:
    """{rows, items, questions, failures, truncated}: see the module's docstring."""
    tokens = dict(Event.objects.filter(work_item__status__in=NEEDS_PERSON).order_by()
                  .values("work_item_id").annotate(m=Max("id")).values_list("work_item_id", "m"))
    actors = dict(Event.objects.filter(pk__in=list(tokens.values())).values_list("id", "actor")) if tokens else {}
    page = list(WorkItem.objects.filter(status__in=NEEDS_PERSON).order_by("updated_at", "pk")
                .only("id", "title", "status", "revision", "current_action_id", "updated_at")[: MAX_ITEMS + 1])
    truncated = len(page) > MAX_ITEMS
    items = {i.pk: i for i in page[:MAX_ITEMS] if i.pk in tokens}
    actions: dict[str, list[Action]] = {}
    for a in (Action.objects.filter(work_item_id__in=list(items))
              .only("id", "work_item_id", "sequence", "type", "stage_id", "status")):
        actions.setdefault(a.work_item_id, []).append(a)
    targets = _targets(items, actions)
    # every action of each target's stage: a linear item's earlier attempts are earlier actions
    stage_actions = {(item.pk, a.effective_stage_id): [] for _k, item, a in targets}
    for item_id, mine in actions.items():
        for a in mine:
            key = (item_id, a.effective_stage_id)
            if key in stage_actions:
                stage_actions[key].append(a.pk)
    runs = _ended_runs([pk for ids in stage_actions.values() for pk in ids])
    rows = []
    for kind, item, action in targets:
        ids = stage_actions[(item.pk, action.effective_stage_id)]
        stage_runs = sorted((r for pk in ids for r in runs.get(pk, [])), key=_newest_first)
        failed = sum(1 for a in rules.canonical_actions(actions.get(item.pk, [])).values()
                     if a.status == ActionStatus.FAILED)
        token = tokens[item.pk]
        rows.append(_row(kind, item, action, (token, actors.get(token, "")), stage_runs, runs.get(action.pk, []), max(1, failed)))
    rows.sort(key=lambda r: (r["since"], r["item_id"], r["kind"] == "failure", r["stage_id"]))
    return {"rows": rows, "items": len(items), "questions": sum(r["kind"] == "question" for r in rows),
            "failures": sum(r["kind"] == "failure" for r in rows), "truncated": truncated}


def _newest_first(run: tuple):
    ended = run[6]
    return (-(ended.timestamp()) if ended else 0.0, run[1])


# --- a person's own settings ------------------------------------------------------------------------

def person_settings(user) -> dict:
    """What `user` chose for themselves: the defaults until they chose (no row is written by a read)."""
    row = PersonSettings.objects.filter(user_id=user.pk).only("browser_notifications").first()
    return {"browser_notifications": bool(row.browser_notifications) if row else False}
