"""Pure normalisation helpers (no database access).

Implements DOMAIN §7.2–§7.3 (terminal submission normalisation and completion validation),
§12.1 (counters), §12.3 (response cap), §12.4 (evidence), §12.5 (checkpoint) and §12.7 (session
context); workcenter.domain.instructions renders them into instructions (§12.9). Every key produced here is snake_case (DOMAIN §0);
reference camelCase spellings are accepted on input only as a fallback, so imported reference data
maps cleanly.

Evidence and checkpoints are normalised on write *and on read* (§12.4, §12.5): `evidence_on_read`,
`checkpoint_on_read` and `context_on_read` (the evidence inside context entries) are what the
model fields apply to every stored value they load (workcenter/fields.py), so rows written by an
older version, imported from a reference database or edited by hand read as this store writes
them. Every normaliser here is idempotent, and a stored value that already is in normal form —
everything this store writes — is recognised by a cheap check and returned as it is.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any
from urllib.parse import urlsplit

from workcenter.errors import InvalidInput
from workcenter.choices import ActionType, RunStatus

__all__ = [
    "COUNTER_FIELDS",
    "COUNTER_KEYS",
    "RESPONSE_CAP",
    "OUTCOMES",
    "REVIEW_DECISIONS",
    "EVIDENCE_KINDS",
    "EVIDENCE_STATUSES",
    "CHECK_STATUSES",
    "normalize_counters",
    "cap_response",
    "normalize_evidence",
    "normalize_checkpoint",
    "evidence_on_read",
    "checkpoint_on_read",
    "context_on_read",
    "BRIEF_FIELDS",
    "normalize_brief",
    "storable_text",
    "UNSTORABLE",
    "normalize_contract_patch",
    "normalize_acceptance_checks",
    "normalize_submission",
    "normalize_session_context",
]

# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------

from workcenter.constants import COUNTER_FIELDS, MAX_INT64, RESPONSE_CAP  # noqa: E402,F401  (re-exported)

# The outcomes a worker submits (§7.2): the run statuses a submission ends a run in.
OUTCOMES: tuple[str, ...] = tuple(
    s.value for s in (RunStatus.COMPLETED, RunStatus.WAITING, RunStatus.RETRYABLE, RunStatus.FAILED))
REVIEW_DECISIONS = ("approved", "changes_requested")

EVIDENCE_KINDS = ("text", "tool", "test", "file", "link", "pr", "commit")
EVIDENCE_STATUSES = ("completed", "passed", "failed", "error", "pending")
EVIDENCE_LABEL_MAX = 500
EVIDENCE_REF_MAX = 1000
EVIDENCE_MAX_ITEMS = 50

CHECKPOINT_MAX_EVENTS = 16
CHECKPOINT_NAME_MAX = 80
CHECKPOINT_RESOURCE_MAX = 240

BRIEF_FIELDS = ("objective", "approach", "expected_outcome")
BRIEF_FIELD_MAX = 2000

CHECK_STATUSES = ("passed", "deferred", "not_applicable")
CHECK_EVIDENCE_MAX = 1000
# Action types whose completion requires every acceptance check to be `passed` (§7.3 step 3);
# `review` joins them only when its decision is `approved`.
VERIFICATION_TYPES = (ActionType.TEST.value, ActionType.DELIVER.value)

SESSION_ROLES = ("user", "assistant")
SESSION_MESSAGE_MAX = 4000
SESSION_MAX_MESSAGES = 48
SESSION_MAX_CHARS = 24000
VP_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")

# Messages (DOMAIN §17 keywords).
MSG_WAITING_REASON = "waiting outcome requires waitingReason"
MSG_ONLY_TRIAGE_PATCH = "Only triage may submit a WorkItem contractPatch"
MSG_REVIEW_DECISION = "Completed review requires approved or changes_requested"
MSG_EVIDENCE_REQUIRED = "Completed Action requires at least one concrete evidence item"
MSG_CHECKS_REQUIRED = (
    "Completed Action requires one ordered acceptance check with evidence for every acceptance criterion"
)

_CAMEL_ALIASES = {
    "llm_request_count": "llmRequestCount",
    "loop_count": "loopCount",
    "tool_count": "toolCount",
    "input_tokens": "inputTokens",
    "output_tokens": "outputTokens",
    "cache_read_tokens": "cacheReadTokens",
    "cache_write_tokens": "cacheWriteTokens",
    "total_tokens": "totalTokens",
    "waiting_reason": "waitingReason",
    "review_decision": "reviewDecision",
    "contract_patch": "contractPatch",
    "acceptance_checks": "acceptanceChecks",
    "acceptance_criteria": "acceptanceCriteria",
    "expected_outcome": "expectedOutcome",
    "tool_events": "toolEvents",
    "is_error": "isError",
    "vp_id": "vpId",
    "system_only": "systemOnly",
    "source_title": "sourceTitle",
    "stage_id": "stageId",
}
# every spelling a counter is read under (§12.1): snake_case first, then the camelCase alias
COUNTER_KEYS: tuple[str, ...] = tuple(COUNTER_FIELDS) + tuple(_CAMEL_ALIASES[f] for f in COUNTER_FIELDS)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def read_key(obj: dict, key: str, default: Any = None) -> Any:
    """Read `key` (snake_case) from `obj`, falling back to its reference camelCase spelling."""
    if key in obj:
        return obj[key]
    alias = _CAMEL_ALIASES.get(key)
    if alias is not None and alias in obj:
        return obj[alias]
    return default


def _has(obj: dict, key: str) -> bool:
    alias = _CAMEL_ALIASES.get(key)
    return key in obj or (alias is not None and alias in obj)


# What no database stores in text: NUL, and surrogates (a Python string that holds one holds it
# unpaired, so it cannot be encoded as UTF-8). PostgreSQL refuses both; every database refuses
# them alike.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> bool:
    """`text` holds no NUL and no unpaired surrogate, so every database can store it."""
    return UNSTORABLE.search(text) is None


def stringify(value: Any) -> str:
    """Stringify like a JSON client would expect: None ⇒ "", bools lower-case, containers as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _stringify_or_none(value: Any) -> str | None:
    return None if value is None else stringify(value)


def _trimmed_str(value: Any) -> str:
    """A string trimmed of surrounding whitespace; non-strings ⇒ ""."""
    return value.strip() if isinstance(value, str) else ""


def _clip(text: str, limit: int) -> str:
    """A trimmed string cut to `limit` code points, trimmed again where the cut ends in whitespace
    (so that normalising a normalised value changes nothing)."""
    text = text.strip()
    return text[:limit].rstrip() if len(text) > limit else text


def _is_clipped(value: Any, limit: int) -> bool:
    """`value` is a non-empty string `_clip` leaves as it is."""
    return (value.__class__ is str and 0 < len(value) <= limit
            and not value[0].isspace() and not value[-1].isspace())


# ---------------------------------------------------------------------------------------------
# §12.1 Counters
# ---------------------------------------------------------------------------------------------


def _counter_value(value: Any) -> int:
    """A counter as a non-negative int a 64-bit column holds; anything else is 0."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value if 0 <= value <= MAX_INT64 else 0
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or value < 0 or value > MAX_INT64:
            return 0
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0
        try:
            number = float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            return 0
        return _counter_value(number)
    return 0


def normalize_counters(raw: dict | None) -> dict:
    """The eight execution counters (§12.1), each a non-negative int; invalid input ⇒ 0."""
    source = raw if isinstance(raw, dict) else {}
    return {field: _counter_value(read_key(source, field)) for field in COUNTER_FIELDS}


# ---------------------------------------------------------------------------------------------
# §12.3 Response cap
# ---------------------------------------------------------------------------------------------


def cap_response(value: Any) -> str:
    """Stringify (None ⇒ "") and keep the first 65 536 code points (§12.3)."""
    return stringify(value)[:RESPONSE_CAP]


# ---------------------------------------------------------------------------------------------
# §12.4 Evidence
# ---------------------------------------------------------------------------------------------


def _normalize_evidence_item(item: Any) -> dict | None:
    if isinstance(item, str):
        label = _clip(item, EVIDENCE_LABEL_MAX)
        return {"kind": "text", "label": label} if label else None
    if not isinstance(item, dict):
        return None
    tool = item.get("tool")
    if isinstance(tool, str):
        label = _clip(tool, EVIDENCE_LABEL_MAX)
        if not label:
            return None
        return {
            "kind": "tool",
            "label": label,
            "status": "error" if read_key(item, "is_error") is True else "completed",
        }
    kind = item.get("kind")
    if not isinstance(kind, str) or kind not in EVIDENCE_KINDS:
        return None
    label = _clip(_trimmed_str(item.get("label")), EVIDENCE_LABEL_MAX)
    if not label:
        return None
    out: dict[str, Any] = {"kind": kind, "label": label}
    ref = _clip(_trimmed_str(item.get("ref")), EVIDENCE_REF_MAX)
    if ref:
        out["ref"] = ref
    status = item.get("status")
    if isinstance(status, str) and status in EVIDENCE_STATUSES:
        out["status"] = status
    return out


def normalize_evidence(value: Any) -> list[dict]:
    """Evidence normalisation (§12.4): at most 50 valid items, raw fields never kept."""
    if not isinstance(value, list):
        return []
    out: list[dict] = []
    for item in value:
        normalized = _normalize_evidence_item(item)
        if normalized is None:
            continue
        out.append(normalized)
        if len(out) >= EVIDENCE_MAX_ITEMS:
            break
    return out


_EVIDENCE_KEYS = frozenset(("kind", "label", "ref", "status"))
_EVIDENCE_KIND_SET = frozenset(EVIDENCE_KINDS)
_EVIDENCE_STATUS_SET = frozenset(EVIDENCE_STATUSES)


def _evidence_is_normal(value: list) -> bool:
    """`normalize_evidence(value) == value`, decided without building anything: at most 50
    objects of only `kind` (known), `label` and optional `ref` (trimmed, within their caps) and
    `status` (known)."""
    if len(value) > EVIDENCE_MAX_ITEMS:
        return False
    keys, kinds, statuses = _EVIDENCE_KEYS, _EVIDENCE_KIND_SET, _EVIDENCE_STATUS_SET
    for item in value:
        if item.__class__ is not dict or not keys.issuperset(item):
            return False
        kind = item.get("kind")
        if kind.__class__ is not str or kind not in kinds:
            return False
        if not _is_clipped(item.get("label"), EVIDENCE_LABEL_MAX):
            return False
        if "ref" in item and not _is_clipped(item["ref"], EVIDENCE_REF_MAX):
            return False
        if "status" in item:
            status = item["status"]
            if status.__class__ is not str or status not in statuses:
                return False
    return True


def evidence_on_read(value: Any) -> list[dict]:
    """Stored evidence as every read shows it (§12.4 applies on read): `value` itself when it is
    already normal, else its normalised copy."""
    if value.__class__ is list and _evidence_is_normal(value):
        return value
    return normalize_evidence(value)


def context_on_read(value: Any) -> list:
    """Stored action context as every read shows it: the `evidence` of each entry normalised on
    read (§12.4; reused context never leaks raw fields, §12.6). Not a list ⇒ `[]`. Entries are
    otherwise kept as stored; `value` itself is returned when nothing changes."""
    if value.__class__ is not list:
        return []
    out = None
    for i, entry in enumerate(value):
        if entry.__class__ is dict and "evidence" in entry:
            evidence = entry["evidence"]
            if evidence.__class__ is list and _evidence_is_normal(evidence):
                continue
            if out is None:
                out = list(value)
            out[i] = {**entry, "evidence": normalize_evidence(evidence)}
    return value if out is None else out


# ---------------------------------------------------------------------------------------------
# §12.5 Checkpoint
# ---------------------------------------------------------------------------------------------


def _reduce_resource(resource: str) -> str | None:
    """http(s) URLs ⇒ scheme://host[:port]/path (credentials, query, fragment removed).

    Other resources are kept as given. An http(s) URL that cannot be parsed is dropped (None) so
    that credentials in it can never leak.
    """
    if not re.match(r"(?i)https?://", resource):
        return resource
    try:
        parts = urlsplit(resource)
        netloc = parts.netloc.rpartition("@")[2]
        _ = parts.port  # validates the port; raises ValueError when malformed
    except ValueError:
        return None
    if not netloc:
        return None
    return f"{parts.scheme.lower()}://{netloc}{parts.path}"


def _normalize_tool_event(event: Any) -> dict | None:
    if not isinstance(event, dict):
        return None
    name = _clip(_trimmed_str(event.get("name")), CHECKPOINT_NAME_MAX)
    if not name:
        return None
    out: dict[str, Any] = {
        "name": name,
        "status": "error" if event.get("status") == "error" else "completed",
    }
    resource = _trimmed_str(event.get("resource"))
    if resource:
        reduced = _clip(_reduce_resource(resource) or "", CHECKPOINT_RESOURCE_MAX)
        if reduced:
            out["resource"] = reduced
    return out


def normalize_checkpoint(value: Any) -> dict | None:
    """Checkpoint normalisation (§12.5): `{version: 1, tool_events}` with the last 16 valid events."""
    if not isinstance(value, dict):
        return None
    raw_events = read_key(value, "tool_events")
    events = raw_events if isinstance(raw_events, list) else []
    valid = [e for e in (_normalize_tool_event(ev) for ev in events) if e is not None]
    return {"version": 1, "tool_events": valid[-CHECKPOINT_MAX_EVENTS:]}


_HTTP_URL = re.compile(r"(?i)https?://")
# An http(s) URL `_reduce_resource` returns unchanged, recognised without parsing it: lower-case
# scheme, a plain host name without port or credentials, a path without query, fragment or
# whitespace. Other URLs are checked by reducing them.
_PLAIN_URL = re.compile(r"https?://[A-Za-z0-9._~-]+(?:/[^?#@\s]*)?")


def _tool_event_is_normal(event: Any) -> bool:
    if event.__class__ is not dict:
        return False
    status = event.get("status")
    if (status != "completed" and status != "error") or not _is_clipped(event.get("name"), CHECKPOINT_NAME_MAX):
        return False
    size = len(event)
    if size == 2:
        return True
    resource = event.get("resource")
    if size != 3 or not _is_clipped(resource, CHECKPOINT_RESOURCE_MAX):
        return False
    return (resource[0] not in "hH" or not _HTTP_URL.match(resource) or _PLAIN_URL.fullmatch(resource) is not None
            or _clip(_reduce_resource(resource) or "", CHECKPOINT_RESOURCE_MAX) == resource)


def _checkpoint_is_normal(value: dict) -> bool:
    """`normalize_checkpoint(value) == value` without building anything."""
    if len(value) != 2:
        return False
    version, events = value.get("version"), value.get("tool_events")
    if version.__class__ is not int or version != 1 or events.__class__ is not list:
        return False
    if len(events) > CHECKPOINT_MAX_EVENTS:
        return False
    for event in events:
        if not _tool_event_is_normal(event):
            return False
    return True


def checkpoint_on_read(value: Any) -> dict | None:
    """A stored checkpoint as every read shows it (§12.5, normalised on read as on write):
    `value` itself when it is already normal, else its normalised copy (a non-object ⇒ None)."""
    if value is None:
        return None
    if value.__class__ is dict and _checkpoint_is_normal(value):
        return value
    return normalize_checkpoint(value)


# ---------------------------------------------------------------------------------------------
# Brief
# ---------------------------------------------------------------------------------------------


def normalize_brief(raw: Any, default: dict | None = None) -> dict | None:
    """`{objective, approach, expected_outcome}`: trimmed strings ≤ 2 000.

    A field that is missing, not a string or blank comes from `default` (normalised the same way,
    else ""). A non-object `raw` yields the normalised default, or None without one.
    """
    base: dict[str, str] | None = None
    if isinstance(default, dict):
        base = {f: _trimmed_str(read_key(default, f))[:BRIEF_FIELD_MAX] for f in BRIEF_FIELDS}
    if not isinstance(raw, dict):
        return dict(base) if base is not None else None
    out: dict[str, str] = {}
    for field in BRIEF_FIELDS:
        text = _trimmed_str(read_key(raw, field))[:BRIEF_FIELD_MAX]
        out[field] = text if text else (base[field] if base is not None else "")
    return out


# ---------------------------------------------------------------------------------------------
# §7.2 / §7.3 Submission
# ---------------------------------------------------------------------------------------------


def normalize_contract_patch(value: Any) -> dict | None:
    """§7.2 contract patch: `goal` (non-blank, trimmed) and `acceptance_criteria` (list, else raise).

    Non-objects are ignored (None); a patch with nothing kept is treated as absent (None).
    """
    if not isinstance(value, dict):
        return None
    patch: dict[str, Any] = {}
    goal = _trimmed_str(value.get("goal"))
    if goal:
        patch["goal"] = goal
    if _has(value, "acceptance_criteria"):
        criteria = read_key(value, "acceptance_criteria")
        if not isinstance(criteria, list):
            raise InvalidInput(
                "contractPatch acceptance_criteria must be a list",
                fields=["contract_patch"],
            )
        cleaned = [stringify(c).strip() for c in criteria]
        patch["acceptance_criteria"] = [c for c in cleaned if c]
    return patch or None


def normalize_acceptance_checks(value: Any) -> list[dict]:
    """Checks as stored: each object entry reduced to `{criterion, status, evidence}` (trimmed)."""
    if not isinstance(value, list):
        return []
    out: list[dict] = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        status = entry.get("status")
        out.append(
            {
                "criterion": _trimmed_str(entry.get("criterion")),
                "status": status.strip() if isinstance(status, str) else "",
                "evidence": _trimmed_str(entry.get("evidence"))[:CHECK_EVIDENCE_MAX],
            }
        )
    return out


def _checks_match(raw_checks: list, criteria: list[str]) -> bool:
    """§7.3 step 2 on the raw list: one object per criterion, same order, valid status, evidence."""
    if len(raw_checks) != len(criteria):
        return False
    for entry, criterion in zip(raw_checks, criteria):
        if not isinstance(entry, dict):
            return False
        if _trimmed_str(entry.get("criterion")) != stringify(criterion).strip():
            return False
        status = entry.get("status")
        if not isinstance(status, str) or status.strip() not in CHECK_STATUSES:
            return False
        if not _trimmed_str(entry.get("evidence"))[:CHECK_EVIDENCE_MAX]:
            return False
    return True


def normalize_submission(raw: dict, *, action_type: str, criteria: list[str]) -> dict:
    """Normalise (§7.2) and validate (§7.3) a terminal submission.

    Hard errors raise `InvalidInput`; validation failures downgrade the outcome to `failed` with an
    error text. `criteria` are the item's current acceptance criteria.
    """
    source = raw if isinstance(raw, dict) else {}

    outcome = source.get("outcome")
    if not isinstance(outcome, str) or outcome not in OUTCOMES:
        raise InvalidInput(
            f"Invalid Run outcome: {outcome!r} (expected one of {', '.join(OUTCOMES)})",
            fields=["outcome"],
        )

    decision = read_key(source, "review_decision")
    review_decision = decision if isinstance(decision, str) and decision in REVIEW_DECISIONS else None
    contract_patch = normalize_contract_patch(read_key(source, "contract_patch"))
    plan = source.get("plan")
    raw_checks = read_key(source, "acceptance_checks")
    raw_checks = raw_checks if isinstance(raw_checks, list) else []
    checkpoint_raw = source.get("checkpoint")

    result: dict[str, Any] = {
        "outcome": outcome,
        "response": cap_response(source.get("response")),
        "summary": stringify(source.get("summary")),
        "evidence": normalize_evidence(source.get("evidence")),
        "waiting_reason": _stringify_or_none(read_key(source, "waiting_reason")),
        "error": _stringify_or_none(source.get("error")),
        "review_decision": review_decision,
        "contract_patch": contract_patch,
        "plan": plan if isinstance(plan, dict) else None,
        "acceptance_checks": normalize_acceptance_checks(raw_checks),
        "checkpoint": normalize_checkpoint(checkpoint_raw) if isinstance(checkpoint_raw, dict) else None,
    }
    result.update(normalize_counters(source))

    def downgrade(message: str) -> None:
        result["outcome"] = RunStatus.FAILED.value
        result["error"] = message

    if outcome == RunStatus.WAITING and not (result["waiting_reason"] or "").strip():
        raise InvalidInput(MSG_WAITING_REASON, fields=["waiting_reason"])

    if contract_patch is not None and action_type != ActionType.TRIAGE:
        downgrade(MSG_ONLY_TRIAGE_PATCH)
        result["contract_patch"] = None

    if action_type == ActionType.REVIEW and result["outcome"] == RunStatus.COMPLETED and review_decision is None:
        downgrade(MSG_REVIEW_DECISION)

    if result["outcome"] != RunStatus.COMPLETED:
        return result

    # §7.3 completion validation.
    if not result["evidence"]:
        downgrade(MSG_EVIDENCE_REQUIRED)
        return result

    patch = result["contract_patch"]
    if action_type == ActionType.TRIAGE and patch is not None and "acceptance_criteria" in patch:
        effective = list(patch["acceptance_criteria"])
    else:
        effective = [c for c in (criteria or [])]

    if not _checks_match(raw_checks, effective):
        downgrade(MSG_CHECKS_REQUIRED)
        return result

    must_pass = action_type in VERIFICATION_TYPES or (
        action_type == ActionType.REVIEW and review_decision == "approved"
    )
    if must_pass and any(check["status"] != "passed" for check in result["acceptance_checks"]):
        downgrade(f"{action_type} Action requires every acceptance check to pass")
    return result


# ---------------------------------------------------------------------------------------------
# §12.7 Session context
# ---------------------------------------------------------------------------------------------


def _message_excluded(message: dict) -> bool:
    for flag in ("internal", "system_only", "reflection", "is_reflection"):
        if read_key(message, flag):
            return True
    for key in ("kind", "type"):
        if message.get(key) in ("reflection", "internal", "system_only"):
            return True
    return False


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            block["text"]
            for block in content
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def normalize_session_context(messages: Any) -> list[dict]:
    """§12.7: `{role, vp_id, text}` user/assistant messages; newest 48 within 24 000 characters."""
    if not isinstance(messages, list):
        return []
    normalized: list[dict] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role not in SESSION_ROLES or _message_excluded(message):
            continue
        content = message["content"] if "content" in message else message.get("text")
        text = _message_text(content).strip()[:SESSION_MESSAGE_MAX]
        if not text:
            continue
        vp_id = None
        if role == "assistant":
            candidate = read_key(message, "vp_id")
            if isinstance(candidate, str) and VP_ID_RE.fullmatch(candidate):
                vp_id = candidate
        normalized.append({"role": role, "vp_id": vp_id, "text": text})

    newest = normalized[-SESSION_MAX_MESSAGES:]
    kept: list[dict] = []
    budget = SESSION_MAX_CHARS
    for message in reversed(newest):
        if budget <= 0:
            break
        text = message["text"]
        if len(text) > budget:
            text = text[-budget:]
            kept.append({**message, "text": text})
            break
        kept.append(message)
        budget -= len(text)
    kept.reverse()
    return kept
