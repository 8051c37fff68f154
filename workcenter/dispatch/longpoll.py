"""Long-poll claims: `POST /api/v1/claims` with `wait_ms` parks until an action may be claimable.

The claim itself is the API's ordinary route, run by the ordinary request cycle (a request thread
and its database connection, for the few milliseconds an attempt takes). What this ASGI
middleware adds is the wait between attempts, as a coroutine on the server's event loop: a parked
request holds **no request thread and no database connection**.

Wake-ups (wake.py). Every process that commits an event that may make an action claimable sends
one `claims.wake` to the group `workcenter.claims` after the commit; each web process listens to
that group with one channel (`Parked`, started by its first long-poll) and, per wake, wakes
**one** of its parked requests, oldest first. On the embedded default (the in-memory layer) the
commits of other processes reach this one through `watch`, the event pump, kept running while a
claim waits (workcenter/asgi.py passes it). The woken request claims again: when it gets an
action and the claim saw another claimable beside it (the `more` hint: one commit can make
several claimable — a stage with several dependants, a plan's parallel branches), it wakes the
next one; when it gets nothing it parks again — so a new action costs at most one failed claim
per web process, not one per parked worker.

Hints. What an attempt tells its long-poll claim comes back as values, never as headers: each
attempt's scope carries a fresh dict under `CLAIM_HINTS` (workcenter/constants.py) that the
claim route fills (workcenter/api.py: `contended`, `more`); the client's answer is the route's,
untouched.

No lost wake-up: a request registers as parked *before* each attempt; a wake that arrives while
it is attempting is kept and makes it attempt again at once instead of parking, and a request
that leaves (claimed, deadline, disconnect) holding a wake passes it on. At the deadline the
answer is 204, as without `wait_ms`. A client that disconnects while parked is forgotten at once.
Across processes this needs the Redis layer (or the event pump, for events other processes
commit on the embedded default). An attempt that found nothing because it skipped a candidate
another transaction held for a moment (PostgreSQL: the item's other branch being claimed, a
progress report; services.claim_attempt, the `contended` hint) looks again after
5, 10, 20 and 40 ms before it parks, since those holders commit no event and send no wake.
Otherwise a parked request does not retry on a timer: P parked requests
retrying every few seconds would be P claims a few seconds apart, whatever happens. A wake that
never comes (a layer message dropped) costs at most the client's `wait_ms`: its next claim
attempts at once.

Bounds. A parked claim holds a connection (a file descriptor) and some memory for up to 30 s, so
how many may wait is bounded, per token (WORKCENTER_LONG_POLL_MAX_PER_TOKEN) and per process
(WORKCENTER_LONG_POLL_MAX_PER_PROCESS). A claim counts from its first empty attempt — the route
has authenticated it by then, so made-up tokens never take a place — until it answers; past
either bound that attempt's 204 becomes a 429 `too_many_waiting_claims` with `Retry-After`, at
once, instead of a wait. The token is the prefix of the presented `wc_<prefix>_<secret>` (the
secret proved right by that attempt; no lookup here), a session its cookie. What waits is the
claim's two fields re-encoded (`Claim`), not the bytes the client sent.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time

from django.conf import settings
from django.http.cookie import parse_cookie

from workcenter.api import error_body
from workcenter.auth import split_token
from workcenter.constants import CLAIM_HINTS
from workcenter.instruments import EMPTY_WAKES, PARKED_CLAIMS

from .wake import claims_layer, parked

logger = logging.getLogger("workcenter.claims")

CLAIMS_PATH = "/api/v1/claims"
MAX_WAIT_MS = 30_000
# A claim that skipped a candidate another transaction held for a moment (services.claim_attempt)
# looks again after these pauses, then parks as usual. A parked claim needs a wake, and the
# holders that skip others — a claim of the item's other branch, a progress report, a renewal —
# commit no event that would send one.
CONTENDED_RETRY_SECONDS = (0.005, 0.01, 0.02, 0.04)
# A claim body is a few dozen bytes (a boot id of at most 200 characters); a larger one goes to the
# route as it is, without a wait. The bound is low because daphne keeps its own copy of a body for
# as long as the request lasts, whatever this middleware drops.
MAX_BODY = 8 * 1024
CLAIM_FIELDS = ("owner_boot_id", "lease_ms")  # what an attempt after the first needs of the body
RETRY_AFTER_SECONDS = 5  # a claim refused a wait comes back after this (or its wait_ms, if shorter)


class Claim:
    """What a long-poll claim keeps while it waits: the body its attempts send — the client's bytes
    for the first attempt (the route validates all of them), then only CLAIM_FIELDS re-encoded —,
    its `wait_ms` and whose it is."""

    __slots__ = ("body", "compact", "wait_ms", "token")

    def __init__(self, body: bytes, compact: bytes, wait_ms: int, token: bytes) -> None:
        self.body, self.compact, self.wait_ms, self.token = body, compact, wait_ms, token

    def shrink(self) -> None:
        """After the first attempt: from now on the compact body, the client's bytes dropped."""
        if self.compact:
            self.body, self.compact = self.compact, b""


def _claim(body: bytes, scope) -> Claim | None:
    """The long-poll claim of a body whose `wait_ms` is a valid one above 0, else None (the route
    validates the body)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    value = data.get("wait_ms")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a JSON number without a fractional part is the integer it names
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_WAIT_MS:
        return None
    compact = json.dumps({k: data[k] for k in CLAIM_FIELDS if k in data}, separators=(",", ":")).encode()
    return Claim(body, compact, value, _token_of(scope))


def _token_of(scope) -> bytes:
    """Whose claim this is, from its headers alone: the token's prefix (the route checks the secret),
    else a digest of the session cookie. TokenAuth strips and splits the header the same way."""
    authorization = cookie = None
    for name, value in scope.get("headers") or ():
        name = bytes(name).lower()
        if name == b"authorization":
            authorization = bytes(value)
        elif name == b"cookie":
            cookie = bytes(value)
    if authorization is not None:
        _, _, raw = authorization.decode("latin-1").strip().partition(" ")
        parts = split_token(raw.strip())
        return b"token:" + (parts[0] if parts else raw.strip()).encode("latin-1", "replace")
    session = parse_cookie(cookie.decode("latin-1")).get(settings.SESSION_COOKIE_NAME, "") if cookie else ""
    return b"session:" + hashlib.sha256(session.encode("utf-8", "replace")).digest()


def _refusal(start: dict, scope: str, claim: Claim) -> tuple[dict, dict]:
    """A 429 instead of a wait, with the headers of the attempt's answer (the security headers the
    middleware chain added) but its own body."""
    limit = (settings.WORKCENTER_LONG_POLL_MAX_PER_TOKEN if scope == "token"
             else settings.WORKCENTER_LONG_POLL_MAX_PER_PROCESS)
    retry_after = max(1, min(RETRY_AFTER_SECONDS, math.ceil(claim.wait_ms / 1000)))
    whose = "this token" if scope == "token" else "this server process"
    body = json.dumps(error_body(
        "too_many_waiting_claims",
        f"{limit} claims of {whose} are waiting already: nothing is claimable now; claim again after "
        f"{retry_after} s", {"limit": limit, "scope": scope})).encode()
    kept = [h for h in start.get("headers") or []
            if bytes(h[0]).lower() not in (b"content-type", b"content-length", b"retry-after")]
    headers = kept + [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                      (b"retry-after", str(retry_after).encode())]
    return ({"type": "http.response.start", "status": 429, "headers": headers},
            {"type": "http.response.body", "body": body})


class LongPollClaims:
    """ASGI middleware in front of the HTTP application (see the module doc). `watch`: what brings
    other processes' commits, and so their wakes, into this process while a claim waits (the event
    pump of the embedded default): `await watch.consumer_joined(name)`, `watch.consumer_left(name)`."""

    def __init__(self, app, watch=None) -> None:
        self.app = app
        self.watch = watch

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != CLAIMS_PATH:
            return await self.app(scope, receive, send)
        body, whole = await _read(receive)
        claim = _claim(body, scope) if whole else None
        layer = claims_layer()
        if claim is None or layer is None:
            return await self.app(scope, _replay(body, receive, whole), send)
        del body  # the claim holds it until its first attempt, and then only what it needs
        await self.long_poll(scope, receive, send, claim, layer)

    async def long_poll(self, scope, receive, send, claim: Claim, layer) -> None:
        deadline = time.monotonic() + claim.wait_ms / 1000
        await parked.listen(layer)  # subscribed before the first attempt: no wake is missed
        watcher = f"claims!{id(scope)}"
        if self.watch is not None:  # other processes' commits (and their wakes) on the embedded default
            await self.watch.consumer_joined(watcher)
        gone = asyncio.ensure_future(_disconnected(receive))
        wakes = 0  # wakes this request took: an empty attempt after one is a failed claim
        contended = 0  # attempts in a row that skipped a candidate another transaction held
        admitted = False  # counted among the waiting claims (parked.admit), from its first empty attempt
        try:
            while True:
                future = parked.park()
                tried_at = time.time()
                start, chunks, hints = await self._attempt(scope, claim.body)
                claim.shrink()
                contended = contended + 1 if hints.get("contended") else 0
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("claim attempt %.6f %.6f %s%s #%x", tried_at, time.time(), start["status"],
                                 " contended" if contended else "", id(scope))
                if wakes and start["status"] == 204:
                    EMPTY_WAKES.inc()
                wakes = 0
                remaining = deadline - time.monotonic()
                if start["status"] != 204 or remaining <= 0 or gone.done():
                    parked.leave(future)  # a wake it holds goes on
                    if hints.get("more"):  # its claim saw another claimable action: the next one tries
                        parked.wake_one()
                    if not gone.done():
                        await send(start)
                        for chunk in chunks:
                            await send(chunk)
                    return
                if not admitted:
                    refused = parked.admit(claim.token)
                    if refused is not None:  # past a bound: answered now, not parked
                        parked.leave(future)
                        for message in _refusal(start, refused, claim):
                            await send(message)
                        return
                    admitted = True
                if 0 < contended <= len(CONTENDED_RETRY_SECONDS):
                    # its commit wakes nobody (a claim, a progress report): look again shortly
                    remaining = min(remaining, CONTENDED_RETRY_SECONDS[contended - 1])
                PARKED_CLAIMS.inc()
                parked_at = time.time()
                try:
                    await asyncio.wait({future, gone}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    PARKED_CLAIMS.dec()
                    if logger.isEnabledFor(logging.DEBUG):  # when a worker sat idle (wall clock, for tests)
                        logger.debug("claim parked %.6f %.6f #%x", parked_at, time.time(), id(scope))
                if gone.done():
                    parked.leave(future)
                    return
                woken = future.done()
                if not woken:
                    parked.leave(future)  # the deadline (one last attempt, then 204), or a retry
                wakes += woken
        finally:
            if admitted:
                parked.release(claim.token)
            gone.cancel()
            if self.watch is not None:
                self.watch.consumer_left(watcher)

    async def _attempt(self, scope, body: bytes) -> tuple[dict, list[dict], dict]:
        """One claim through the HTTP application: its response messages, held, and the hints the
        route gave (CLAIM_HINTS: `contended`, `more`)."""
        messages: list[dict] = []
        hints: dict = {}

        async def hold(message):
            messages.append(message)

        await self.app({**scope, CLAIM_HINTS: hints}, _replay(body, None, True), hold)
        start = next(m for m in messages if m["type"] == "http.response.start")
        return start, [m for m in messages if m["type"] == "http.response.body"], hints


async def _read(receive) -> tuple[bytes, bool]:
    """The body up to MAX_BODY; (what was read, whether that is all of it)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > MAX_BODY:
            return b"".join(chunks), False


def _replay(body: bytes, receive, whole: bool):
    """A `receive` that gives `body` first (with more to come from `receive` when not whole),
    then waits for the client to go."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not whole}
        if receive is not None:
            return await receive()
        await asyncio.Future()  # a held attempt never reads past its body

    return replay


async def _disconnected(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
