"""Models mirror the store schema of DOMAIN.md §2. All writes go through workcenter.services."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from .choices import (  # noqa: F401  (the models' vocabulary, importable from here)
    OPEN_ACTION_STATUSES,
    TERMINAL_ITEM_STATUSES,
    ActionStatus,
    ActionType,
    ExecutionMode,
    RunStatus,
    WorkItemStatus,
    WorkspaceMode,
)
from .fields import CheckpointField, ContextField, EvidenceField


def new_id() -> str:
    return str(uuid.uuid4())


from .constants import COUNTER_FIELDS  # noqa: E402,F401  (re-exported)


class WorkItem(models.Model):
    id = models.CharField(primary_key=True, max_length=200, default=new_id)
    revision = models.IntegerField(default=1)
    title = models.TextField()
    goal = models.TextField()
    acceptance_criteria = models.JSONField(default=list, blank=True)
    workflow_template = models.CharField(max_length=200, default="software-change")
    workflow_snapshot = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=32, choices=WorkItemStatus.choices, default=WorkItemStatus.DRAFT)
    current_action_id = models.CharField(max_length=200, null=True, blank=True)
    current_run_id = models.CharField(max_length=200, null=True, blank=True)
    work_dir = models.TextField(default="", blank=True)
    workspace_key = models.TextField(default="", blank=True, db_index=True)
    reuse_memory = models.BooleanField(default=True)
    origin = models.JSONField(null=True, blank=True)
    linked_session_ids = models.JSONField(default=list, blank=True)
    session_context = models.JSONField(default=list, blank=True)
    attachments = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        # the list's keyset pages (selectors.work_item_page): each sort reads one of these in its
        # order (the `_asc` sorts scan it backwards), the status sort and filter the third one
        indexes = [
            models.Index(fields=["status", "-updated_at", "id"], name="wc_item_status_updated_id"),
            models.Index(fields=["-updated_at", "id"], name="wc_item_updated"),
            models.Index(fields=["-created_at", "id"], name="wc_item_created"),
        ]
        permissions = [
            ("run_actions", "Can run actions through the worker protocol"),
            ("define_workflows", "Can create work items with an explicit workflow (trusted producer)"),
        ]

    def __str__(self) -> str:
        return f"{self.title} ({self.status})"

    @property
    def execution_mode(self) -> str:
        return ExecutionMode.of(self.workflow_snapshot)


class Action(models.Model):
    id = models.CharField(primary_key=True, max_length=200, default=new_id)
    # no index of its own: the (work_item, sequence) constraint leads with it (every index is
    # maintained by each claim and submit)
    work_item = models.ForeignKey(WorkItem, on_delete=models.CASCADE, related_name="actions", db_index=False)
    sequence = models.IntegerField()
    type = models.CharField(max_length=64)
    stage_id = models.CharField(max_length=200, null=True, blank=True)
    assignment_policy = models.JSONField(null=True, blank=True)
    model_policy = models.JSONField(null=True, blank=True)
    depends_on_stage_ids = models.JSONField(default=list, blank=True)
    workspace_mode = models.CharField(max_length=32, choices=WorkspaceMode.choices, default=WorkspaceMode.SHARED)
    changes_requested_stage_id = models.CharField(max_length=200, null=True, blank=True)
    workspace = models.JSONField(null=True, blank=True)
    required_role = models.CharField(max_length=200, default="", blank=True)
    instruction = models.TextField(default="", blank=True)
    brief = models.JSONField(null=True, blank=True)
    context = ContextField(default=list, blank=True)  # evidence normalised on read
    contract_revision = models.IntegerField(default=1)
    status = models.CharField(max_length=32, choices=ActionStatus.choices, default=ActionStatus.READY)
    attempt = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=2)
    current_run_id = models.CharField(max_length=200, null=True, blank=True)
    lease_epoch = models.IntegerField(default=0)
    # Derived claim-queue flag, kept in step by the services in the same transaction as every
    # change of its inputs: status ready, no run, and the mode's readiness rule (DOMAIN §5.1-§5.3).
    # It lets a claim read only claimable rows through a partial index, so claim cost does not
    # grow with ready actions that wait on dependencies or on a blocked item.
    claimable = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["work_item_id", "sequence"]
        constraints = [models.UniqueConstraint(fields=["work_item", "sequence"], name="wc_action_item_sequence")]
        indexes = [
            models.Index(fields=["status", "updated_at", "sequence"], name="wc_action_queue"),
            models.Index(
                fields=["updated_at", "sequence", "created_at"],
                name="wc_action_claimable",
                condition=Q(claimable=True),
            ),
            models.Index(fields=["work_item"], name="wc_action_running", condition=Q(status="running")),
        ]

    def __str__(self) -> str:
        return f"{self.effective_stage_id} #{self.sequence} ({self.status})"

    @property
    def effective_stage_id(self) -> str:
        return self.stage_id or self.type

    @staticmethod
    def of_stage(stage_id: str) -> Q:
        """The actions whose `effective_stage_id` is `stage_id`, as a filter."""
        return Q(stage_id=stage_id) | ((Q(stage_id__isnull=True) | Q(stage_id="")) & Q(type=stage_id))


class Run(models.Model):
    id = models.CharField(primary_key=True, max_length=200, default=new_id)
    # no indexes of their own: wc_run_action and wc_run_item lead with them
    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="runs", db_index=False)
    work_item = models.ForeignKey(WorkItem, on_delete=models.CASCADE, related_name="runs", db_index=False)
    owner_boot_id = models.CharField(max_length=200)
    lease_epoch = models.IntegerField()
    status = models.CharField(max_length=32, choices=RunStatus.choices, default=RunStatus.RUNNING)
    started_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    # when the lease was last taken or renewed (claim, renew): a lease unrenewed for more than
    # half its length (expires_at - renewed_at) means its worker has stopped beating
    renewed_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    role_snapshot = models.JSONField(null=True, blank=True)
    vp_snapshot = models.JSONField(null=True, blank=True)
    model_snapshot = models.JSONField(null=True, blank=True)
    tool_policy_snapshot = models.JSONField(null=True, blank=True)
    response = models.TextField(default="", blank=True)
    summary = models.TextField(default="", blank=True)
    evidence = EvidenceField(default=list, blank=True)  # normalised on read (DOMAIN §12.4)
    waiting_reason = models.TextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    review_decision = models.CharField(max_length=32, null=True, blank=True)
    contract_patch = models.JSONField(null=True, blank=True)
    acceptance_checks = models.JSONField(default=list, blank=True)
    loop_count = models.BigIntegerField(default=0)
    tool_count = models.BigIntegerField(default=0)
    llm_request_count = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    progress_revision = models.IntegerField(default=0)
    checkpoint = CheckpointField(null=True, blank=True)  # normalised on read (DOMAIN §12.5)

    class Meta:
        indexes = [
            models.Index(fields=["status", "expires_at"], name="wc_run_status_expires"),
            models.Index(fields=["action", "started_at"], name="wc_run_action"),
            models.Index(fields=["work_item", "started_at"], name="wc_run_item"),
            # the Workers page (workcenter/worker_figures.py): the runs ended since a time, and the hour's
            # ends per boot id and outcome read from the index alone; the running runs renewed since
            models.Index(fields=["ended_at", "owner_boot_id", "status"], name="wc_run_ended"),
            models.Index(fields=["status", "renewed_at"], name="wc_run_status_renewed"),
        ]

    def __str__(self) -> str:
        return f"run {self.id[:8]} ({self.status})"


class RunLog(models.Model):
    """A run's log, its head: the next chunk's number, the bytes kept, what the per-run cap
    (WORKCENTER_RUN_LOG_MAX_BYTES) dropped, oldest first. Written with the run's first chunk."""
    run = models.OneToOneField(Run, primary_key=True, on_delete=models.CASCADE, related_name="log")
    next_seq = models.IntegerField(default=1)
    kept_bytes = models.BigIntegerField(default=0)
    dropped_bytes = models.BigIntegerField(default=0)
    dropped_chunks = models.IntegerField(default=0)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"log of run {self.run_id[:8]} ({self.kept_bytes} bytes)"


class RunLogChunk(models.Model):
    """One appended piece of a run's output: its number in the run (1, 2, …), the stream it came
    from (stdout, stderr, or the worker's own lines), when it was printed and its text."""
    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_chunks",
                            db_index=False)  # wc_runlog_seq leads with it
    seq = models.IntegerField()
    stream = models.CharField(max_length=16)
    at = models.DateTimeField()
    text = models.TextField()
    size = models.IntegerField()  # UTF-8 bytes of text: what the cap counts

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="wc_runlog_seq")]

    def __str__(self) -> str:
        return f"run {self.run_id[:8]} #{self.seq} {self.stream}"


class Event(models.Model):
    id = models.BigAutoField(primary_key=True)
    work_item = models.ForeignKey(WorkItem, on_delete=models.CASCADE, related_name="events",
                                  db_index=False)  # wc_event_item leads with it
    action_id = models.CharField(max_length=200, null=True, blank=True)
    run_id = models.CharField(max_length=200, null=True, blank=True)
    type = models.CharField(max_length=64)
    data = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=300, default="system")
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["work_item", "id"], name="wc_event_item"),
            # the overview's per-hour counts of one type over a time range (overview.overview)
            models.Index(fields=["type", "created_at"], name="wc_event_type_created"),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.type}"


class SchemaMeta(models.Model):
    key = models.CharField(primary_key=True, max_length=100)
    value = models.TextField()

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


class ApiToken(models.Model):
    """A bearer token for programs (API.md §1); only the SHA-256 of the secret is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workcenter_tokens")
    name = models.CharField(max_length=200, blank=True, default="")
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name or self.prefix} ({self.user})"


class PersonSettings(models.Model):
    """What one person chose for themselves on the dashboard, kept with their user (not per tab)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE,
                                related_name="workcenter_settings")
    browser_notifications = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"settings of {self.user}"


class Webhook(models.Model):
    """A receiver of events over HTTP (docs/webhooks.md). Its deliveries are written in the
    transaction of the event they announce (events.event_append) and sent by `deliver_webhooks`."""

    id = models.CharField(primary_key=True, max_length=200, default=new_id)
    name = models.CharField(max_length=200)
    url = models.URLField(max_length=2000)
    # the event types sent, and the same as "|a|b|" for the outbox's match in SQL (written together)
    event_types = models.JSONField(default=list)
    type_match = models.TextField(default="|", editable=False)
    payload = models.CharField(max_length=16, default="full", choices=[("full", "full JSON"), ("chat", "chat text")])
    workflow = models.CharField(max_length=200, default="", blank=True)  # "" = every workflow template
    active = models.BooleanField(default=True)
    secret = models.CharField(max_length=200, editable=False)
    paused_reason = models.TextField(default="", blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class WebhookDelivery(models.Model):
    """One event for one webhook: pending until a receiver answered 2xx (at least once)."""

    id = models.BigAutoField(primary_key=True)  # the `webhook-id` header, the same on every attempt
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries", db_index=False)
    event_id = models.BigIntegerField()
    status = models.CharField(max_length=16, default="pending",
                              choices=[("pending", "pending"), ("delivered", "delivered")])
    attempts = models.IntegerField(default=0)
    failures = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)  # SQLite's claim (PostgreSQL locks the row)
    first_failed_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(default="", blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # a webhook's head (its oldest pending delivery) and its order: (webhook, event)
            models.Index(fields=["webhook", "event_id"], name="wc_delivery_pending",
                         condition=Q(status="pending")),
            models.Index(fields=["webhook", "-id"], name="wc_delivery_webhook"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} of event {self.event_id}"
