"""Django admin through the real URL conf: read-only pages, filters, links and the repair actions."""
import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from tests.conftest import make_graph
from workcenter import clock as workcenter_clock
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.services.run_logs import run_log_append


def _url(model, view="changelist", *args):
    return reverse(f"admin:workcenter_{model}_{view}", args=args)


def _messages(response):
    """Messages shown on the changelist the repair redirected to."""
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def _rows(response):
    return list(response.context["cl"].result_list)


def _store_state():
    return (
        list(WorkItem.objects.order_by("pk").values()),
        list(Action.objects.order_by("pk").values()),
        list(Run.objects.order_by("pk").values()),
        list(Event.objects.order_by("id").values()),
    )


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch, clock):
    """The admin and the services it calls read the same movable clock as the fixtures."""
    monkeypatch.setattr(workcenter_clock, "now", lambda: clock.tick(1))


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def admin_client(client, root):
    client.force_login(root)
    return client


@pytest.fixture
def data(store, tmp_path):
    """A running linear item, a graph item with a failed and a waiting branch, and their events."""
    linear = store.linear(title="Linear running item", work_dir=str(tmp_path))
    lc = store.claim_item(linear.pk)
    graph = make_graph(store, [{"id": "scan", "max_attempts": 1}, {"id": "ask", "mode": "read"},
                               {"id": "report", "deps": ["scan", "ask"], "type": "document"}], title="Graph item")
    gc = store.claim_item(graph.pk, stage="scan")
    store.submit(gc, {"outcome": "failed", "error": "scanner crashed"})
    return {"linear": linear, "linear_claim": lc, "graph": graph, "graph_claim": gc}


# --- pages ---------------------------------------------------------------------------------------

def test_changelists_render_with_data(admin_client, data):
    r = admin_client.get(_url("workitem"))
    assert r.status_code == 200
    assert {o.pk for o in _rows(r)} == {data["linear"].pk, data["graph"].pk}
    html = r.content.decode()
    assert "Linear running item" in html and "wc-badge wc-running" in html and "wc-badge wc-needs_attention" in html
    r = admin_client.get(_url("action"))
    assert r.status_code == 200 and len(_rows(r)) == 4
    assert "scan" in r.content.decode() and "wc-badge wc-failed" in r.content.decode()
    r = admin_client.get(_url("run"))
    assert r.status_code == 200 and len(_rows(r)) == 2
    assert "live, " in r.content.decode()  # the running run's lease
    r = admin_client.get(_url("event"))
    assert r.status_code == 200
    assert [e.type for e in _rows(r)][:1] == ["action.failed"]


def test_change_pages_render_read_only(admin_client, data):
    lc, gc = data["linear_claim"], data["graph_claim"]
    event = Event.objects.filter(work_item_id=data["graph"].pk, type="action.failed").get()
    pages = [("workitem", data["linear"].pk), ("workitem", data["graph"].pk), ("action", lc.action.pk),
             ("action", gc.action.pk), ("run", lc.run.pk), ("run", gc.run.pk), ("event", event.pk)]
    for model, pk in pages:
        r = admin_client.get(_url(model, "change", pk))
        assert r.status_code == 200, (model, pk)
        html = r.content.decode()
        assert 'name="_save"' not in html  # nothing to save: the store is written by services only
    html = admin_client.get(_url("run", "change", gc.run.pk)).content.decode()
    assert "scanner crashed" in html
    html = admin_client.get(_url("event", "change", event.pk)).content.decode()
    assert "scanner crashed" in html  # the event's data, pretty-printed


def test_no_add_and_no_delete(admin_client, data):
    assert admin_client.get(_url("workitem", "add")).status_code == 403
    assert admin_client.get(_url("action", "delete", data["linear_claim"].action.pk)).status_code == 403
    r = admin_client.get(_url("action"))
    assert "delete_selected" not in r.content.decode()
    assert set(dict(r.context["action_form"].fields["action"].choices)) == {
        "", "reset_actions", "mark_actions_failed", "edit_actions"}


def test_links_between_related_rows(admin_client, data):
    graph, gc = data["graph"], data["graph_claim"]
    html = admin_client.get(_url("workitem")).content.decode()
    filtered = _url("action") + f"?work_item__id__exact={graph.pk}"
    assert filtered in html
    r = admin_client.get(filtered)
    assert {a.work_item_id for a in _rows(r)} == {graph.pk} and len(_rows(r)) == 3
    html = r.content.decode()
    assert _url("workitem", "change", graph.pk) in html
    r = admin_client.get(_url("run") + f"?action__id__exact={gc.action.pk}")
    assert [x.pk for x in _rows(r)] == [gc.run.pk]
    assert _url("action", "change", gc.action.pk) in r.content.decode()
    r = admin_client.get(_url("event") + f"?run_id={gc.run.pk}")
    assert {e.type for e in _rows(r)} == {"run.claimed", "action.failed"}
    html = r.content.decode()
    assert _url("run", "change", gc.run.pk) in html and _url("action", "change", gc.action.pk) in html
    html = admin_client.get(_url("workitem", "change", graph.pk)).content.decode()
    assert _url("action", "change", gc.action.pk) in html  # the read-only actions inline
    assert f"?work_item__id__exact={graph.pk}" in html


@pytest.mark.parametrize("model,query,expected", [
    ("workitem", "status__exact=running", {"Linear running item"}),
    ("workitem", "status__exact=needs_attention", {"Graph item"}),
    ("workitem", "execution_mode=graph", {"Graph item"}),
    ("workitem", "execution_mode=linear", {"Linear running item"}),
    ("workitem", "workspace_key=", {"Graph item"}),
    ("workitem", "q=Linear", {"Linear running item"}),
    ("workitem", "q=report", {"Graph item"}),  # a stage id
])
def test_workitem_filters_and_search(admin_client, data, model, query, expected):
    r = admin_client.get(_url(model) + "?" + query)
    assert r.status_code == 200
    assert {o.title for o in _rows(r)} == expected


def test_action_run_event_filters(admin_client, data, tmp_path):
    stages = lambda r: sorted(a.effective_stage_id for a in _rows(r))  # noqa: E731
    assert stages(admin_client.get(_url("action") + "?status__exact=failed")) == ["scan"]
    assert stages(admin_client.get(_url("action") + "?workspace_mode__exact=read")) == ["ask"]
    assert stages(admin_client.get(_url("action") + "?type__exact=document")) == ["report"]
    assert stages(admin_client.get(_url("action") + "?execution_mode=graph")) == ["ask", "report", "scan"]
    linear_key = WorkItem.objects.get(pk=data["linear"].pk).workspace_key
    r = admin_client.get(_url("action") + f"?work_item__workspace_key={linear_key}")
    assert [a.work_item_id for a in _rows(r)] == [data["linear"].pk]
    assert stages(admin_client.get(_url("action") + "?q=scan")) == ["scan"]
    r = admin_client.get(_url("run") + "?status__exact=running")
    assert [x.pk for x in _rows(r)] == [data["linear_claim"].run.pk]
    r = admin_client.get(_url("run") + "?q=boot-A")
    assert len(_rows(r)) == 2
    r = admin_client.get(_url("event") + "?type__exact=run.claimed")
    assert len(_rows(r)) == 2
    r = admin_client.get(_url("event") + "?actor_kind=worker")
    assert {e.type for e in _rows(r)} == {"run.claimed", "action.failed"}
    event = Event.objects.filter(type="action.failed").get()
    assert [e.pk for e in _rows(admin_client.get(_url("event") + f"?q={event.pk}"))] == [event.pk]
    assert {e.type for e in _rows(admin_client.get(_url("event") + "?q=admin:"))} == set()
    assert admin_client.get(_url("event") + "?q=not-a-number").status_code == 200


def test_changelists_do_not_query_per_row(admin_client, store):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def counts():
        out = {}
        for model in ("workitem", "action", "run", "event"):
            with CaptureQueriesContext(connection) as ctx:
                assert admin_client.get(_url(model)).status_code == 200
            out[model] = len(ctx.captured_queries)
        return out

    make_graph(store, [{"id": "a"}, {"id": "b"}])
    store.claim()
    few = counts()
    for _ in range(6):
        make_graph(store, [{"id": "a"}, {"id": "b"}])
        store.claim()
    assert counts() == few


# --- repairs -------------------------------------------------------------------------------------

def _post_action(client, model, action, ids, **fields):
    data = {"action": action, "_selected_action": list(ids), **fields}
    return client.post(_url(model), data)


def _apply(client, model, action, ids, **fields):
    """Confirm a repair; it redirects back to the changelist, which shows one message per row."""
    r = _post_action(client, model, action, ids, apply="yes", **fields)
    assert r.status_code == 302 and r["Location"].startswith(_url(model)), r.status_code
    return client.get(r["Location"])


def _label(action):
    return f"“{action.work_item.title}” · stage {action.effective_stage_id} #{action.sequence} ({action.pk[:8]})"


def _run_label(run):
    action = run.action
    return (f"“{run.work_item.title}” · stage {action.effective_stage_id} #{action.sequence} · run {run.pk[:8]} "
            f"on worker {run.owner_boot_id[:8]}")


def test_reset_confirmation_then_apply(admin_client, data):
    gc = data["graph_claim"]
    # the confirmation page
    r = _post_action(admin_client, "action", "reset_actions", [gc.action.pk])
    assert r.status_code == 200
    assert "admin/workcenter/repair_confirmation.html" in [t.name for t in r.templates]
    html = r.content.decode()
    assert 'name="reason"' in html and "Reset to ready" in html and gc.action.pk in html
    assert Action.objects.get(pk=gc.action.pk).status == "failed"
    # apply with a reason
    r = _apply(admin_client, "action", "reset_actions", [gc.action.pk], reason="scanner fixed")
    assert Action.objects.get(pk=gc.action.pk).status == "ready"
    ev = Event.objects.filter(work_item_id=data["graph"].pk).order_by("-id").first()
    assert (ev.type, ev.actor, ev.data) == ("action.reset", "admin:root",
                                            {"reason": "scanner fixed", "previous_status": "failed"})
    assert _messages(r) == [("success", f"{_label(gc.action)}: reset to ready (was failed)")]
    assert WorkItem.objects.get(pk=data["graph"].pk).status == "ready"


@pytest.mark.parametrize("reason", ["", "   ", "x" * 2001])
def test_missing_or_long_reason_reshows_form_and_writes_nothing(admin_client, data, reason):
    lc = data["linear_claim"]
    before = _store_state()
    for model, action, pk in [("action", "reset_actions", lc.action.pk), ("action", "mark_actions_failed", lc.action.pk),
                              ("action", "edit_actions", lc.action.pk), ("run", "release_runs", lc.run.pk)]:
        r = _post_action(admin_client, model, action, [pk], apply="yes", reason=reason, max_attempts="5")
        assert r.status_code == 200, action
        assert r.context["form"].errors["reason"], action
        assert 'class="errorlist' in r.content.decode()
    assert _store_state() == before


def test_mark_failed_action(admin_client, data):
    lc = data["linear_claim"]
    r = _apply(admin_client, "action", "mark_actions_failed", [lc.action.pk], reason="runaway loop")
    assert _messages(r) == [("success", f"{_label(lc.action)}: marked failed (was running)")]
    assert Action.objects.get(pk=lc.action.pk).status == "failed"
    assert Run.objects.get(pk=lc.run.pk).status == "superseded"
    assert WorkItem.objects.get(pk=data["linear"].pk).status == "needs_attention"
    ev = Event.objects.filter(type="action.marked_failed").get()
    assert (ev.actor, ev.data) == ("admin:root", {"reason": "runaway loop", "previous_status": "running"})


def test_release_run(admin_client, data):
    lc = data["linear_claim"]
    r = _post_action(admin_client, "run", "release_runs", [lc.run.pk])
    assert r.status_code == 200 and "Release" in r.content.decode()
    r = _apply(admin_client, "run", "release_runs", [lc.run.pk], reason="host rebooted")
    assert Run.objects.get(pk=lc.run.pk).status == "interrupted"
    ev = Event.objects.filter(type="run.released").get()
    assert (ev.actor, ev.run_id, ev.data) == ("admin:root", lc.run.pk, {"retryable": True, "reason": "host rebooted"})
    assert _messages(r) == [("success", f"{_run_label(lc.run)}: released; the stage is ready to run again")]


def test_edit_single_action_prefills_and_writes_changed_fields(admin_client, data):
    action = Action.objects.filter(work_item_id=data["graph"].pk, stage_id="report").get()
    r = _post_action(admin_client, "action", "edit_actions", [action.pk])
    assert r.status_code == 200
    form = r.context["form"]
    assert form.initial["instruction"] == "do report" and form.initial["max_attempts"] == 2
    # a browser posts the prefilled values back, with CRLF line breaks, plus the admin's changes
    fields = {"instruction": "do report\r\nwith tables", "objective": "", "approach": "", "expected_outcome": "",
              "max_attempts": "3", "workspace_mode": "shared"}
    r = _apply(admin_client, "action", "edit_actions", [action.pk], reason="clearer ask", **fields)
    assert _messages(r) == [("success", f"{_label(action)}: edited")]
    action.refresh_from_db()
    assert (action.instruction, action.max_attempts, action.workspace_mode) == ("do report\nwith tables", 3, "shared")
    ev = Event.objects.filter(type="action.edited").get()
    assert (ev.actor, ev.data) == ("admin:root", {"reason": "clearer ask", "changed_fields": ["instruction", "max_attempts"]})


def test_edit_with_nothing_to_edit_reshows_form(admin_client, data):
    action = Action.objects.filter(work_item_id=data["graph"].pk, stage_id="report").get()
    before = _store_state()
    r = _post_action(admin_client, "action", "edit_actions", [action.pk], apply="yes", reason="r")
    assert r.status_code == 200 and "Give at least one field to edit." in r.content.decode()
    r = _post_action(admin_client, "action", "edit_actions", [action.pk], apply="yes", reason="r", max_attempts="0")
    assert r.status_code == 200 and r.context["form"].errors["max_attempts"]
    assert _store_state() == before


def test_service_refusal_is_a_message_not_a_500(admin_client, data):
    # reset refuses a ready action; the failed one in the same selection is still repaired
    graph = data["graph"]
    ask = Action.objects.filter(work_item_id=graph.pk, stage_id="ask").get()
    scan = data["graph_claim"].action
    r = _apply(admin_client, "action", "reset_actions", [ask.pk, scan.pk], reason="unblock")
    msgs = _messages(r)
    assert ("error", f"{_label(ask)}: Reset to ready refused: Action in ready cannot be reset: only failed, waiting or "
                     "running Actions can") in msgs
    assert any(level == "success" and "reset to ready (was failed)" in text for level, text in msgs)
    assert Action.objects.get(pk=scan.pk).status == "ready"
    assert Event.objects.filter(type="action.reset").count() == 1
    # an edit that changes nothing is refused by the service, reported the same way
    before = _store_state()
    r = _apply(admin_client, "action", "edit_actions", [ask.pk], reason="r", workspace_mode="read")
    assert _messages(r) == [("error", f"{_label(ask)}: Edit (repair) refused: no change: the given values equal the "
                                      "Action's current ones")]
    assert _store_state() == before


def test_object_tools_open_the_repair(admin_client, data):
    lc = data["linear_claim"]
    html = admin_client.get(_url("action", "change", lc.action.pk)).content.decode()
    for name in ("reset_actions", "mark_actions_failed", "edit_actions"):
        assert f'name="action" value="{name}"' in html
    html = admin_client.get(_url("run", "change", lc.run.pk)).content.decode()
    assert 'name="action" value="release_runs"' in html
    # the button posts to the changelist, which shows the confirmation page
    r = admin_client.post(_url("run"), {"action": "release_runs", "_selected_action": lc.run.pk})
    assert r.status_code == 200 and r.context["objects"] == [Run.objects.get(pk=lc.run.pk)]


# --- who may repair ------------------------------------------------------------------------------

def _staff(django_user_model, name, codenames):
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames))
    return user


def test_view_only_staff_sees_rows_but_cannot_repair(client, django_user_model, data):
    user = _staff(django_user_model, "viewer", ["view_workitem", "view_action", "view_run", "view_event"])
    client.force_login(user)
    lc = data["linear_claim"]
    r = client.get(_url("action"))
    assert r.status_code == 200 and len(_rows(r)) == 4
    assert "reset_actions" not in r.content.decode()
    html = client.get(_url("action", "change", lc.action.pk)).content.decode()
    assert 'value="reset_actions"' not in html
    before = _store_state()
    r = _post_action(client, "action", "reset_actions", [lc.action.pk], apply="yes", reason="sneaky")
    r2 = _post_action(client, "run", "release_runs", [lc.run.pk], apply="yes", reason="sneaky")
    assert r.status_code == 200 and r2.status_code == 200  # the changelist again, no repair
    assert _store_state() == before


def test_staff_with_change_workitem_can_repair(client, django_user_model, data):
    user = _staff(django_user_model, "lead", ["view_action", "view_run", "change_workitem"])
    client.force_login(user)
    lc = data["linear_claim"]
    r = _apply(client, "run", "release_runs", [lc.run.pk], reason="stuck")
    assert _messages(r) == [("success", f"{_run_label(lc.run)}: released; the stage is ready to run again")]
    assert Event.objects.filter(type="run.released").get().actor == "admin:lead"


def test_non_staff_user_is_refused(client, django_user_model, data):
    user = django_user_model.objects.create_user("plain", password="pw")
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="workcenter"))
    client.force_login(user)
    lc = data["linear_claim"]
    before = _store_state()
    for model in ("workitem", "action", "run", "event"):
        r = client.get(_url(model))
        assert r.status_code == 302 and "/admin/login/" in r["Location"]
    r = _post_action(client, "action", "reset_actions", [lc.action.pk], apply="yes", reason="r")
    assert r.status_code == 302 and "/admin/login/" in r["Location"]
    assert _store_state() == before


def test_anonymous_is_sent_to_login(client, data):
    r = client.get(_url("run"))
    assert r.status_code == 302 and "/admin/login/" in r["Location"]


# --- leases: the runs list, its filters and the confirmation pages -----------------------------

@pytest.fixture
def leases(store, clock):
    """Three running runs of 60 s leases, renewed 29 s ago (renewing: under half the lease), 40 s ago
    (not renewing, still live) and 70 s ago (expired), and a failed run renewed long ago."""
    from datetime import timedelta

    runs = {}
    for name, renewed_ago in (("fresh", 29), ("silent", 40), ("expired", 70)):
        item = make_graph(store, [{"id": f"{name}-stage"}], title=f"Item {name}")
        claim = store.claim_item(item.pk, boot=f"boot-{name}-0123456789")
        renewed = clock.t - timedelta(seconds=renewed_ago)
        Run.objects.filter(pk=claim.run.pk).update(renewed_at=renewed, expires_at=renewed + timedelta(seconds=60))
        runs[name] = claim.run.pk
    old = make_graph(store, [{"id": "done-stage", "max_attempts": 1}], title="Item failed")
    claim = store.claim_item(old.pk)
    store.submit(claim, {"outcome": "failed", "error": "boom"})
    Run.objects.filter(pk=claim.run.pk).update(renewed_at=clock.t - timedelta(seconds=500))
    runs["failed"] = claim.run.pk
    return runs


@pytest.mark.parametrize("query,expected", [
    ("lease=not_renewing", {"silent", "expired"}),
    ("lease=expired", {"expired"}),
    ("", {"fresh", "silent", "expired", "failed"}),
])
def test_run_lease_filters(admin_client, leases, query, expected):
    r = admin_client.get(_url("run") + "?" + query)
    assert r.status_code == 200
    assert {x.pk for x in _rows(r)} == {leases[name] for name in expected}


def test_runs_list_shows_the_columns_a_repair_needs(admin_client, leases):
    r = admin_client.get(_url("run"))
    html = r.content.decode()
    headers = [str(h["text"]) for h in r.context["result_headers"]]
    assert headers[1:] == ["id", "work item", "stage", "status", "worker", "epoch", "last renewal", "started", "ended"]
    assert "not renewing" in html and "lease expired" in html  # the filter's choices
    assert "boot-sil" in html and "boot-silent-0123456789" in html  # short id, the whole one on hover
    rows = {x.pk: x for x in _rows(r)}
    admin = r.context["cl"].model_admin
    assert str(admin.renewal(rows[leases["fresh"]])) == '<span title="live, 31 s left">29 s ago</span>'
    assert str(admin.renewal(rows[leases["silent"]])) == (
        '<span title="live, 20 s left, not renewing">40 s ago <span class="wc-flag">not renewing</span></span>')
    assert str(admin.renewal(rows[leases["expired"]])) == (
        '<span title="expired 10 s ago">1 min ago <span class="wc-flag">lease expired</span></span>')
    assert admin.renewal(rows[leases["failed"]]) == "—"
    assert 'datetime="' in str(admin.started(rows[leases["fresh"]])) and admin.ended(rows[leases["fresh"]]) == "—"


def test_release_confirmation_names_item_stage_worker_epoch_and_renewal(admin_client, leases):
    run = Run.objects.select_related("work_item").get(pk=leases["silent"])
    r = _post_action(admin_client, "run", "release_runs", [run.pk])
    assert r.status_code == 200
    html = r.content.decode()
    assert f'<a href="{_url("workitem", "change", run.work_item_id)}">Item silent</a>' in html
    assert "silent-stage" in html
    assert 'title="boot-silent-0123456789">boot-sil</span>' in html
    assert f"<td>{run.lease_epoch}</td>" in html
    assert "40 s ago" in html and "live, 20 s left, not renewing" in html
    assert f"run {run.pk[:8]} (running)" not in html


def test_action_confirmation_names_the_live_run_or_says_there_is_none(admin_client, leases):
    expired = Run.objects.get(pk=leases["expired"])
    failed = Run.objects.get(pk=leases["failed"])
    r = _post_action(admin_client, "action", "reset_actions", [expired.action_id, failed.action_id])
    html = r.content.decode()
    assert "Item expired" in html and "expired-stage" in html and "Item failed" in html and "done-stage" in html
    assert 'title="boot-expired-0123456789">boot-exp</span>' in html
    assert "1 min 10 s ago" in html and "expired 10 s ago" in html
    assert "no live run" in html  # the failed action holds none


def test_a_runs_page_shows_the_end_of_its_log_and_links_the_whole(admin_client, store, data):
    # given a running run that printed a line and a tag, and a run that printed nothing
    lc = data["linear_claim"]
    run_log_append(run_id=lc.run.pk, owner_boot_id=lc.run.owner_boot_id, lease_epoch=lc.run.lease_epoch,
                   chunks=[{"stream": "stdout", "text": "compiling <main.c>\n"}], now=store.now())
    # then its admin page shows the text (escaped) and the download; the other says it has none
    html = admin_client.get(_url("run", "change", lc.run.pk)).content.decode()
    assert "compiling &lt;main.c&gt;" in html and f"/api/v1/runs/{lc.run.pk}/log.txt" in html
    assert "19 bytes kept" in html
    html = admin_client.get(_url("run", "change", data["graph_claim"].run.pk)).content.decode()
    assert "no log" in html
