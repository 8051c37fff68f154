"""The store's vocabulary: every status, mode and built-in action type, spelled once (DOMAIN §2-§5).

Below the models (which use them as field choices) and below the pure modules that need them
without the models (`domain/`, whose normalisers the models' fields call on read).
"""
from __future__ import annotations

from django.db import models


class WorkItemStatus(models.TextChoices):
    DRAFT = "draft", "draft"  # created without starting; no action yet
    READY = "ready", "ready"  # at least one claimable action
    RUNNING = "running", "running"  # linear: current action runs; graph: something runs, nothing blocked
    WAITING = "waiting", "waiting"  # needs the user's answer
    NEEDS_ATTENTION = "needs_attention", "needs attention"  # failure, exhausted retries, unsafe interruption
    DONE = "done", "done"  # terminal: workflow finished
    CANCELLED = "cancelled", "cancelled"  # terminal: cancelled by the user


class ActionStatus(models.TextChoices):
    READY = "ready", "ready"  # claimable when the mode's readiness rule holds
    RUNNING = "running", "running"  # has a current run
    WAITING = "waiting", "waiting"  # graph only: ended with outcome waiting [DEV-4]
    COMPLETED = "completed", "completed"  # finished (linear waiting also lands here)
    FAILED = "failed", "failed"  # terminal failure or exhausted retries; blocks until retried
    SUPERSEDED = "superseded", "superseded"  # replaced by a contract change or guidance
    CANCELLED = "cancelled", "cancelled"  # the work item was cancelled


class RunStatus(models.TextChoices):
    RUNNING = "running", "running"  # holds the lease
    COMPLETED = "completed", "completed"  # submitted completed (after validation)
    WAITING = "waiting", "waiting"  # submitted waiting
    RETRYABLE = "retryable", "retryable"  # submitted retryable
    FAILED = "failed", "failed"  # submitted failed, or downgraded by validation
    INTERRUPTED = "interrupted", "interrupted"  # worker stop or recovery of the current run
    SUPERSEDED = "superseded", "superseded"  # fenced out by contract change, guidance, reset, stale recovery
    CANCELLED = "cancelled", "cancelled"  # work item cancelled


class WorkspaceMode(models.TextChoices):
    SHARED = "shared", "shared"
    READ = "read", "read"
    ISOLATED_WRITE = "isolated-write", "isolated-write"
    INTEGRATE = "integrate", "integrate"


class ActionType(models.TextChoices):
    """The built-in action types (DOMAIN §4.1); a workflow may name others (custom types)."""
    TRIAGE = "triage", "triage"
    RESEARCH = "research", "research"
    DESIGN = "design", "design"
    DIAGNOSE = "diagnose", "diagnose"
    IMPLEMENT = "implement", "implement"
    MIGRATE = "migrate", "migrate"
    TEST = "test", "test"
    REVIEW = "review", "review"
    INTEGRATE = "integrate", "integrate"
    DOCUMENT = "document", "document"
    OPERATE = "operate", "operate"
    DELIVER = "deliver", "deliver"
    WRITE = "write", "write"
    CUSTOM = "custom", "custom"


class ExecutionMode(models.TextChoices):
    LINEAR = "linear", "linear"  # one current action at a time, in stage order
    GRAPH = "graph", "graph"  # every ready action whose dependencies completed may run

    @classmethod
    def of(cls, snapshot) -> "ExecutionMode":
        """The mode a workflow snapshot declares (`execution_mode`, or `executionMode` as the
        reference design wrote it): graph only when it says so; no snapshot or mode ⇒ linear (§2.2)."""
        if not isinstance(snapshot, dict):
            return cls.LINEAR
        mode = snapshot.get("execution_mode", snapshot.get("executionMode"))
        return cls.GRAPH if mode == cls.GRAPH else cls.LINEAR


OPEN_ACTION_STATUSES = (ActionStatus.READY, ActionStatus.RUNNING, ActionStatus.WAITING)
TERMINAL_ITEM_STATUSES = (WorkItemStatus.DONE, WorkItemStatus.CANCELLED)
