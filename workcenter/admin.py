"""Django admin: read-mostly views of the store and the admin repairs of DOMAIN §11.3.

Rows are never added, changed or deleted here: the store's columns are read-only and every write
goes through a service. Repairs are admin actions — on Action: reset to ready, mark failed, edit
(instruction, brief, max_attempts, workspace_mode); on Run: release — that first show a
confirmation page with a required reason (≤ 2 000 characters), then call the service once per
selected row with actor `admin:<username>` and report each row's success or the service's error
as a message. The Action and Run change pages offer the same repairs as object tools. The
confirmation names each row as a repair needs it: work item (linked), stage, worker, lease epoch,
time since the last renewal. The runs list keeps one line a run at 1280 px and filters the leases
to repair: "not renewing" (the Workers page's half-lease rule) and "lease expired".

Permissions: seeing a model needs its view permission (or superuser). The repairs need
`workcenter.change_workitem` — the permission the API asks for retry, cancel and guidance —
because a repair changes how an item executes just as those operations do; superusers hold it
implicitly. Without it the rows stay visible but no repair is offered, and a forged POST of a
repair is refused by Django's action machinery (the action is not among the allowed choices).
"""
from __future__ import annotations

import json
from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from . import clock, run_logs, services
from .auth import CHANGE
from .errors import WorkcenterError
from .models import Action, ActionStatus, Event, Run, RunStatus, WorkItem, WorkspaceMode
from .admin_parts import ViewOnly, change_link, changelist_link, clip, short, status_badge, when, when_short
from .services.repairs import MAX_ATTEMPTS_LIMIT, MAX_REASON

LOG_TAIL_CHUNKS = 100  # chunks of a run's log its admin page shows (the rest: the download)


def pretty_json(value):
    return format_html('<pre class="wc-json">{}</pre>',
                       json.dumps(value, indent=2, ensure_ascii=False, default=str))


def json_view(field: str):
    """A read-only admin field showing the JSON column `field` indented."""
    @admin.display(description=field.replace("_", " "))
    def view(self, obj):
        return pretty_json(getattr(obj, field))
    return view


def age(seconds: float, *, brief: bool = False) -> str:
    """A duration in words a repair can act on: "42 s", "3 min 5 s", "2 h 4 min"; `brief` (a list
    cell): "42 s", "3 min", "2 h"."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" if brief else f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h" if brief else f"{s // 3600} h {s % 3600 // 60} min"


# --- leases: the rule of the Workers page (workcenter/worker_figures.py) --------------------------

def lease_renewed(run: Run) -> datetime:
    """When the lease was last taken or renewed."""
    return run.renewed_at or run.started_at


def lease_not_renewing(run: Run, now: datetime) -> bool:
    """A running run whose lease has gone more than half its length without a renewal: its worker
    renews every lease/3, so a live one never gets there; a stopped or hung one does."""
    renewed = lease_renewed(run)
    return run.status == RunStatus.RUNNING and (now - renewed) * 2 > (run.expires_at - renewed)


def lease_expired(run: Run, now: datetime) -> bool:
    return run.status == RunStatus.RUNNING and run.expires_at <= now


def lease_words(run: Run, now: datetime) -> str:
    """ "live, 40 s left" / "expired 12 s ago", then "not renewing" when it applies."""
    if run.status != RunStatus.RUNNING:
        return "—"
    left = (run.expires_at - now).total_seconds()
    words = f"live, {age(left)} left" if left > 0 else f"expired {age(-left)} ago"
    return words + (", not renewing" if left > 0 and lease_not_renewing(run, now) else "")


# The admin's own navigation sidebar is off: it repeats the index page and takes 300 px of a 1280 px
# screen from the lists, whose rows then wrap (the runs list needs every column a repair reads).
admin.site.enable_nav_sidebar = False


# --- filters ---------------------------------------------------------------------------------------

class ExecutionModeFilter(admin.SimpleListFilter):
    """Linear vs graph, read from the item's workflow snapshot (DOMAIN §2.1)."""

    title = "execution mode"
    parameter_name = "execution_mode"
    path = "workflow_snapshot__execution_mode"

    def lookups(self, request, model_admin):
        return [("linear", "linear"), ("graph", "graph")]

    def queryset(self, request, queryset):
        if self.value() == "graph":
            return queryset.filter(**{self.path: "graph"})
        if self.value() == "linear":
            return queryset.exclude(**{self.path: "graph"})
        return queryset


class ItemExecutionModeFilter(ExecutionModeFilter):
    path = "work_item__workflow_snapshot__execution_mode"


class LeaseFilter(admin.SimpleListFilter):
    """Runs to repair: running with a lease unrenewed for more than half its length (its worker has
    stopped or hangs; recovery takes it when the lease ends), or running past the lease's end
    (recovery has not taken it yet: is the recovery loop running?)."""

    title = "lease"
    parameter_name = "lease"

    def lookups(self, request, model_admin):
        return [("not_renewing", "not renewing"), ("expired", "lease expired")]

    def queryset(self, request, queryset):
        now = clock.now()
        running = queryset.filter(status=RunStatus.RUNNING)
        if self.value() == "expired":
            return running.filter(expires_at__lte=now)
        if self.value() == "not_renewing":
            # half of each run's own lease: decided per row over the running runs (as many as the
            # workers hold), not with date arithmetic that differs between SQLite and PostgreSQL
            ids = [r.pk for r in running.only("pk", "status", "started_at", "renewed_at", "expires_at")
                   if lease_not_renewing(r, now)]
            return running.filter(pk__in=ids)
        return queryset


class ActorKindFilter(admin.SimpleListFilter):
    """Who caused an event (DOMAIN §11.3): the actor's prefix."""

    title = "actor"
    parameter_name = "actor_kind"
    kinds = ("admin", "user", "worker", "recovery", "system")

    def lookups(self, request, model_admin):
        return [(k, k) for k in self.kinds]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "system":
            return queryset.filter(actor="system")
        if value in self.kinds:
            return queryset.filter(actor__startswith=f"{value}:")
        return queryset


# --- repair forms and the confirmation step ---------------------------------------------------

class RepairForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), max_length=MAX_REASON,
        help_text="Required. Stored in the repair's event together with your username.",
    )


class ActionEditForm(RepairForm):
    instruction = forms.CharField(widget=forms.Textarea(attrs={"rows": 12, "cols": 100}), required=False, strip=False,
                                  help_text="Blank keeps the current instruction.")
    objective = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2, "cols": 100}))
    approach = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2, "cols": 100}))
    expected_outcome = forms.CharField(required=False, max_length=2000,
                                       widget=forms.Textarea(attrs={"rows": 2, "cols": 100}))
    max_attempts = forms.IntegerField(required=False, min_value=1, max_value=MAX_ATTEMPTS_LIMIT)
    workspace_mode = forms.ChoiceField(required=False, choices=[("", "(keep)"), *WorkspaceMode.choices])

    EDIT_FIELDS = ("instruction", "objective", "approach", "expected_outcome", "max_attempts", "workspace_mode")

    @classmethod
    def initial_for(cls, action: Action) -> dict:
        brief = action.brief if isinstance(action.brief, dict) else {}
        return {
            "instruction": action.instruction,
            "objective": brief.get("objective", ""),
            "approach": brief.get("approach", ""),
            "expected_outcome": brief.get("expected_outcome", ""),
            "max_attempts": action.max_attempts,
            "workspace_mode": action.workspace_mode,
        }

    def clean_instruction(self):
        # browsers submit textarea line breaks as CRLF; the stored text uses LF
        return self.cleaned_data["instruction"].replace("\r\n", "\n")

    def clean(self):
        data = super().clean()
        if not self.errors and all(data.get(f) in (None, "") or not str(data.get(f)).strip() for f in self.EDIT_FIELDS):
            raise forms.ValidationError("Give at least one field to edit.")
        return data

    def edit_kwargs(self) -> dict:
        data = self.cleaned_data
        brief = {k: data[k] for k in ("objective", "approach", "expected_outcome") if data.get(k)}
        return {
            "instruction": data["instruction"] if data.get("instruction", "").strip() else None,
            "brief": brief or None,
            "max_attempts": data.get("max_attempts"),
            "workspace_mode": data.get("workspace_mode") or None,
        }


class Repair:
    """One repair offered as an admin action: its form, what it will do, and the service call."""

    def __init__(self, name, label, explanation, form_class, call, done):
        self.name, self.label, self.explanation = name, label, explanation
        self.form_class, self.call, self.done = form_class, call, done


REPAIRS = {
    "reset_actions": Repair(
        "reset_actions", "Reset to ready",
        "Each failed, waiting or running Action goes back to ready with its attempts counted from 0. "
        "A running Action loses its Run (superseded, lease epoch + 1: the old worker's reports are refused). "
        "Graph items recompute their status; a linear item becomes ready with the Action current.",
        RepairForm,
        lambda obj, form, actor: services.action_reset(action_id=obj.pk, reason=form.cleaned_data["reason"], actor=actor),
        lambda obj, result: f"reset to ready (was {obj.status})",
    ),
    "mark_actions_failed": Repair(
        "mark_actions_failed", "Mark failed",
        "Each ready, running or waiting Action becomes failed. A running Action loses its Run (superseded, "
        "lease epoch + 1). Graph items recompute their status; a linear item needs attention.",
        RepairForm,
        lambda obj, form, actor: services.action_mark_failed(action_id=obj.pk, reason=form.cleaned_data["reason"],
                                                             actor=actor),
        lambda obj, result: f"marked failed (was {obj.status})",
    ),
    "edit_actions": Repair(
        "edit_actions", "Edit (repair)",
        "Only the fields you change are written; blank fields keep their value, brief fields are merged over "
        "the current brief. A running Action first loses its Run (superseded, lease epoch + 1) and goes back "
        "to ready, so the next claim runs the edited Action.",
        ActionEditForm,
        lambda obj, form, actor: services.action_edit(action_id=obj.pk, reason=form.cleaned_data["reason"], actor=actor,
                                                      **form.edit_kwargs()),
        lambda obj, result: "edited",
    ),
    "release_runs": Repair(
        "release_runs", "Release",
        "Each running Run is interrupted now, whether or not its lease has expired, as if its worker had "
        "stopped: its Action goes back to ready while attempts remain (else failed). Refused while an "
        "integration reservation is live.",
        RepairForm,
        lambda obj, form, actor: services.run_release(run_id=obj.pk, reason=form.cleaned_data["reason"], actor=actor),
        lambda obj, result: "released; the stage " + ("is ready to run again" if Action.objects.filter(
            pk=result.action_id).values_list("status", flat=True).first() == ActionStatus.READY
            else "failed (no attempt left to run it again)"),
    ),
}


def repair_facts(obj, now: datetime) -> dict:
    """What a confirmation page says about a row before the admin confirms: the work item (title
    and link), the stage, the status, and for a live run the worker, lease epoch, the time since its
    last renewal and the lease's state."""
    run = obj if isinstance(obj, Run) else None
    if isinstance(obj, Action) and obj.current_run_id:
        run = Run.objects.filter(pk=obj.current_run_id, status=RunStatus.RUNNING).first()
    action = obj.action if isinstance(obj, Run) else obj
    facts = {
        "kind": obj._meta.verbose_name, "pk": obj.pk, "short": short(obj.pk),
        "url": reverse(f"admin:workcenter_{obj._meta.model_name}_change", args=[obj.pk]),
        "title": obj.work_item.title, "item_url": reverse("admin:workcenter_workitem_change", args=[obj.work_item_id]),
        "stage": action.effective_stage_id, "sequence": action.sequence, "status": obj.status,
        "status_label": obj.status.replace("_", " "),
        "attempts": f"{action.attempt} / {action.max_attempts}", "run": None,
    }
    if run is not None:
        renewed = lease_renewed(run)
        facts["run"] = {
            "short": short(run.pk), "worker": short(run.owner_boot_id), "boot_id": run.owner_boot_id,
            "epoch": run.lease_epoch, "status": run.status, "renewed_ago": age((now - renewed).total_seconds()),
            "renewed_at": when(renewed), "lease": lease_words(run, now),
            "not_renewing": lease_not_renewing(run, now), "expired": lease_expired(run, now),
        }
    return facts


def row_label(obj) -> str:
    """Names a repaired row as the admin knows it: its work item, its stage and sequence, and for a
    run the run and its worker; not its status, which the repair has just changed."""
    if isinstance(obj, (Action, Run)):
        action = obj.action if isinstance(obj, Run) else obj
        where = f"“{clip(obj.work_item.title, 60)}” · stage {action.effective_stage_id} #{action.sequence}"
        if isinstance(obj, Run):
            return f"{where} · run {short(obj.pk)} on worker {short(obj.owner_boot_id)}"
        return f"{where} ({short(obj.pk)})"
    return f"{obj._meta.verbose_name.capitalize()} {short(str(obj.pk))}"


def run_repair(modeladmin: admin.ModelAdmin, request, queryset, name: str):
    """The confirmation page, then one service call per selected row with a per-row message."""
    repair = REPAIRS[name]
    objects = list(queryset)
    if "apply" in request.POST:
        form = repair.form_class(request.POST)
        if form.is_valid():
            actor = f"admin:{request.user.get_username()}"
            for obj in objects:
                try:
                    result = repair.call(obj, form, actor)
                except WorkcenterError as exc:
                    modeladmin.message_user(request, f"{row_label(obj)}: {repair.label} refused: {exc.message}",
                                            messages.ERROR)
                else:
                    modeladmin.message_user(request, f"{row_label(obj)}: {repair.done(obj, result)}", messages.SUCCESS)
            return None  # back to the changelist
    else:
        initial = ActionEditForm.initial_for(objects[0]) if (name == "edit_actions" and len(objects) == 1) else None
        form = repair.form_class(initial=initial)
    opts = modeladmin.model._meta
    now = clock.now()
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{repair.label}: confirm",
        "opts": opts,
        "repair": repair,
        "objects": objects,
        "rows": [repair_facts(obj, now) for obj in objects],
        "form": form,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media + form.media,
    }
    return TemplateResponse(request, "admin/workcenter/repair_confirmation.html", context)


def _repair_action(name: str):
    repair = REPAIRS[name]

    def action(modeladmin, request, queryset):
        return run_repair(modeladmin, request, queryset, name)

    action.__name__ = name
    return admin.action(description=f"{repair.label}…", permissions=["repair"])(action)


# --- model admins ------------------------------------------------------------------------------

class Columns:
    """Columns shared by the admins and inlines of items, actions, runs and events."""

    @admin.display(description="id", ordering="id")
    def short_id(self, obj):
        return short(obj.pk)

    @admin.display(description="status", ordering="status")
    def badge(self, obj):
        return status_badge(obj.status)

    @admin.display(description="work item", ordering="work_item__title")
    def item(self, obj):
        return change_link("workitem", obj.work_item_id, obj.work_item.title)

    @admin.display(description="stage", ordering="stage_id")
    def stage(self, obj):
        return obj.effective_stage_id

    @admin.display(description="attempt / max")
    def attempts(self, obj):
        return f"{obj.attempt} / {obj.max_attempts}"


class ReadOnlyAdmin(ViewOnly, Columns, admin.ModelAdmin):
    """View-only pages with the shared columns; repairs go through admin actions."""

    list_per_page = 50
    repairs: tuple[str, ...] = ()  # names in REPAIRS: the list's admin actions and the change page's buttons

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.repairs:
            cls.actions = [_repair_action(name) for name in cls.repairs]

    def has_repair_permission(self, request):
        return request.user.has_perm(CHANGE)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = {"repairs": [REPAIRS[n] for n in self.repairs], "can_repair": self.has_repair_permission(request)}
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})


class ReadOnlyInline(ViewOnly, Columns, admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True


class ActionInline(ReadOnlyInline):
    model = Action
    fields = ("sequence", "stage", "type", "badge", "workspace_mode", "attempts", "lease_epoch", "updated_at")
    readonly_fields = fields
    ordering = ("sequence",)


class RunInline(ReadOnlyInline):
    model = Run
    fk_name = "action"
    fields = ("short_id", "badge", "owner_boot_id", "lease_epoch", "started_at", "renewed_at", "expires_at", "ended_at",
              "error")
    readonly_fields = fields
    ordering = ("-started_at",)


def _count(model, field: str):
    sub = model.objects.filter(**{field: OuterRef("pk")}).order_by().values(field).annotate(n=Count("pk")).values("n")
    return Subquery(sub, output_field=IntegerField())


@admin.register(WorkItem)
class WorkItemAdmin(ReadOnlyAdmin):
    list_display = ("short_id", "title", "badge", "mode", "workspace_key", "revision", "current_action", "related",
                    "updated_at")
    list_display_links = ("short_id", "title")
    list_filter = ("status", ExecutionModeFilter, "workspace_key", "workflow_template")
    search_fields = ("id", "title", "actions__stage_id", "actions__type")
    ordering = ("-updated_at",)
    inlines = [ActionInline]
    readonly_fields = ("related",)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            action_count=_count(Action, "work_item"), run_count=_count(Run, "work_item"),
            event_count=_count(Event, "work_item"),
        )

    @admin.display(description="mode")
    def mode(self, obj):
        return obj.execution_mode

    @admin.display(description="current action")
    def current_action(self, obj):
        return change_link("action", obj.current_action_id)

    @admin.display(description="related rows")
    def related(self, obj):
        params = {"work_item__id__exact": obj.pk}
        counts = (getattr(obj, "action_count", None), getattr(obj, "run_count", None), getattr(obj, "event_count", None))
        labels = [f"{n or 0} {name}" if n is not None else name for n, name in zip(counts, ("actions", "runs", "events"))]
        return format_html_join(" · ", "{}", ((changelist_link(m, params, label),)
                                              for m, label in zip(("action", "run", "event"), labels)))


@admin.register(Action)
class ActionAdmin(ReadOnlyAdmin):
    list_display = ("short_id", "item", "sequence", "stage", "type", "badge", "workspace_mode", "attempts",
                    "lease_epoch", "current_run", "related", "updated_at")
    list_display_links = ("short_id",)
    list_filter = ("status", "workspace_mode", ItemExecutionModeFilter, "work_item__workspace_key", "type")
    search_fields = ("id", "work_item__id", "work_item__title", "stage_id", "type")
    list_select_related = ("work_item",)
    ordering = ("-updated_at",)
    inlines = [RunInline]
    repairs = ("reset_actions", "mark_actions_failed", "edit_actions")
    readonly_fields = ("brief_view", "context_view", "related")
    exclude = ("brief", "context")

    @admin.display(description="current run")
    def current_run(self, obj):
        return change_link("run", obj.current_run_id)

    @admin.display(description="related rows")
    def related(self, obj):
        return format_html("{} · {}", changelist_link("run", {"action__id__exact": obj.pk}, "runs"),
                           changelist_link("event", {"action_id": obj.pk}, "events"))

    brief_view = json_view("brief")
    context_view = json_view("context")


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    # what a repair needs, one line per run at 1280 px (admin.css keeps the cells on one line and
    # shortens long titles; the full values are on hover and on the change page)
    list_display = ("short_id", "item", "action_link", "badge", "worker", "epoch", "renewal", "started", "ended")
    list_display_links = ("short_id",)
    list_filter = ("status", LeaseFilter, ItemExecutionModeFilter, "action__workspace_mode",
                   "work_item__workspace_key", "action__type")
    search_fields = ("id", "owner_boot_id", "action__id", "action__stage_id", "work_item__id", "work_item__title")
    list_select_related = ("work_item", "action")
    ordering = ("-started_at",)
    repairs = ("release_runs",)
    exclude = ("evidence", "checkpoint", "acceptance_checks", "contract_patch")
    readonly_fields = ("related", "log_view", "evidence_view", "acceptance_checks_view", "checkpoint_view",
                       "contract_patch_view")

    @admin.display(description="log")
    def log_view(self, obj):
        """The end of the run's log (its last LOG_TAIL_CHUNKS chunks), what it kept and dropped, and
        the whole log as a download; the item's page follows it live."""
        page = run_logs.run_log_page(obj.pk, limit=LOG_TAIL_CHUNKS)
        if not page["chunks"]:
            return "no log"
        text = "".join(c["text"] for c in page["chunks"])
        kept = f"{page['kept_bytes']:,} bytes kept" + (
            f", {page['dropped_bytes']:,} of the oldest dropped" if page["dropped_bytes"] else "")
        return format_html('<p>{} · {}<a href="/api/v1/runs/{}/log.txt">download the whole log</a></p>'
                           '<pre class="wc-log">{}</pre>', kept,
                           "the last chunks below · " if page["older"] else "", obj.pk, text)

    @admin.display(description="work item", ordering="work_item__title")
    def item(self, obj):
        url = reverse("admin:workcenter_workitem_change", args=[obj.work_item_id])
        return format_html('<a href="{}" title="{}">{}</a>', url, obj.work_item.title, obj.work_item.title)

    @admin.display(description="stage", ordering="action__stage_id")
    def action_link(self, obj):
        return change_link("action", obj.action_id, f"{obj.action.effective_stage_id} #{obj.action.sequence}")

    @admin.display(description="worker", ordering="owner_boot_id")
    def worker(self, obj):
        return format_html('<span class="wc-mono" title="{}">{}</span>', obj.owner_boot_id, short(obj.owner_boot_id))

    @admin.display(description="epoch", ordering="lease_epoch")
    def epoch(self, obj):
        return obj.lease_epoch

    @admin.display(description="last renewal", ordering="renewed_at")
    def renewal(self, obj):
        """How long ago a running run's lease was renewed, flagged "not renewing" past half its
        length and "lease expired" past its end (the list's two lease filters); the lease's end
        on hover."""
        if obj.status != RunStatus.RUNNING:
            return "—"
        now = clock.now()
        ago = f"{age((now - lease_renewed(obj)).total_seconds(), brief=True)} ago"
        flag = "lease expired" if lease_expired(obj, now) else "not renewing" if lease_not_renewing(obj, now) else ""
        tip = lease_words(obj, now)
        if flag:
            return format_html('<span title="{}">{} <span class="wc-flag">{}</span></span>', tip, ago, flag)
        return format_html('<span title="{}">{}</span>', tip, ago)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj):
        return when_short(obj.started_at)

    @admin.display(description="ended", ordering="ended_at")
    def ended(self, obj):
        return when_short(obj.ended_at)

    @admin.display(description="related rows")
    def related(self, obj):
        return format_html("{} · {}", change_link("action", obj.action_id, "action"),
                           changelist_link("event", {"run_id": obj.pk}, "events"))

    evidence_view = json_view("evidence")
    acceptance_checks_view = json_view("acceptance_checks")
    checkpoint_view = json_view("checkpoint")
    contract_patch_view = json_view("contract_patch")


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "item", "type", "actor", "action_ref", "run_ref", "summary")
    list_filter = ("type", ActorKindFilter)
    search_fields = ("type", "actor", "action_id", "run_id", "work_item__id", "work_item__title")
    list_select_related = ("work_item",)
    ordering = ("-id",)
    exclude = ("data",)
    readonly_fields = ("data_view",)

    def get_search_results(self, request, queryset, search_term):
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term.isdigit() and len(term) <= 18:  # a number is an event id, not a piece of some UUID
            return queryset.filter(pk=int(term)), False
        return found, may_have_duplicates

    @admin.display(description="action")
    def action_ref(self, obj):
        return change_link("action", obj.action_id)

    @admin.display(description="run")
    def run_ref(self, obj):
        return change_link("run", obj.run_id)

    @admin.display(description="data")
    def summary(self, obj):
        return clip(json.dumps(obj.data, ensure_ascii=False, default=str), 120)

    data_view = json_view("data")


from . import admin_webhooks  # noqa: E402,F401 (registers the webhook pages; they build on admin_parts)
