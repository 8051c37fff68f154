"""The named guards: the WHERE of every guarded update of the store, each spelled once.

A guarded update writes rows by primary key only while they still are what its guard says, and
checks that it hit every row it named (`writes.py`; DOMAIN §2.7, §6): a miss raises FenceLost,
which rolls the transaction back, or, for the worker calls whose fence fails before anything is
written, answers "nothing happened" (`update_if`). A guard names the columns it compares:

* a value: the row holds it (a status); a tuple: the row holds one of these values;
* `IS_NULL`: the column is null;
* `ARG`: a value the caller binds, in declaration order (`Guard.row(pk, *args)`), or as a row the
  caller read holds it (`Guard.of(row)`); a bound None means IS NULL, as in the ORM's filters.

Where two services mean the same fence they use the same guard: the `*_OF_LEASE` guards are the
clauses of the active-run predicate (DOMAIN §6.1), under which the hot path (claim, submit) and
the cold paths (renew, progress, interrupt, integration) write alike. Nothing here formats SQL.
"""
from __future__ import annotations

from ..domain import rules
from ..models import (OPEN_ACTION_STATUSES, Action, ActionStatus, Run, RunLog, RunStatus, Webhook, WebhookDelivery, WorkItem,
                      WorkItemStatus)


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


ARG = _Marker("ARG")
IS_NULL = _Marker("IS_NULL")


class Guard:
    """One named fence over the rows of one model: (field, ARG | IS_NULL | value | values)."""

    __slots__ = ("name", "model", "doc", "conditions", "arg_names")

    def __init__(self, name: str, model, doc: str, **columns):
        meta = model._meta
        self.name, self.model, self.doc = name, model, doc
        self.conditions = tuple((meta.get_field(n), v) for n, v in columns.items())
        self.arg_names = tuple(f.attname for f, v in self.conditions if v is ARG)

    def __repr__(self) -> str:
        return f"<Guard {self.name}>"

    def row(self, pk, *args) -> Fence:
        """This guard over the row `pk`, with the values of its ARG columns."""
        if len(args) != len(self.arg_names):
            self._wrong(args)
        return Fence(self, pk, None, args)

    def rows(self, pks, *args) -> Fence:
        """This guard over each of the rows `pks`: the update must hit every one."""
        if len(args) != len(self.arg_names):
            self._wrong(args)
        return Fence(self, None, tuple(pks), args)

    def of(self, obj) -> Fence:
        """This guard over `obj`'s row, its ARG columns as `obj` holds them (the row as read)."""
        return Fence(self, obj.pk, None, tuple(getattr(obj, name) for name in self.arg_names))

    def _wrong(self, args):
        raise TypeError(f"guard {self.name} binds {len(self.arg_names)} values ({', '.join(self.arg_names)}), "
                        f"not {len(args)}")


class Fence:
    """A guard bound to its row (`pk`) or rows (`pks`) and values: what one update must find."""

    __slots__ = ("guard", "pk", "pks", "args", "expect")

    def __init__(self, guard: Guard, pk, pks: tuple | None, args: tuple):
        self.guard, self.pk, self.pks, self.args = guard, pk, pks, args
        self.expect = 1 if pks is None else len(pks)


# --- the lease (DOMAIN §6.1): the worker's calls and the writes that end its run ----------------

RUN_OF_LEASE = Guard(
    "run_of_lease", Run, "the run is running under the caller's lease: its boot id and epoch (§6.1, first clause)",
    status=RunStatus.RUNNING, owner_boot_id=ARG, lease_epoch=ARG)
ACTION_OF_LEASE = Guard(
    "action_of_lease", Action, "the action is running the run, at the run's epoch (§6.1, second clause)",
    status=ActionStatus.RUNNING, current_run_id=ARG, lease_epoch=ARG)
ITEM_LIVE = Guard(
    "item_live", WorkItem, "the graph item is ready, running or waiting: a run of it may hold its lease "
    "(§6.1, third clause)", status=rules.RUNNING_ITEM_OK)
ITEM_OF_LEASE = Guard(
    "item_of_lease", WorkItem, "the linear item is running the action's run (§6.1, fourth clause)",
    status=WorkItemStatus.RUNNING, current_action_id=ARG, current_run_id=ARG)
RUN_WITHOUT_SNAPSHOTS = Guard(
    "run_without_snapshots", Run, "the run is running and none of its execution snapshots is written yet (§6.2)",
    status=RunStatus.RUNNING, role_snapshot=IS_NULL, vp_snapshot=IS_NULL, model_snapshot=IS_NULL,
    tool_policy_snapshot=IS_NULL)

# --- a claim (DOMAIN §5.6) ---------------------------------------------------------------------

ACTION_CLAIMABLE = Guard(
    "action_claimable", Action, "the action is ready, held by no run, at the epoch the claim read",
    status=ActionStatus.READY, current_run_id=IS_NULL, lease_epoch=ARG)
ITEM_CLAIMABLE_GRAPH = Guard(
    "item_claimable_graph", WorkItem, "the graph item is ready or running: another branch may be running",
    status=(WorkItemStatus.READY, WorkItemStatus.RUNNING))
ITEM_CLAIMABLE_LINEAR = Guard(
    "item_claimable_linear", WorkItem, "the linear item is ready with the action current and no run",
    status=WorkItemStatus.READY, current_action_id=ARG, current_run_id=IS_NULL)

# --- rows another caller ends or rewrites under the item's lock ------------------------------

RUN_RUNNING = Guard(
    "run_running", Run, "the run is still running (recovery, a supersede or a cancel ends it)",
    status=RunStatus.RUNNING)
ACTION_AS_READ = Guard(
    "action_as_read", Action, "the action's status, run and epoch are as the caller read them "
    "(a repair, an edit, a graph reset)", status=ARG, current_run_id=ARG, lease_epoch=ARG)
ACTION_OPEN = Guard(
    "action_open", Action, "the action is still open: ready, running or waiting (a contract change, "
    "guidance, a cancel)", status=OPEN_ACTION_STATUSES)
ACTION_OPEN_OR_FAILED = Guard(
    "action_open_or_failed", Action, "the action is still open or failed (a graph item's contract change)",
    status=(*OPEN_ACTION_STATUSES, ActionStatus.FAILED))
ACTION_HELD = Guard(
    "action_held", Action, "the action itself: its item's lock holds it (the derived claimable flag)")
ITEM_HELD = Guard(
    "item_held", WorkItem, "the item itself: the caller holds its lock (a triage's contract patch)")
ITEM_AS_READ = Guard(
    "item_as_read", WorkItem, "the item's status is as the caller read it under its lock", status=ARG)
ITEM_AT_REVISION = Guard(
    "item_at_revision", WorkItem, "the item's status and contract revision are as the caller read them",
    status=ARG, revision=ARG)
ITEM_WITH_CURRENT = Guard(
    "item_with_current", WorkItem, "the item's status is as read and the action is its current one",
    status=ARG, current_action_id=ARG)

# --- a webhook's deliveries (webhook_sender) -------------------------------------------------

DELIVERY_AS_CLAIMED = Guard(
    "delivery_as_claimed", WebhookDelivery, "the delivery is pending and its claim is as the sender read or "
    "set it (SQLite's claim; PostgreSQL holds the row's lock and leaves the claim null)",
    status="pending", claimed_until=ARG)
DELIVERY_ANY = Guard(
    "delivery_any", WebhookDelivery, "the delivery itself, whatever its status (a redelivery asked for by a person)")
DELIVERY_PENDING = Guard(
    "delivery_pending", WebhookDelivery, "the delivery is still waiting to be sent (a webhook resumed: one that "
    "a sender delivered meanwhile is left as it is)", status="pending")
WEBHOOK_ACTIVE = Guard(
    "webhook_active", Webhook, "the webhook is active (a sender pauses it once; a person may have paused or "
    "resumed it meanwhile)", active=True)

# --- a run's log (services/run_logs) ---------------------------------------------------------

RUN_LOG_AT_SEQ = Guard(
    "run_log_at_seq", RunLog, "the log's next chunk number is as the appender read it under the run's lease "
    "(two appends of one run never number a chunk twice)", next_seq=ARG)
