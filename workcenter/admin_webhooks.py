"""Django admin for webhooks (docs/webhooks.md): add, change, pause and delete them — through the
webhook services, so the checks of the API apply — with the signing secret shown once, after the
add (and after "rotate secret"); their deliveries read-only, with a redeliver action.

Permissions are the models' own: `workcenter.view_webhook` to see, `add_`/`change_`/`delete_webhook`
to manage; deliveries follow `change_webhook`.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from . import clock
from .admin_parts import ViewOnly, change_link, changelist_link, clip, when_short
from .domain import webhooks as rules
from .errors import InvalidInput, WorkcenterError
from .event_types import EventType
from .models import Webhook, WebhookDelivery
from .services import webhooks as services

TYPE_CHOICES = ([(f"preset:{name}", f"preset: {name.replace('_', ' ')} ({', '.join(types)})")
                 for name, types in rules.PRESETS.items()] + [(t.value, t.value) for t in EventType])


class WebhookForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https",
                         widget=forms.URLInput(attrs={"class": "vLargeTextField"}))  # a URL reads whole
    event_types = forms.MultipleChoiceField(choices=TYPE_CHOICES, widget=forms.CheckboxSelectMultiple,
                                            help_text="the events sent; a preset stands for the types it names")
    rotate_secret = forms.BooleanField(required=False, help_text="give the webhook a new secret (shown once)")

    class Meta:
        model = Webhook
        fields = ("name", "url", "event_types", "payload", "workflow", "active")

    def clean(self):
        data = super().clean()
        try:
            checked = services.clean_fields({k: v for k, v in data.items() if k in services.EDITABLE})
        except InvalidInput as exc:
            fields = [e.get("field") for e in exc.extra.get("errors", [])] or [None]
            self.add_error(fields[0] if fields[0] in self.fields else None, exc.message)
            return data
        data["event_types"] = checked.get("event_types", data.get("event_types"))
        return data


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    form = WebhookForm
    list_display = ("name", "target", "state", "types", "payload", "pending", "deliveries_link")
    readonly_fields = ("paused_reason", "paused_at", "created_at", "updated_at")

    @admin.display(description="URL")
    def target(self, obj):
        return clip(obj.url, 60)

    @admin.display(description="state")
    def state(self, obj):
        if obj.active:
            return format_html('<span class="wc-badge wc-done">{}</span>', "active")
        return format_html('<span class="wc-badge wc-failed">paused</span> {}', clip((obj.paused_reason or "by a person").removeprefix("paused "), 90))

    @admin.display(description="events")
    def types(self, obj):
        return clip(", ".join(obj.event_types), 80)

    @admin.display(description="pending")
    def pending(self, obj):
        return obj.deliveries.filter(status="pending").count()

    @admin.display(description="deliveries")
    def deliveries_link(self, obj):
        return changelist_link("webhookdelivery", {"webhook__id__exact": obj.pk}, "deliveries")

    def changelist_view(self, request, extra_context=None):
        for hook in Webhook.objects.filter(active=False).exclude(paused_reason=""):
            messages.warning(request, f"Webhook “{hook.name}” is {hook.paused_reason}. Its deliveries wait; "
                                      "tick “active” to resume them in order.")
        return super().changelist_view(request, extra_context)

    # Django wraps these views in a transaction; each webhook service is a transaction of its own
    # (durable), so the views run without one and the service writes the webhook
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return self._changeform_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        return self._delete_view(request, object_id, extra_context)

    def get_fields(self, request, obj=None):
        """An add asks only what a new webhook needs: no secret to rotate, nothing paused yet."""
        fields = super().get_fields(request, obj)
        return fields if obj is not None else [f for f in fields if f in WebhookForm.Meta.fields]

    def save_model(self, request, obj, form, change):
        fields = {k: form.cleaned_data[k] for k in services.EDITABLE}
        try:
            if change:
                saved = services.webhook_update(obj.pk, rotate_secret=form.cleaned_data.get("rotate_secret"), **fields)
            else:
                saved = services.webhook_create(**fields)
        except WorkcenterError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        obj.pk, obj.secret = saved.pk, saved.secret
        if not change or form.cleaned_data.get("rotate_secret"):
            self.message_user(request, f"The signing secret of “{saved.name}”, shown this once: {saved.secret}",
                              messages.WARNING)

    def delete_model(self, request, obj):
        services.webhook_delete(obj.pk)

    def delete_queryset(self, request, queryset):
        for pk in queryset.values_list("pk", flat=True):
            services.webhook_delete(pk)


@admin.action(description="Redeliver the selected deliveries")
def redeliver(modeladmin, request, queryset):
    now = clock.now()
    for delivery in queryset.order_by("event_id"):
        services.delivery_redeliver(delivery.pk, now=now)
    modeladmin.message_user(request, f"{queryset.count()} deliveries will be sent again, in event order.")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ViewOnly, admin.ModelAdmin):
    list_display = ("id", "hook", "event", "status_badge", "attempts", "last_status_code", "last_attempt", "next_attempt",
                    "error")
    list_filter = ("webhook", "status")
    list_per_page = 50
    actions = [redeliver]
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]

    def has_redeliver_permission(self, request):
        return request.user.has_perm("workcenter.change_webhook")

    redeliver.allowed_permissions = ("redeliver",)

    @admin.display(description="webhook", ordering="webhook__name")
    def hook(self, obj):
        return change_link("webhook", obj.webhook_id, obj.webhook.name)

    @admin.display(description="event", ordering="event_id")
    def event(self, obj):
        return change_link("event", obj.event_id, f"#{obj.event_id}")

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj):
        return format_html('<span class="wc-badge wc-{}">{}</span>', "done" if obj.status == "delivered" else "waiting",
                           obj.status)

    @admin.display(description="last attempt", ordering="last_attempt_at")
    def last_attempt(self, obj):
        return when_short(obj.last_attempt_at)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, obj):
        return "—" if obj.status == "delivered" else when_short(obj.next_attempt_at)

    @admin.display(description="last error")
    def error(self, obj):
        return clip(obj.last_error, 80) or "—"
