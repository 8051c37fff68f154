"""schemathesis hooks of the OpenAPI run (test_openapi_fuzz.py), loaded by the `st` process
through SCHEMATHESIS_HOOKS.

* A claim's `wait_ms` is capped at 20 ms (a long poll with nothing claimable answers 204 at its
  deadline, and the run has a time budget).
* Seeded state: half of the generated item and run ids are replaced by ids the test seeded, so
  the 200 paths are exercised and not only the 404/409 ones; a positive worker call aimed at a
  seeded run carries, one time in two, that run's fence, and a positive `work_dir` a directory
  the test made (a generated path almost never exists). Operations that end what they touch
  (cancel, submit, interrupt) get only the last seeded item or run, so the others stay live;
  the seeded items are not those of the seeded runs, and a positive recovery is asked for by the
  seeded runs' own worker, so that neither cancels nor recovers those runs.
* Three answers depend on what the server holds, not on the request's shape, and no JSON Schema
  can state them; a positive case refused for one of them is not a disagreement between the
  document and the server, and that failure (only that one) is dropped:
  - `work_dir` names a directory that exists, inside the allowed roots: which directories do is
    server state, like which ids exist (API.md §2: 422 mentioning workDir);
  - `answer` is required to retry a waiting item, optional otherwise (API.md §2: 422);
  - a list `cursor` is a token an earlier page returned, and a bulk request's
    `expected_revisions` and `expected_state_tokens` must name exactly its `ids` (a cross-field rule);
  - a webhook's `url` names a host that resolves to a public address (or one the allow list
    names): the network's answer, not the text's;
  - a trusted caller's `workflow` obeys cross-stage rules (stage ids unique once normalised, a
    review returning to an earlier editable stage) that JSON Schema cannot express.
  Every other refusal of a schema-valid request still fails the run.
"""
from __future__ import annotations

import json
import os
import zlib

import schemathesis
from hypothesis import strategies as st
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import RejectedPositiveData

SEEDED: dict[str, list[str]] = json.loads(os.environ.get("WORKCENTER_FUZZ_SEEDS", "{}"))

# (operation label, field) ⇒ the message the server gives when state refuses the request
STATE_DEPENDENT = {
    ("POST /api/v1/work-items", "work_dir"): "this folder is not one the server may use",
    ("PATCH /api/v1/work-items/{item_id}", "work_dir"): "this folder is not one the server may use",
    ("POST /api/v1/work-items/{item_id}/retry", "answer"): "answer is required to resume a waiting item",
    ("POST /api/v1/work-items", "workflow"): "",
    # which stages an item waits on is server state: a generated action id is rarely one of them
    ("POST /api/v1/work-items/{item_id}/retry", "answers"): "",
    ("GET /api/v1/work-items/{item_id}/retry-preview", "action_id"): "",
    # a cursor is a token an earlier page returned: a generated one is almost never such a token
    ("GET /api/v1/work-items", "cursor"): "cursor ",
    # a bulk request's revisions must name exactly its ids (a cross-field rule)
    ("POST /api/v1/work-items/bulk", "expected_revisions"): "expected_revisions",
    ("POST /api/v1/work-items/bulk", "expected_state_tokens"): "expected_state_tokens",
    # whether a webhook's host resolves, and to a public address, is the network's answer
    ("POST /api/v1/webhooks", "url"): "url refused",
    ("PATCH /api/v1/webhooks/{webhook_id}", "url"): "url refused",
}


FINAL = ("/cancel", "/submit", "/interrupt")


def _pick(options: list, text: str):
    """One of `options`, or None half of the time, chosen from `text` (a run stays reproducible)."""
    pick = zlib.crc32(text.encode("utf-8", "surrogatepass")) % (2 * len(options))
    return options[pick] if pick < len(options) else None


@schemathesis.hook
def flatmap_path_parameters(context, path_parameters):
    strategy = st.just(path_parameters)
    final = context.operation.path.endswith(FINAL)
    for name in ("item_id", "run_id"):
        seeded = SEEDED.get(name, [])[-1:] if final else SEEDED.get(name)
        if path_parameters and name in path_parameters and seeded:
            strategy = strategy.flatmap(
                lambda params, name=name, seeded=seeded: st.one_of(
                    st.just(params),
                    st.sampled_from(seeded).map(lambda value, params=params, name=name: {**params, name: value})))
    return strategy


@schemathesis.hook
def map_case(context, case):
    """Seeded directories and fences in positive bodies (module docstring)."""
    body = case.body
    component = case.meta.components.get(ParameterLocation.BODY) if case.meta else None
    if not (component and component.mode.is_positive and isinstance(body, dict)):
        return case
    text = json.dumps(body, sort_keys=True, default=str)
    if isinstance(body.get("work_dir"), str) and SEEDED.get("work_dir"):
        body = {**body, "work_dir": _pick(SEEDED["work_dir"], text) or body["work_dir"]}
    fence = SEEDED.get("fence", {}).get((case.path_parameters or {}).get("run_id"))
    if fence and "owner_boot_id" in body and "lease_epoch" in body and _pick([fence], text):
        body = {**body, "owner_boot_id": fence[0], "lease_epoch": fence[1]}
    if case.operation.path.endswith("/claims") and isinstance(body.get("wait_ms"), (int, float)) \
            and not isinstance(body["wait_ms"], bool) and body["wait_ms"] > 20:
        body = {**body, "wait_ms": 20}  # a long poll answers at its deadline: up to 30 s each would eat the budget
    if case.operation.path.endswith("/recoveries") and SEEDED.get("fence"):
        body = {**body, "owner_boot_id": next(iter(SEEDED["fence"].values()))[0]}
    case.body = body
    return case


def _state_dependent(label: str, response) -> bool:
    if response.status_code != 422:
        return False
    try:
        errors = json.loads(response.content)["extra"]["errors"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(errors) and all(
        (label, e.get("field")) in STATE_DEPENDENT
        and e.get("message", "").startswith(STATE_DEPENDENT[label, e["field"]]) for e in errors)


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    """Keep every failure but a positive case refused for server state (module docstring)."""
    return not (isinstance(failure, RejectedPositiveData) and _state_dependent(case.operation.label, response))
