"""Workflow definitions: normalisation, defaults and the linear next step (DOMAIN §4.1-§4.2, §7.4).

Pure functions over plain dicts: no database, no models (types and modes are workcenter.choices).
Planning snapshots and triage plans (§4.3-§4.4) are workcenter.domain.planning. Every
key is snake_case (DOMAIN §0); camelCase keys of the reference design are accepted as input
aliases only, so reference snapshots can be imported. Messages carry the keywords of DOMAIN §17.

Look-ups by action type always go through `dict.get` on plain dicts: a type called
`constructor`, `__proto__` or `items` is just an unknown string.
"""
from __future__ import annotations

import copy
import math
import re
from typing import Any

from workcenter.errors import WorkflowError
from workcenter.choices import ActionType, ExecutionMode, WorkspaceMode

from .normalize import normalize_brief

ACTION_TYPES: tuple[str, ...] = tuple(ActionType.values)
# a review returns changes to an earlier stage of any other type (DOMAIN §4.1, §4.4 rule 6)
NON_EDITABLE_TYPES: tuple[str, ...] = (ActionType.REVIEW.value, ActionType.DELIVER.value)
LEGACY_ASSIGNEES: dict[str, str] = {
    "triage": "omni",
    "implement": "linus",
    "review": "martin",
    "deliver": "linus",
}

ASSIGNMENT_MODES = ("auto", "pool", "fixed")
MODEL_MODES = ("inherit", "primary", "fast", "specific")
MODEL_EFFORTS = ("minimal", "low", "medium", "high", "xhigh", "max")

MAX_TYPE_LEN = 64
MAX_NAME_LEN = 120
MAX_GLOBAL_INSTRUCTIONS_LEN = 20_000
DEFAULT_MAX_ATTEMPTS = 2
DEFAULT_WORKFLOW_ID = "software-change"

_BUILT_IN = frozenset(ACTION_TYPES)
_SLUG_RUN = re.compile(r"[^a-z0-9_-]+")

_POLICY_TEXTS: dict[str, str] = {
    "triage": (
        "Turn the request into an executable contract. Inspect relevant repository facts before "
        "deciding the flow. Classify the WorkItem, identify constraints, risks, dependencies, and "
        "missing acceptance criteria, then plan only the Actions needed for this task. Do not "
        "implement. If the goal or acceptance criteria must change, submit a contract_patch and "
        "explain why."
    ),
    "research": (
        "Answer the Action objective with verifiable evidence. Search the repository and, when "
        "needed, authoritative external sources. Separate observed facts from inference, record "
        "unresolved uncertainty, and produce a concise conclusion that a later Action can use."
    ),
    "design": (
        "Design the smallest maintainable solution that satisfies the WorkItem contract. Inspect "
        "existing architecture and conventions, define data flow and boundaries, consider failure "
        "and compatibility cases, and leave concrete implementation guidance. Do not add "
        "abstraction without a demonstrated need."
    ),
    "diagnose": (
        "Reproduce or otherwise establish the reported behavior, trace it to a root cause, and "
        "distinguish evidence from hypotheses. Identify the smallest safe correction and the "
        "regression tests that would prove it. Do not stop at the visible symptom."
    ),
    "implement": (
        "Implement the Action objective in the supplied work directory using the smallest correct "
        "diff. Follow repository conventions, preserve compatibility, handle relevant boundary "
        "conditions, and add or update focused tests. Run the checks needed to prove the change. "
        "Use prior Action and review findings; do not approve your own work."
    ),
    "migrate": (
        "Execute the required migration without losing existing semantics or data. Define "
        "compatibility and rollback boundaries, make the operation repeatable or safely fenced, "
        "validate representative legacy data, and provide evidence for both upgraded and "
        "already-current states."
    ),
    "test": (
        "Verify the current result against every applicable acceptance criterion. Run focused "
        "tests first, then the broader checks justified by the risk. Cover failure, compatibility, "
        "and boundary cases, report exact reproducible evidence, and do not hide skipped or "
        "inconclusive checks."
    ),
    "review": (
        "Review the implementation and evidence independently against the WorkItem contract and "
        "repository rules. Prioritize correctness, security, data loss, compatibility, and missing "
        "tests over style preferences. Return approved or changes_requested with concrete, "
        "actionable findings and evidence."
    ),
    "integrate": (
        "Combine the results of the completed isolated-write Actions this Action depends on. Stop "
        "on any merge conflict instead of guessing, inspect the combined tree, run focused "
        "consistency checks, and leave one clean integrated result for the Actions that follow."
    ),
    "document": (
        "Update the user or maintainer documentation required by the Action objective. Keep "
        "terminology and examples consistent with actual behavior, cover compatibility or "
        "operational consequences, and verify links, commands, and language requirements where "
        "applicable."
    ),
    "operate": (
        "Perform the operational change with explicit preconditions, safety fences, "
        "observability, and rollback handling. Verify the live or simulated postcondition from "
        "authoritative state, avoid destructive shortcuts, and record the exact evidence needed "
        "for handoff."
    ),
    "deliver": (
        "Deliver only an approved result using the repository release policy. Recheck the "
        "reviewed commit and remote state, run required final verification on the immutable "
        "delivery tree, publish only the requested artifacts, and report commit, tag, deployment, "
        "and residual-risk evidence."
    ),
    "write": (
        "Produce the requested written deliverable for its intended audience. Use the available "
        "evidence, preserve required terminology and structure, avoid unsupported claims, and "
        "verify the result against every acceptance criterion."
    ),
    "custom": (
        "Complete the Action objective using repository facts and the WorkItem contract. State the "
        "approach, handle relevant risks and boundary conditions, produce the requested artifact "
        "or change, verify the result, and return concrete evidence plus any residual uncertainty."
    ),
}

# (objective, approach, expected_outcome) per built-in type.
_BRIEFS: dict[str, tuple[str, str, str]] = {
    "triage": (
        "Turn the request into a precise, executable Work Item contract and plan.",
        "Inspect the relevant facts, resolve scope and risks, then select the smallest reliable "
        "Action sequence.",
        "A frozen Work Item type, validated contract, and executable Action plan.",
    ),
    "research": (
        "Resolve the question or uncertainty named by this Action with verifiable evidence.",
        "Inspect repository facts and authoritative sources, separating observations from "
        "inference.",
        "A concise evidence-backed conclusion that the next Action can use.",
    ),
    "design": (
        "Define the smallest maintainable solution for this Action.",
        "Inspect existing architecture, data flow, compatibility constraints, and failure "
        "boundaries.",
        "Concrete implementation guidance with explicit trade-offs and risks.",
    ),
    "diagnose": (
        "Establish the root cause of the reported behavior.",
        "Reproduce the behavior, trace the responsible path, and separate evidence from "
        "hypotheses.",
        "A proven root cause, a minimal correction, and a regression-test plan.",
    ),
    "implement": (
        "Implement the required change with the smallest correct diff.",
        "Follow repository conventions, handle relevant boundaries, and add focused tests while "
        "making the change.",
        "A maintainable implementation with focused verification evidence.",
    ),
    "migrate": (
        "Move existing data or behavior to the required shape without losing semantics.",
        "Fence compatibility and rollback boundaries, then validate legacy and already-current "
        "states.",
        "A repeatable or safely fenced migration with representative evidence.",
    ),
    "test": (
        "Verify the current result against the Work Item acceptance criteria.",
        "Run focused checks first, then broader risk-appropriate tests including failure and "
        "compatibility cases.",
        "Reproducible pass/fail evidence for every applicable acceptance criterion.",
    ),
    "review": (
        "Review the current result independently against the Work Item contract.",
        "Prioritize correctness, security, data loss, compatibility, and missing tests over "
        "style preferences.",
        "An approval or concrete change request supported by evidence.",
    ),
    "integrate": (
        "Combine the completed isolated-write results into one verified working tree.",
        "Merge only the declared dependency results, stop on conflicts, and inspect the "
        "combined tree.",
        "A clean integrated result ready for the following Actions.",
    ),
    "document": (
        "Update the documentation required by this Action.",
        "Align terminology and examples with actual behavior and verify links and commands.",
        "Accurate, usable documentation that matches the delivered behavior.",
    ),
    "operate": (
        "Perform the requested operational change safely.",
        "Check preconditions, apply safety fences, keep rollback options, and verify "
        "authoritative state.",
        "A verified operational postcondition with handoff and rollback evidence.",
    ),
    "deliver": (
        "Deliver the approved Work Item result using repository release policy.",
        "Recheck immutable reviewed state, run final gates, and publish only the requested "
        "artifacts.",
        "A traceable delivery with commit, artifact, deployment, and residual-risk evidence.",
    ),
    "write": (
        "Produce the written deliverable requested by this Action.",
        "Use the available evidence, the intended audience, and the required terminology and "
        "structure.",
        "A complete written artifact verified against the acceptance criteria.",
    ),
    "custom": (
        "Complete the domain-specific objective defined for this Action.",
        "Use repository facts, handle relevant risks and boundaries, and verify the produced "
        "result.",
        "The requested artifact or change with concrete evidence and residual uncertainty.",
    ),
}

# The default settings' workflow (DOMAIN §4.2), before normalisation.
_SOFTWARE_CHANGE_STAGES: tuple[dict[str, Any], ...] = (
    {"id": "triage", "name": "Triage", "type": "triage",
     "assignment_policy": {"mode": "auto", "capability": "triage"}, "max_attempts": 2},
    {"id": "implement", "name": "Implement", "type": "implement",
     "assignment_policy": {"mode": "auto", "capability": "implement"}, "max_attempts": 2},
    {"id": "review", "name": "Review", "type": "review",
     "assignment_policy": {"mode": "auto", "capability": "review",
                           "separate_from_stage_types": ["implement"]},
     "max_attempts": 2, "changes_requested_stage_id": "implement"},
    {"id": "deliver", "name": "Deliver", "type": "deliver",
     "assignment_policy": {"mode": "auto", "capability": "deliver"}, "max_attempts": 2},
)


# --------------------------------------------------------------------------- small helpers


def key_or_alias(raw: dict, key: str, alias: str | None = None, default: Any = None) -> Any:
    """`raw[key]`, else the reference design's camelCase `raw[alias]`, else `default`."""
    if key in raw:
        return raw[key]
    if alias is not None and alias in raw:
        return raw[alias]
    return default


def has_key_or_alias(raw: dict, key: str, alias: str | None = None) -> bool:
    return key in raw or (alias is not None and alias in raw)


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def clean_text(value: Any, max_len: int | None = None) -> str:
    if not isinstance(value, str):
        return ""
    text = value.strip()
    return text[:max_len] if max_len is not None else text


def unique_strings(value: Any) -> list[str]:
    """Trimmed, deduplicated (first occurrence wins), blanks dropped; never slugged."""
    if not isinstance(value, (list, tuple)):
        return []
    out: list[str] = []
    for item in value:
        if not isinstance(item, str):
            continue
        text = item.strip()
        if text and text not in out:
            out.append(text)
    return out


def clean_id(value: Any, fallback: str, *, max_len: int | None = None) -> str:
    """The slug rule of DOMAIN §4.1; non-strings and empty results give `fallback`."""
    if not isinstance(value, str):
        return fallback
    slug = _SLUG_RUN.sub("-", value.lower()).strip("-")
    if max_len is not None:
        slug = slug[:max_len].strip("-")
    return slug or fallback


def clamp_attempts(value: Any) -> int:
    if isinstance(value, bool):
        return DEFAULT_MAX_ATTEMPTS
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return DEFAULT_MAX_ATTEMPTS
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value == 0:
        return DEFAULT_MAX_ATTEMPTS
    return int(min(max(value, 1), 5))


def workspace_mode_or_shared(value: Any) -> str:
    """A known workspace mode as given; anything else is `shared`."""
    return value if value in WorkspaceMode.values else WorkspaceMode.SHARED.value


def is_built_in(action_type: Any) -> bool:
    return isinstance(action_type, str) and action_type in _BUILT_IN


def default_policy_text(action_type: Any) -> str:
    """Built-in policy text of a type; unknown types get `custom`'s."""
    key = action_type if is_built_in(action_type) else ActionType.CUSTOM
    return _POLICY_TEXTS.get(key) or _POLICY_TEXTS[ActionType.CUSTOM]


def default_brief(action_type: Any) -> dict[str, str]:
    """Built-in `{objective, approach, expected_outcome}` of a type; unknown types get `custom`'s."""
    key = action_type if is_built_in(action_type) else ActionType.CUSTOM
    objective, approach, expected_outcome = _BRIEFS.get(key) or _BRIEFS[ActionType.CUSTOM]
    return {"objective": objective, "approach": approach, "expected_outcome": expected_outcome}


def type_brief(raw: Any, action_type: Any) -> dict[str, str]:
    """`raw`'s brief with each blank field taken from the type's default (normalize_brief)."""
    return normalize_brief(raw, default_brief(action_type))


def normalize_assignment_policy(raw: Any, action_type: str) -> dict[str, Any]:
    """One shape for every mode: {mode, capability, candidate_vp_ids, vp_id, separate_from_stage_types}.

    A `fixed` policy without an id, or a `pool` without candidates, cannot be honoured and
    degrades to `auto` rather than rejecting the whole workflow.
    """
    source = as_dict(raw)
    mode = source.get("mode")
    if mode not in ASSIGNMENT_MODES:
        mode = "auto"
    vp_id = clean_text(key_or_alias(source, "vp_id", "fixedVpId")) or clean_text(source.get("fixed_vp_id")) or None
    candidates = unique_strings(key_or_alias(source, "candidate_vp_ids", "candidateVpIds"))
    if (mode == "fixed" and not vp_id) or (mode == "pool" and not candidates):
        mode = "auto"
    return {
        "mode": mode,
        "capability": clean_id(source.get("capability"), action_type, max_len=MAX_TYPE_LEN),
        "candidate_vp_ids": candidates,
        "vp_id": vp_id if mode == "fixed" else None,
        "separate_from_stage_types": unique_strings(
            key_or_alias(source, "separate_from_stage_types", "separateFromStageTypes")
        ),
    }


def normalize_model_policy(raw: Any) -> dict[str, Any]:
    """{mode, model, effort}; `specific` without a model degrades to `inherit` [PERIPH]."""
    source = as_dict(raw)
    mode = source.get("mode")
    if mode not in MODEL_MODES:
        mode = "inherit"
    model = clean_text(source.get("model")) or None
    if mode == "specific" and not model:
        mode = "inherit"
    effort = source.get("effort")
    if effort not in MODEL_EFFORTS:
        effort = None
    return {"mode": mode, "model": model, "effort": effort}


def _normalize_type(raw_type: Any, planning_mode: str) -> str:
    if planning_mode == "ai":
        return clean_id(raw_type, ActionType.CUSTOM.value, max_len=MAX_TYPE_LEN)
    slug = clean_id(raw_type, ActionType.CUSTOM.value)
    return slug if slug in _BUILT_IN else ActionType.CUSTOM.value


# --------------------------------------------------------------------------- normalisation (§4.1)


def normalize_stage(raw: Any, index: int, *, planning_mode: str = "static") -> dict[str, Any]:
    """One stage of DOMAIN §4.1 (uniqueness and review targets are checked per workflow)."""
    source = as_dict(raw)
    action_type = _normalize_type(source.get("type"), planning_mode)
    stage_id = clean_id(source.get("id"), f"{action_type}-{index + 1}")
    workspace_mode = key_or_alias(source, "workspace_mode", "workspaceMode")
    stage: dict[str, Any] = {
        "id": stage_id,
        "name": clean_text(source.get("name"), MAX_NAME_LEN) or stage_id,
        "type": action_type,
        **type_brief(source, action_type),
        "instruction": clean_text(source.get("instruction")) or default_policy_text(action_type),
        "assignment_policy": normalize_assignment_policy(
            key_or_alias(source, "assignment_policy", "assignmentPolicy"), action_type
        ),
        "model_policy": normalize_model_policy(key_or_alias(source, "model_policy", "modelPolicy")),
        "depends_on_stage_ids": unique_strings(
            key_or_alias(source, "depends_on_stage_ids", "dependsOnStageIds")
        ),
        "workspace_mode": workspace_mode_or_shared(workspace_mode),
        "max_attempts": clamp_attempts(key_or_alias(source, "max_attempts", "maxAttempts")),
        "changes_requested_stage_id": None,
    }
    if action_type == ActionType.REVIEW:
        stage["changes_requested_stage_id"] = clean_id(
            key_or_alias(source, "changes_requested_stage_id", "changesRequestedStageId"), ActionType.IMPLEMENT.value
        )
    return stage


def _check_review_targets(stages: list[dict[str, Any]]) -> None:
    positions = {stage["id"]: i for i, stage in enumerate(stages)}
    for i, stage in enumerate(stages):
        if stage["type"] != ActionType.REVIEW:
            continue
        target_id = stage["changes_requested_stage_id"]
        target_index = positions.get(target_id)
        if target_index is None:
            raise WorkflowError(
                f'Review stage "{stage["id"]}" points to missing stage "{target_id}"'
            )
        if target_index >= i or stages[target_index]["type"] in NON_EDITABLE_TYPES:
            raise WorkflowError(
                f'Review stage "{stage["id"]}" must return to an earlier editable stage'
            )


def _normalize_type_map(raw: Any, normalize_value) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in as_dict(raw).items():
        action_type = clean_id(key, "", max_len=MAX_TYPE_LEN)
        normalized = normalize_value(value)
        if action_type and normalized is not None:
            out[action_type] = normalized
    return out


def normalize_workflow(raw: Any, index: int = 0) -> dict[str, Any]:
    """A full workflow snapshot of DOMAIN §4.1; raises WorkflowError for invalid definitions.

    Static workflows are forced `linear` [DEV-8]; only triage plans produce graph definitions.
    """
    if not isinstance(raw, dict):
        raise WorkflowError("Workflow definition must be an object")
    workflow_id = clean_id(raw.get("id"), f"workflow-{index + 1}")
    planning_mode = "ai" if key_or_alias(raw, "planning_mode", "planningMode") == "ai" else "static"
    requested_mode = key_or_alias(raw, "execution_mode", "executionMode")
    execution = ExecutionMode.GRAPH if planning_mode == "ai" and requested_mode == ExecutionMode.GRAPH \
        else ExecutionMode.LINEAR
    raw_stages = raw.get("stages")
    if not isinstance(raw_stages, (list, tuple)) or not raw_stages:
        raise WorkflowError(f'Workflow "{workflow_id}" requires at least one stage')

    stages: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, raw_stage in enumerate(raw_stages):
        stage = normalize_stage(raw_stage, i, planning_mode=planning_mode)
        if stage["id"] in seen:
            raise WorkflowError(f'Duplicate stage id "{stage["id"]}" in workflow "{workflow_id}"')
        seen.add(stage["id"])
        stages.append(stage)
    if planning_mode == "static":
        _check_review_targets(stages)

    raw_templates = key_or_alias(raw, "action_templates", "actionTemplates")
    templates = (
        [normalize_workflow(t, i) for i, t in enumerate(raw_templates)]
        if isinstance(raw_templates, (list, tuple))
        else []
    )
    return {
        "version": 1,
        "id": workflow_id,
        "name": clean_text(raw.get("name"), MAX_NAME_LEN) or workflow_id,
        "planning_mode": planning_mode,
        "execution_mode": execution.value,
        "work_item_type": clean_id(
            key_or_alias(raw, "work_item_type", "workItemType"), "", max_len=MAX_TYPE_LEN
        ) or None,
        "global_instructions": clean_text(
            key_or_alias(raw, "global_instructions", "globalInstructions"), MAX_GLOBAL_INSTRUCTIONS_LEN
        ),
        "model_policy": normalize_model_policy(key_or_alias(raw, "model_policy", "modelPolicy")),
        "action_model_policies": _normalize_type_map(
            key_or_alias(raw, "action_model_policies", "actionModelPolicies"),
            lambda v: normalize_model_policy(v) if isinstance(v, dict) else None,
        ),
        "action_instructions": _normalize_type_map(
            key_or_alias(raw, "action_instructions", "actionInstructions"),
            lambda v: clean_text(v) or None,
        ),
        "action_templates": templates,
        "stages": stages,
    }


# --------------------------------------------------------------------------- default / legacy (§4.2)


def default_workflows() -> list[dict[str, Any]]:
    """The settings' single `software-change` workflow: triage → implement → review → deliver."""
    return [
        normalize_workflow(
            {
                "id": DEFAULT_WORKFLOW_ID,
                "name": "Software change",
                "work_item_type": DEFAULT_WORKFLOW_ID,
                "stages": copy.deepcopy(list(_SOFTWARE_CHANGE_STAGES)),
            }
        )
    ]


def legacy_workflow() -> dict[str, Any]:
    """`software-change` with the historical fixed assignees, for snapshots without stages."""
    workflow = default_workflows()[0]
    for stage in workflow["stages"]:
        policy = stage["assignment_policy"]
        policy["mode"] = "fixed"
        policy["vp_id"] = LEGACY_ASSIGNEES.get(stage["type"])
    return workflow


def snapshot_stages(snapshot: Any) -> list[dict[str, Any]]:
    if isinstance(snapshot, dict):
        stages = snapshot.get("stages")
        if isinstance(stages, list) and stages:
            return stages
    return []


def effective_stages(snapshot: Any) -> list[dict[str, Any]]:
    """The snapshot's stages, or the legacy workflow's when it has none (DOMAIN §4.2)."""
    return snapshot_stages(snapshot) or legacy_workflow()["stages"]


def required_role_for(stage: Any) -> str:
    """The fixed assignee of a stage, else ""."""
    policy = as_dict(as_dict(stage).get("assignment_policy"))
    if policy.get("mode") != "fixed":
        return ""
    return clean_text(policy.get("vp_id")) or clean_text(policy.get("fixed_vp_id"))


# --------------------------------------------------------------------------- linear next step (§7.4)


def find_stage(
    snapshot: Any, stage_id: str | None, action_type: str | None = None
) -> dict[str, Any] | None:
    """The stage with this id, else the first stage of this type, over `effective_stages`."""
    stages = effective_stages(snapshot)
    if stage_id:
        for stage in stages:
            if stage.get("id") == stage_id:
                return stage
    lookup_type = action_type if action_type is not None else stage_id
    if lookup_type:
        for stage in stages:
            if stage.get("type") == lookup_type:
                return stage
    return None


def _stage_index(stages: list[dict[str, Any]], stage_id: str | None, action_type: str | None) -> int:
    if stage_id:
        for i, stage in enumerate(stages):
            if stage.get("id") == stage_id:
                return i
    lookup_type = action_type or stage_id
    if lookup_type:
        for i, stage in enumerate(stages):
            if stage.get("type") == lookup_type:
                return i
    return -1


def next_stage_id(
    snapshot: Any, stage_id: str | None, action_type: str | None, review_decision: str | None
) -> str | None:
    """The linear next step: the following stage, or a review's return target on a changes request.

    None when the action's stage is the last one; raises WorkflowError for an unknown stage.
    """
    stages = effective_stages(snapshot)
    index = _stage_index(stages, stage_id, action_type)
    if index < 0:
        raise WorkflowError(
            f'Action stage "{stage_id or action_type}" is an unknown stage of the workflow snapshot'
        )
    current = stages[index]
    if current.get("type") == ActionType.REVIEW:
        if review_decision == "changes_requested":
            target = current.get("changes_requested_stage_id") or ActionType.IMPLEMENT.value
            target_index = _stage_index(stages, target, None)
            if target_index < 0:
                raise WorkflowError(f'Review return target "{target}" is an unknown stage')
            return stages[target_index].get("id")
        if review_decision != "approved":
            raise WorkflowError("Completed review requires approved or changes_requested")
    if index + 1 < len(stages):
        return stages[index + 1].get("id")
    return None
