"""What a caller sends to the work-item services (DOMAIN §8), cleaned before anything is read.

The text, criteria, id, workflow, origin and session ids of a create, the patch of an update, a
guidance, a retry's answer and its answers: each function returns the value the services store
or refuses with InvalidInput naming its field (API.md §0), so a refused call writes nothing.
Nothing here reads the database or the file system: a work_dir is checked against the allowed
roots and resolved by workcenter/work_dirs.py.
"""
from __future__ import annotations

from typing import Any

from workcenter.errors import InvalidInput, WorkflowError

from . import workflows

MAX_TEXT = 8000  # characters of a guidance or an answer
PATCH_FIELDS = ("title", "goal", "acceptance_criteria", "work_dir")  # what an update may change


def clean_text(value: Any, field: str, message: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(message, fields=[field])
    return value.strip()


def clean_criteria(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput("acceptance_criteria must be a list of strings", fields=["acceptance_criteria"])
    return [str(c).strip() for c in value if c is not None and str(c).strip()]


def clean_item_id(id: Any) -> str | None:
    """A caller's id for a new item, as given; None: the store makes one."""
    if id is not None and (not isinstance(id, str) or not id.strip() or len(id) > 200 or "/" in id
                           or id in (".", "..")):
        # the id is a URL path segment: `/`, `.` and `..` would address another route
        raise InvalidInput("id must be a non-blank string of at most 200 characters, without '/', "
                           "and neither '.' nor '..'", fields=["id"])
    return id


def clean_workflow(workflow: dict) -> dict:
    """A trusted caller's workflow, as the item's snapshot."""
    try:
        return workflows.normalize_workflow(workflow)
    except WorkflowError as exc:  # API.md §0: the 422 names its field
        raise InvalidInput(exc.message, fields=["workflow"]) from None


def clean_origin(origin: Any, trusted: bool) -> dict | None:
    if not isinstance(origin, dict):
        return None
    out = {}
    for key in ("session_id", "message_id", "created_by"):
        v = origin.get(key)
        out[key] = str(v) if v is not None else None
    out["trusted_session"] = bool(trusted)
    return out


def clean_session_ids(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    seen: list[str] = []
    for v in value:
        s = str(v).strip() if v is not None else ""
        if s and s not in seen:
            seen.append(s)
    return seen


def clean_patch(patch: dict | None) -> dict:
    """An update's patch: PATCH_FIELDS only, the text and criteria cleaned (None: left as it is);
    its work_dir as given, for the caller to resolve."""
    patch = {k: v for k, v in (patch or {}).items() if k in PATCH_FIELDS}
    if "title" in patch and patch["title"] is not None:
        patch["title"] = clean_text(patch["title"], "title", "title must be a non-blank string")
    if "goal" in patch and patch["goal"] is not None:
        patch["goal"] = clean_text(patch["goal"], "goal", "goal must be a non-blank string")
    if "acceptance_criteria" in patch and patch["acceptance_criteria"] is not None:
        patch["acceptance_criteria"] = clean_criteria(patch["acceptance_criteria"])
    return patch


def clean_guidance(guidance: Any, attachments: list | None, action_id: Any, revision: Any) -> tuple[str, list]:
    """(text, attachments) of a guidance: its text trimmed to MAX_TEXT, or when there is none and
    there are attachments, a sentence that says so; the action and revision it was given for are
    required."""
    text = guidance.strip()[:MAX_TEXT] if isinstance(guidance, str) else ""
    new_attachments = list(attachments or [])
    if not text and not new_attachments:
        raise InvalidInput("guidance or attachments are required", fields=["guidance"])
    if not text:
        text = f"The user added {len(new_attachments)} attachment(s) as additional context for this Action."
    if not isinstance(action_id, str) or not action_id or isinstance(revision, bool) or not isinstance(revision, int):
        raise InvalidInput("actionId and revision are required for guidance", fields=["action_id", "revision"])
    return text, new_attachments


def clean_answer(answer: Any) -> str:
    """A retry's answer, trimmed to MAX_TEXT; "" when there is none."""
    return answer.strip()[:MAX_TEXT] if isinstance(answer, str) else ""


def clean_answers(answers: Any) -> dict[str, str]:
    """`answers` as {action id: trimmed answer}, in the order given. Refused as a whole (422) when
    it is not a non-empty list of {action_id, answer} objects with distinct ids and answers that
    are not blank and at most 8 000 characters."""
    def refuse(message: str):
        return InvalidInput(message, fields=["answers"])

    if not isinstance(answers, list) or not answers:
        raise refuse("answers must be a non-empty list of {action_id, answer}")
    out: dict[str, str] = {}
    for entry in answers:
        if not isinstance(entry, dict) or set(entry) != {"action_id", "answer"}:
            raise refuse("each of answers must be an object with exactly action_id and answer")
        action_id, text = entry["action_id"], entry["answer"]
        if not isinstance(action_id, str) or not action_id:
            raise refuse("each of answers needs an action_id")
        if not isinstance(text, str) or not text.strip():
            raise refuse(f"the answer for action {action_id} is blank")
        if len(text.strip()) > MAX_TEXT:
            raise refuse(f"the answer for action {action_id} is longer than {MAX_TEXT} characters")
        if action_id in out:
            raise refuse(f"answers names action {action_id} twice")
        out[action_id] = text.strip()
    return out
