"""Planning snapshots and triage plans (DOMAIN §4.3-§4.4).

An API-created item starts from `planning_snapshot`: a requested template itself, or a single
planning triage that knows the reusable templates. When that triage completes, `apply_triage_plan`
turns its plan into the item's snapshot: a template's stages (linear) or the generated Actions
(graph), checked rule by rule. Pure functions over plain dicts, like workcenter.domain.workflows,
whose normalisers they reuse; messages carry the keywords of DOMAIN §17.
"""
from __future__ import annotations

import copy
from typing import Any

from workcenter.errors import PlanError
from workcenter.choices import ActionType, ExecutionMode, WorkspaceMode

from .workflows import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_NAME_LEN,
    MAX_TYPE_LEN,
    NON_EDITABLE_TYPES,
    as_dict,
    clamp_attempts,
    clean_id,
    clean_text,
    default_policy_text,
    default_workflows,
    has_key_or_alias,
    is_built_in,
    key_or_alias,
    normalize_assignment_policy,
    normalize_model_policy,
    normalize_stage,
    normalize_workflow,
    snapshot_stages,
    type_brief,
    unique_strings,
    workspace_mode_or_shared,
)

MAX_PLAN_ACTIONS = 8
PLANNING_WORKFLOW_ID = "ai-planned"

# --------------------------------------------------------------------------- planning snapshot (§4.3)

def _tagged_templates(workflows: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    source = default_workflows() if workflows is None else workflows
    templates = []
    for i, workflow in enumerate(source):
        template = normalize_workflow(workflow, i)
        template["work_item_type"] = template["work_item_type"] or clean_id(
            template["id"], template["id"], max_len=MAX_TYPE_LEN
        )
        templates.append(template)
    return templates


def _requested_type(requested_type: Any) -> str:
    if not isinstance(requested_type, str):
        return ""
    text = requested_type.strip()
    if not text or text.lower() == "auto":
        return ""
    return clean_id(text, "", max_len=MAX_TYPE_LEN)


def _planning_instruction(templates: list[dict[str, Any]], frozen_type: str) -> str:
    catalogue = "\n".join(
        f'{t["work_item_type"]}: {t["name"]} ({" -> ".join(s["type"] for s in t["stages"])})'
        for t in templates
    ) or "(none)"
    type_line = (
        f'The user selected work_item_type "{frozen_type}". Keep that exact type.'
        if frozen_type
        else "Infer one specific work_item_type from the contract."
    )
    return (
        f"{default_policy_text('triage')}\n\n{type_line}\n"
        f"Reusable Action templates:\n{catalogue}\n"
        "If the final type matches a reusable template, return its work_item_type and omit "
        "actions so Work Center applies that frozen template. Otherwise submit `actions`: the "
        "smallest reliable list of 1 to 8 Actions. Each Action states type (a lowercase slug: a "
        "built-in type when its policy fits, a precise domain type when it does not), id, "
        "objective, approach, expected_outcome and capability. depends_on_action_ids lists "
        "earlier Action ids; omit it to depend on the previous Action, send [] for an "
        "independent Action. workspace_mode is shared, read, isolated-write or integrate: if any "
        "Action uses isolated-write, add exactly one integrate Action in integrate mode that "
        "depends on every isolated-write Action, and let later Actions consume those writes "
        "through it. A review Action may name changes_requested_action_id, an earlier Action "
        "that is neither review nor deliver. Add only Actions required by this task."
    )


def planning_snapshot(
    workflows: list[dict[str, Any]] | None = None, requested_type: str | None = None
) -> dict[str, Any]:
    """The snapshot of an API-created item (DOMAIN §4.3).

    A requested type that names a template returns that template itself (no planning);
    otherwise the AI planning snapshot with the requested type frozen (or None).
    """
    templates = _tagged_templates(workflows)
    wanted = _requested_type(requested_type)
    if wanted:
        for template in templates:
            if wanted in (template["work_item_type"], template["id"]):
                return copy.deepcopy(template)
    triage = normalize_stage(
        {
            "id": "triage",
            "name": "Triage",
            "type": ActionType.TRIAGE.value,
            "instruction": _planning_instruction(templates, wanted),
            "assignment_policy": {"mode": "auto", "capability": "triage"},
            "max_attempts": DEFAULT_MAX_ATTEMPTS,
        },
        0,
        planning_mode="ai",
    )
    return {
        "version": 1,
        "id": PLANNING_WORKFLOW_ID,
        "name": "AI planned",
        "planning_mode": "ai",
        "execution_mode": ExecutionMode.LINEAR.value,
        "work_item_type": wanted or None,
        "global_instructions": "",
        "model_policy": normalize_model_policy(None),
        "action_model_policies": {},
        "action_instructions": {},
        "action_templates": templates,
        "stages": [triage],
    }


# --------------------------------------------------------------------------- triage plan (§4.4)


def _planning_triage_stage(snapshot: dict[str, Any]) -> dict[str, Any]:
    stages = snapshot_stages(snapshot)
    for stage in stages:
        if isinstance(stage, dict) and stage.get("type") == ActionType.TRIAGE:
            return copy.deepcopy(stage)
    if stages:
        return copy.deepcopy(stages[0])
    return planning_snapshot()["stages"][0]


def _type_lookup(mapping: Any, action_type: str) -> Any:
    table = as_dict(mapping)
    value = table.get(action_type)
    if value is None and not is_built_in(action_type):
        value = table.get(ActionType.CUSTOM)
    return value


def _plan_dependencies(entry: dict[str, Any], previous_id: str | None) -> list[str]:
    """Rule 5: a present key is used as given (trimmed, deduplicated); absent ⇒ the previous entry."""
    if has_key_or_alias(entry, "depends_on_action_ids", "dependsOnActionIds"):
        value = key_or_alias(entry, "depends_on_action_ids", "dependsOnActionIds")
        if isinstance(value, str):
            value = [value]
        return unique_strings(value)
    return [previous_id] if previous_id else []


def _generate_stage(
    snapshot: dict[str, Any], entry: dict[str, Any], position: int, seen: set[str],
    previous_id: str | None,
) -> dict[str, Any]:
    action_type = clean_id(entry.get("type"), ActionType.CUSTOM.value, max_len=MAX_TYPE_LEN)
    if action_type == ActionType.TRIAGE:
        raise PlanError("AI-planned Actions cannot add another triage Action")
    stage_id = clean_id(entry.get("id"), f"{action_type}-{position}")
    if stage_id in seen:
        raise PlanError(f'Duplicate AI-planned Action id "{stage_id}"')
    seen.add(stage_id)
    if not clean_text(entry.get("objective")):
        raise PlanError(f'AI-planned Action "{stage_id}" requires an objective')
    workspace_mode = key_or_alias(entry, "workspace_mode", "workspaceMode")
    model_policy = _type_lookup(snapshot.get("action_model_policies"), action_type)
    return {
        "id": stage_id,
        "name": clean_text(entry.get("name"), MAX_NAME_LEN) or stage_id,
        "type": action_type,
        **type_brief(entry, action_type),
        "instruction": clean_text(_type_lookup(snapshot.get("action_instructions"), action_type))
        or default_policy_text(action_type),
        "assignment_policy": normalize_assignment_policy(
            {
                "mode": "auto",
                "capability": entry.get("capability"),
                "separate_from_stage_types": key_or_alias(
                    entry, "separate_from_action_types", "separateFromActionTypes"
                ),
            },
            action_type,
        ),
        "model_policy": normalize_model_policy(
            model_policy if isinstance(model_policy, dict) else snapshot.get("model_policy")
        ),
        "depends_on_stage_ids": _plan_dependencies(entry, previous_id),
        "workspace_mode": workspace_mode_or_shared(workspace_mode),
        "max_attempts": clamp_attempts(key_or_alias(entry, "max_attempts", "maxAttempts")),
        "changes_requested_stage_id": None,
    }


def _assign_review_targets(stages: list[dict[str, Any]], entries: list[dict[str, Any]]) -> None:
    """Rule 6: explicit targets must be earlier editable entries; defaults go by list position."""
    for i, stage in enumerate(stages):
        if stage["type"] != ActionType.REVIEW:
            continue
        earlier = [s for s in stages[:i] if s["type"] not in NON_EDITABLE_TYPES]
        requested = key_or_alias(entries[i], "changes_requested_action_id", "changesRequestedActionId")
        if requested is not None:
            target_id = clean_id(requested, "")
            if not target_id or target_id not in {s["id"] for s in earlier}:
                raise PlanError(
                    f'AI-planned review Action "{stage["id"]}" points to an invalid return Action'
                )
        elif earlier:
            target_id = earlier[-1]["id"]
        else:
            raise PlanError(
                f'AI-planned review Action "{stage["id"]}" requires an earlier editable Action'
            )
        stage["changes_requested_stage_id"] = target_id


def _check_graph(stages: list[dict[str, Any]]) -> None:
    """Rules 7 and 8: acyclic by construction, isolated writes consumed through one integration."""
    isolated = [s["id"] for s in stages if s["workspace_mode"] == WorkspaceMode.ISOLATED_WRITE]
    if isolated and sum(1 for s in stages if s["workspace_mode"] == WorkspaceMode.INTEGRATE) != 1:
        raise PlanError("AI-planned isolated-write Actions require exactly one integration Action")
    isolated_set = set(isolated)
    for i, stage in enumerate(stages):
        earlier_ids = {s["id"] for s in stages[:i]}
        for dependency in stage["depends_on_stage_ids"]:
            if dependency not in earlier_ids:
                raise PlanError(
                    f'AI-planned Action "{stage["id"]}" has a missing, self, or future '
                    f'dependency "{dependency}"'
                )
        isolated_deps = [d for d in stage["depends_on_stage_ids"] if d in isolated_set]
        if stage["workspace_mode"] == WorkspaceMode.INTEGRATE:
            if stage["type"] != ActionType.INTEGRATE or not isolated_deps:
                raise PlanError(
                    f'AI-planned integration Action "{stage["id"]}" must depend on '
                    "isolated-write Actions"
                )
            if any(d not in stage["depends_on_stage_ids"] for d in isolated):
                raise PlanError(
                    f'AI-planned integration Action "{stage["id"]}" must depend on every '
                    "isolated-write Action"
                )
        elif stage["type"] == ActionType.INTEGRATE:
            raise PlanError(
                f'AI-planned integrate Action "{stage["id"]}" requires integration workspace mode'
            )
        elif isolated_deps:
            raise PlanError(
                f'AI-planned Action "{stage["id"]}" must consume isolated writes through '
                "integration"
            )


def apply_triage_plan(snapshot: dict[str, Any], plan: Any) -> dict[str, Any]:
    """The snapshot after a completed planning triage (DOMAIN §4.4 rules 1–9, in order).

    Raises PlanError on the first violation; the input snapshot is never modified. A snapshot
    that is not AI-planned is returned unchanged (copied).
    """
    source = copy.deepcopy(snapshot) if isinstance(snapshot, dict) else {}
    if source.get("planning_mode") != "ai":
        return source
    # Rules 1–3: the plan and its type.
    if not isinstance(plan, dict):
        raise PlanError("AI-planned triage requires a structured plan")
    raw_type = key_or_alias(plan, "work_item_type", "workItemType")
    if not isinstance(raw_type, str) or not raw_type.strip():
        raise PlanError("AI-planned triage requires a specific workItemType")
    work_item_type = clean_id(raw_type, "", max_len=MAX_TYPE_LEN)
    if not work_item_type:
        raise PlanError("AI-planned triage requires a valid workItemType")
    frozen = source.get("work_item_type")
    if frozen and work_item_type != frozen:
        raise PlanError(f'AI-planned triage must keep the selected workItemType "{frozen}"')

    triage = _planning_triage_stage(source)
    # Rule 4: template reuse ignores the plan's actions and stays linear.
    for template in source.get("action_templates") or []:
        if not isinstance(template, dict):
            continue
        template_type = template.get("work_item_type") or template.get("id")
        if template_type != work_item_type:
            continue
        reused = [
            copy.deepcopy(s)
            for s in template.get("stages") or []
            if isinstance(s, dict) and s.get("type") != ActionType.TRIAGE
        ]
        if not reused:
            raise PlanError(
                f'AI-planned triage template "{template.get("id")}" has no non-triage stage'
            )
        # A template is a static workflow, so the item continues linear whatever mode the
        # snapshot had before (a re-triaged graph item that picks a template, DEV-6).
        source.update(execution_mode=ExecutionMode.LINEAR.value, work_item_type=work_item_type, action_templates=[],
                      stages=[triage, *reused])
        return source

    # Rule 5: the generated entries.
    entries = plan.get("actions")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PLAN_ACTIONS:
        raise PlanError(
            f"AI-planned triage requires between 1 and {MAX_PLAN_ACTIONS} Actions"
        )
    entries = [as_dict(e) for e in entries]
    seen = {"triage"}
    stages: list[dict[str, Any]] = []
    for position, entry in enumerate(entries, start=1):
        previous_id = stages[-1]["id"] if stages else None
        stages.append(_generate_stage(source, entry, position, seen, previous_id))
    _assign_review_targets(stages, entries)  # rule 6
    _check_graph(stages)  # rules 7–8
    # Rule 9.
    source.update(execution_mode=ExecutionMode.GRAPH.value, work_item_type=work_item_type, stages=[triage, *stages])
    return source
