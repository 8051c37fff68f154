"""The inbox's routes (docs/api.md "Inbox and person settings"), mounted beside the others at /api/v1/:

* `GET /inbox`: every stage that waits for an answer and every item that needs attention, oldest
  first, each with the item's revision and state token for the bulk retry that answers it
  (workcenter/inbox.py reads it);
* `GET /me/settings`, `PATCH /me/settings`: what the signed-in person (or the owner of the token)
  chose for themselves, kept with their user, not per browser.
"""
from __future__ import annotations

from typing import Literal, Optional

from ninja import Field, Router, Schema

from . import inbox as inbox_read
from .auth import VIEW, api_auth
from .schemas_in import InputSchema, StrictBool
from .schemas_out import ERRORS, ErrorOut, Timestamp
from .services import person_settings


router = Router(tags=["inbox"])


class TriedRunOut(Schema):
    run_id: str
    status: str
    summary: str = Field(..., description="the start (300 characters) of the run's summary")
    error: str = Field(..., description="the start (300 characters) of the run's error, or empty")
    ended_at: Optional[Timestamp] = None


class InboxRowOut(Schema):
    kind: Literal["question", "failure"] = Field(..., description="question: a stage waits for an answer; "
                                                                  "failure: the item needs attention")
    item_id: str
    title: str
    item_status: str
    revision: int = Field(..., description="the item's revision: `expected_revisions` of the bulk retry")
    state_token: int = Field(..., description="the item's state token, read before everything else: "
                                              "`expected_state_tokens` of the bulk retry")
    last_actor: str = Field(..., description="who made the item's newest change (the actor of the event the "
                                              "state token names): `user:<name>`, `worker:<boot id>`, …")
    action_id: str
    stage_id: str
    run_id: Optional[str] = Field(None, description="the run that asked or failed: with action_id, the question")
    text: str = Field(..., description="the question (the run's waiting_reason) or the error (4,000 characters)")
    since: Timestamp = Field(..., description="when that run ended: how long it has waited")
    current: bool = Field(..., description="the item's current action: a waiting item's answers must include it")
    attempts: int = Field(..., description="the stage's ended runs, every attempt of it")
    tried: list[TriedRunOut] = Field(..., description="the stage's newest ended runs (5), newest first")
    failed_stages: int = Field(..., description="failure rows: the item's failed stages (graph), else 0")


class InboxOut(Schema):
    rows: list[InboxRowOut] = Field(..., description="oldest first")
    items: int = Field(..., description="the items listed")
    questions: int
    failures: int
    truncated: bool = Field(..., description="more than 500 items need someone: the oldest 500 are listed")


class PersonSettingsOut(Schema):
    browser_notifications: bool = Field(..., description="a browser notification when a question or a failure "
                                                         "this person can act on arrives")


class PersonSettingsIn(InputSchema):
    browser_notifications: StrictBool = Field(description="true: notify me of new questions and failures")


@router.get("/inbox", response={200: InboxOut, **ERRORS}, auth=api_auth(VIEW))
def inbox(request):
    """Every waiting stage (its question, since when, what it tried) and every item that needs
    attention (its failed stage and error), oldest first."""
    return inbox_read.inbox()


@router.get("/me/settings", response={200: PersonSettingsOut, **ERRORS}, auth=api_auth(VIEW))
def me_settings(request):
    """What the caller chose for themselves (the defaults until they chose)."""
    return inbox_read.person_settings(request.auth)


@router.patch("/me/settings", response={200: PersonSettingsOut, **ERRORS, 413: ErrorOut}, auth=api_auth(VIEW))
def me_settings_set(request, payload: PersonSettingsIn):
    """Store the settings the body names (at least one) for the caller; answers every setting as stored."""
    return person_settings.person_settings_set(user=request.auth, changes=payload.model_dump(exclude_unset=True))
