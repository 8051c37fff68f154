"""Webhooks' pure rules: which events a webhook takes, how a delivery is signed, when a failed one
is tried again, and which targets may be called (docs/webhooks.md).

Signatures follow the Standard Webhooks scheme: the headers `webhook-id` (the delivery's id, the
same on every attempt), `webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature`
(`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the secret's key, the bytes that
follow `whsec_` in base64), so a receiver verifies with any library of that scheme.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import random
import secrets
import socket
from datetime import timedelta
from urllib.parse import urlsplit

from ..errors import InvalidInput

SECRET_PREFIX = "whsec_"
TIMEOUT_S = 10.0  # connect and each read of one attempt
BODY_LIMIT = 64 * 1024  # the most of a response body read
# retries: the first after a few ms (a failure is often a passing one, and the webhook's later
# deliveries wait behind it), doubling up to 15 minutes, each with jitter (half to all of it): a
# receiver down for 10 s is tried again within about 10 s of its return, one down for hours every
# 15 minutes; a webhook whose head has failed for a day is paused (its deliveries wait for a person)
FIRST_RETRY_S = 0.005
LONGEST_RETRY_S = 15 * 60
PAUSE_AFTER = timedelta(hours=24)

# the event catalogue (event_types.EventType) by the names a person picks from
PRESETS: dict[str, tuple[str, ...]] = {
    "needs_me": ("action.waiting", "action.failed", "action.retry_exhausted", "action.marked_failed"),
    "finished": ("work_item.completed", "work_item.cancelled"),
}
PAYLOADS = ("full", "chat")


def event_types_of(requested, catalogue) -> list[str]:
    """The event types a webhook takes, from names of the catalogue and presets (`preset:<name>`),
    each once, in catalogue order; InvalidInput names the unknown ones."""
    if not isinstance(requested, (list, tuple)) or not requested:
        raise InvalidInput("event_types must name at least one event type or preset",
                           extra={"errors": [{"field": "event_types", "message": "required: a non-empty list"}]})
    wanted: set[str] = set()
    unknown = []
    for name in requested:
        if isinstance(name, str) and name.startswith("preset:") and name[7:] in PRESETS:
            wanted.update(PRESETS[name[7:]])
        elif isinstance(name, str) and name in catalogue:
            wanted.add(name)
        else:
            unknown.append(name)
    if unknown:
        raise InvalidInput(f"unknown event types: {', '.join(map(str, unknown))} (the event catalogue, or "
                           f"{', '.join('preset:' + p for p in PRESETS)})",
                           extra={"errors": [{"field": "event_types", "message": f"unknown: {unknown}"}]})
    return [t for t in catalogue if t in wanted]


def type_match(event_types: list[str]) -> str:
    """The form the outbox matches in SQL: `|a|b|` (an event of type t is taken when `|t|` is in it)."""
    return "|" + "|".join(event_types) + "|"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header of one attempt."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def retry_delay(failures: int, rand=random.random) -> float:
    """Seconds to wait after the `failures`-th failure in a row (exponential, with jitter)."""
    full = min(LONGEST_RETRY_S, FIRST_RETRY_S * (2 ** min(max(failures - 1, 0), 30)))
    return full * (0.5 + rand() / 2)


# --- which targets may be called -----------------------------------------------------------------

def allowed_hosts(setting: str) -> frozenset[str]:
    """WORKCENTER_WEBHOOK_ALLOW_HOSTS: host names or addresses, comma-separated, lower case."""
    return frozenset(h.strip().lower().strip("[]") for h in (setting or "").split(",") if h.strip())


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_reserved or ip.is_multicast
            or ip.is_unspecified)


def target_refusal(url: str, allow: frozenset[str]) -> str | None:
    """Why `url` may not be called (None: it may); see `resolve_target`."""
    return resolve_target(url, allow)[0]


def resolve_target(url: str, allow: frozenset[str]) -> tuple[str | None, str | None]:
    """(why `url` may not be called, or None; the address to connect to). Only http(s) with a host;
    a target on a loopback, link-local, private or reserved address only when its host is named in
    `allow`; every address the host resolves to must be allowed, and the first is the one to use
    (connecting to it, not looking the name up again, leaves no room for a changed answer)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"the URL is malformed ({exc})", None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "the URL must be http:// or https:// with a host", None
    if parts.username or parts.password:
        return "the URL may not carry a user name or password", None
    host = parts.hostname.lower()
    try:
        addresses = [host] if _is_address(host) else [
            info[4][0] for info in socket.getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)]
    except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode (a label over 63)
        return f"the host {host} does not resolve ({exc})", None
    if host not in allow:
        for address in addresses:
            if _private(address):
                return (f"the host {host} is on a loopback, link-local or private address ({address}); name it in "
                        "WORKCENTER_WEBHOOK_ALLOW_HOSTS to allow it"), None
    return None, addresses[0]


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
