"""The webhook sender (`manage.py deliver_webhooks`): sends the outbox's deliveries, each webhook's
in event order, at least once, and records every attempt (docs/webhooks.md).

Several senders may run at once, on one machine or several. A sender's threads each take one due
head at a time — the oldest pending delivery of an active webhook, among the events every writer
has settled — and send it:

* PostgreSQL: the head's row is locked for the attempt (`FOR UPDATE SKIP LOCKED`, held over the
  HTTP call): another sender skips that webhook meanwhile, and a sender that dies releases the
  lock with its connection, so its delivery is sent again at once by another;
* SQLite: a short claim (`claimed_until`) on the row instead, since a held lock there would stop
  every writer; a sender that dies leaves its claim to run out (`CLAIM_S`).

A delivery goes out with the Standard Webhooks headers; a 2xx answer delivers it, anything else
(a refusal, a timeout, a redirect, a target the safety rules refuse) is a failure retried after
the backoff of domain.webhooks.
"""
from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import close_old_connections, connection, connections, transaction

from . import clock, db, render, selectors
from .domain import webhooks as rules
from .events import stream_read
from .models import Action, Event, Webhook
from .schemas_out import EventOut, WorkItemSummaryOut
from .services import webhooks as services

logger = logging.getLogger("workcenter.webhooks")

BATCH = 10  # deliveries of one webhook sent in one go: one claim, one transaction (PostgreSQL)
QUICK_RETRY_S = 0.3  # how long one attempt retries a failing delivery at once before it backs off
CLAIM_S = (rules.TIMEOUT_S * 2 + QUICK_RETRY_S) * BATCH + 5  # SQLite: how long one attempt's claim holds (two socket waits and some)
HORIZON_S = 0.05  # how long a read of the settled event id is reused


class Horizon:
    """The highest event id every writer has settled (PostgreSQL: read under the stream key, so no
    lower id can still commit), shared by the threads and read again at most every HORIZON_S."""

    def __init__(self):
        self.lock = threading.Lock()
        self.value, self.read_at = 0, 0.0

    def get(self) -> int:
        with self.lock:
            if time.monotonic() - self.read_at >= HORIZON_S:
                with stream_read(), connection.cursor() as cur:
                    cur.execute(db.sql("event_settled_max"))
                    self.value = cur.fetchone()[0]
                self.read_at = time.monotonic()
            return self.value


def _rows(statement: str, params: list) -> list[dict]:
    """The deliveries a statement reads (`db.DELIVERY_ROW`'s columns), as dicts of their values."""
    with connection.cursor() as cur:
        cur.execute(db.sql(statement), params)
        built = db.DELIVERY_ROW.build_many(cur.fetchall())
    return [{name: row.__dict__[name] for name in db.DELIVERY_ROW.attnames} for row in built]


def _heads(horizon: int, now, limit: int) -> list[dict]:
    return _rows("webhook_heads", [horizon, now] + ([] if connection.vendor == "postgresql" else [now]) + [limit])


def _followers(head: dict, horizon: int, limit: int) -> list[dict]:
    return _rows("webhook_followers", [head["webhook_id"], head["event_id"], horizon, limit]) if limit > 0 else []


# --- what a delivery carries ---------------------------------------------------------------------

class Context:
    """What the bodies of one batch read once: the summaries of their items (as they are now; None
    for an item removed since) and the stages of their events' actions."""

    def __init__(self, events):
        events = list(events)
        self.summaries = selectors.work_item_summaries({e.work_item_id for e in events})
        actions = Action.objects.filter(pk__in={e.action_id for e in events if e.action_id}).only("stage_id", "type")
        self.stages = {a.pk: a.effective_stage_id for a in actions}


def _what_happened(event: Event, stage: str | None) -> str:
    data = event.data or {}
    where = f"stage {stage}" if stage else "the item"
    texts = {
        "action.waiting": f"{where} waits for an answer: {data.get('reason') or '(no question given)'}",
        "action.failed": f"{where} failed: {data.get('error') or 'no error given'}",
        "action.retry_exhausted": f"{where} failed after {data.get('attempt')} attempts: {data.get('error') or ''}",
        "action.marked_failed": f"{where} was marked failed: {data.get('reason') or ''}",
        "work_item.completed": f"done: {data.get('summary') or ''}",
        "work_item.cancelled": "cancelled" + (f": {data['reason']}" if data.get("reason") else ""),
    }
    return texts.get(event.type, f"{event.type.replace('_', ' ')}" + (f" ({where})" if stage else "")).strip()


def body_of(hook: Webhook, event: Event, context: Context | None = None) -> bytes:
    """The delivery's JSON body: the full form (`type`, `timestamp`, `data`: the event, the item's
    summary as it is now, the link to its page) or the chat form (`{"text": …}`)."""
    link = f"{settings.WORKCENTER_BASE_URL}/work-items/{event.work_item_id}/"
    context = context or Context([event])
    item = context.summaries.get(event.work_item_id)
    stage = context.stages.get(event.action_id)
    if hook.payload == "chat":
        title = item.title if item is not None else event.work_item_id
        if stage:
            link += f"?stage={stage}"
        return json.dumps({"text": f"Work Center · “{title}”: {_what_happened(event, stage)} — {link}"},
                          ensure_ascii=False).encode()
    out = render.render(EventOut, event)
    return render.dumps({"type": event.type, "timestamp": out["created_at"], "data": {
        "event": out, "work_item": render.render(WorkItemSummaryOut, item) if item is not None else None,
        "stage_id": stage, "link": link}})


# --- one attempt over HTTP -------------------------------------------------------------------------

def post(url: str, body: bytes, headers: dict, allow: frozenset[str]) -> tuple[int | None, str]:
    """POST `body` to `url` under the safety rules: (status code or None, error text or "").
    The address checked is the one connected to (no second lookup a DNS change could turn)."""
    parts = urlsplit(url)
    refusal, address = rules.resolve_target(url, allow)
    if refusal:
        return None, f"refused: {refusal}"
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    cls = http.client.HTTPSConnection if https else http.client.HTTPConnection
    conn = cls(parts.hostname, port, timeout=rules.TIMEOUT_S)
    conn._create_connection = lambda addr, timeout, source=None: socket.create_connection(  # noqa: SLF001
        (address, addr[1]), timeout, source)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", path, body=body, headers={**headers, "Content-Type": "application/json",
                                                       "User-Agent": "WorkCenter-Webhooks/1"})
        response = conn.getresponse()
        text = response.read(rules.BODY_LIMIT)
        code = response.status
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500]
    finally:
        conn.close()
    if 200 <= code < 300:
        return code, ""
    if 300 <= code < 400:
        return code, f"redirects are not followed (to {response.getheader('Location') or '?'})"
    return code, f"HTTP {code}: {text.decode('utf-8', 'replace')[:500]}".rstrip(": ")


class Sender:
    """`threads` loops that each send one head at a time until `stop` is set."""

    def __init__(self, *, threads: int = 4, poll_s: float = 0.1, stop: threading.Event | None = None):
        self.threads, self.poll_s = max(1, threads), poll_s
        self.stop = stop or threading.Event()
        self.horizon = Horizon()
        self.allow = rules.allowed_hosts(settings.WORKCENTER_WEBHOOK_ALLOW_HOSTS)
        self.sent = self.failed = 0
        self.soonest = float("inf")  # monotonic time of the soonest retry this sender scheduled
        self.count_lock = threading.Lock()

    def run(self) -> None:
        workers = [threading.Thread(target=self._loop, name=f"webhooks-{i}", daemon=True) for i in range(self.threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    worked = self.step()
                except Exception:  # noqa: BLE001 (a database hiccup: log, wait, go on)
                    logger.exception("webhook sender step failed")
                    close_old_connections()
                    worked = False
                if not worked:
                    self.stop.wait(self._idle_wait())
        finally:
            connections.close_all()

    def _idle_wait(self) -> float:
        """Seconds an idle thread waits: the poll, or less when a retry this sender scheduled is due
        sooner (a webhook's failed head holds up the deliveries behind it)."""
        with self.count_lock:
            left = self.soonest - time.monotonic()
            if left <= 0:
                self.soonest = float("inf")
        return min(self.poll_s, max(0.005, left))

    def step(self) -> bool:
        """Send one due head and the deliveries right behind it (up to BATCH, stopping at the first
        failure), if there is one: whether one was sent (or tried)."""
        horizon = self.horizon.get()
        now = clock.now()
        if connection.vendor == "postgresql":
            with transaction.atomic():
                heads = _heads(horizon, now, 1)
                if not heads:
                    return False
                batch = heads + _followers(heads[0], horizon, BATCH - 1)
                self._send(batch, [None] * len(batch))
            return True
        hold = timedelta(seconds=CLAIM_S)
        for head in _heads(horizon, now, self.threads):
            until = services.delivery_claim(head["id"], head["claimed_until"], hold, now)
            if until is None:
                continue
            batch, claims = [head], [until]
            for row in _followers(head, horizon, BATCH - 1):
                claim = services.delivery_claim(row["id"], row["claimed_until"], hold, now)
                if claim is None:
                    break  # another sender holds it: stop here, in order
                batch.append(row)
                claims.append(claim)
            self._send(batch, claims)
            return True
        return False

    def _send(self, batch: list[dict], claims: list) -> None:
        """The deliveries of one webhook in event order, each recorded; after a failure the rest
        wait (SQLite: their claims are let go). PostgreSQL records the outcomes in one statement."""
        hook = Webhook.objects.get(pk=batch[0]["webhook_id"])
        events = Event.objects.in_bulk([row["event_id"] for row in batch])
        context = Context(events.values())
        with connection.cursor() as cur:
            writes = db.Writes(cur) if connection.vendor == "postgresql" else None
            for n, (row, claim) in enumerate(zip(batch, claims)):
                if not self._attempt(hook, row, claim, events.get(row["event_id"]), context, writes):
                    for rest, rest_claim in zip(batch[n + 1:], claims[n + 1:]):
                        if rest_claim is not None:
                            services.delivery_release(rest["id"], rest_claim)
                    break
            if writes is not None:
                writes.flush()

    def _attempt(self, hook: Webhook, head: dict, claimed_until, event: Event | None, context: Context,
                 writes) -> bool:
        """Send one delivery, again at once (after the first backoff steps, QUICK_RETRY_S at most
        in all) while it fails, and record the outcome; whether it was delivered."""
        tries, waited = 0, 0.0
        while True:
            tries += 1
            if event is None:
                code, error = None, ""
                note = "dropped: the event was removed (its work item was deleted) before it was sent"
                break
            body = body_of(hook, event, context)
            timestamp = int(time.time())
            msg_id = str(head["id"])
            code, error = post(hook.url, body, {
                "webhook-id": msg_id, "webhook-timestamp": str(timestamp),
                "webhook-signature": rules.signature(hook.secret, msg_id, timestamp, body)}, self.allow)
            note = error
            delay = rules.retry_delay(head["failures"] + tries)
            if error == "" or code is None or waited + delay > QUICK_RETRY_S or self.stop.is_set():
                break  # delivered, or a timeout / refusal (no quick retry), or out of quick retries
            logger.info("webhook %s delivery %s failed (%s), trying again: %s", hook.name, head["id"], code,
                        error[:200])
            time.sleep(delay)
            waited += delay
        ok = error == "" and (code is not None or event is None)
        now = clock.now()
        # PostgreSQL: inside the batch's transaction already (a savepoint would cost two round trips)
        with contextlib.nullcontext() if connection.in_atomic_block else transaction.atomic():
            due = services.delivery_record(head, claimed_until=claimed_until, ok=ok, status_code=code, error=note,
                                           now=now, tries=tries, writes=writes)
        with self.count_lock:
            self.sent += ok
            self.failed += tries - ok
            if due is not None:  # an idle thread wakes for it rather than a whole poll later
                self.soonest = min(self.soonest, time.monotonic() + (due - now).total_seconds())
        if not ok:
            logger.info("webhook %s delivery %s failed (%s): %s", hook.name, head["id"], code, error[:200])
        return ok
