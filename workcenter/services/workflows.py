"""Workflow definitions, planning snapshots and triage-plan validation (DOMAIN §4, §7.4).

Pure functions over plain dicts: no database, no models. Every key is snake_case (DOMAIN §0);
camelCase keys of the reference design are accepted as input aliases only, so reference
snapshots can be imported. Messages carry the keywords of DOMAIN §17.

Look-ups by action type always go through `dict.get` on plain dicts: a type called
`constructor`, `__proto__` or `items` is just an unknown string.
"""
from __future__ import annotations

import copy
import math
import re
from typing import Any

from workcenter.errors import PlanError, WorkflowError

ACTION_TYPES: tuple[str, ...] = (
    "triage",
    "research",
    "design",
    "diagnose",
    "implement",
    "migrate",
    "test",
    "review",
    "integrate",
    "document",
    "operate",
    "deliver",
    "write",
    "custom",
)
WORKSPACE_MODES: tuple[str, ...] = ("shared", "read", "isolated-write", "integrate")
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
MAX_PLAN_ACTIONS = 8
MAX_BRIEF_LEN = 2_000
MAX_NAME_LEN = 120
MAX_GLOBAL_INSTRUCTIONS_LEN = 20_000
DEFAULT_MAX_ATTEMPTS = 2
PLANNING_WORKFLOW_ID = "ai-planned"
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


def _get(raw: dict, key: str, alias: str | None = None, default: Any = None) -> Any:
    """`raw[key]`, else the reference design's camelCase `raw[alias]`, else `default`."""
    if key in raw:
        return raw[key]
    if alias is not None and alias in raw:
        return raw[alias]
    return default


def _has(raw: dict, key: str, alias: str | None = None) -> bool:
    return key in raw or (alias is not None and alias in raw)


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _text(value: Any, max_len: int | None = None) -> str:
    if not isinstance(value, str):
        return ""
    text = value.strip()
    return text[:max_len] if max_len is not None else text


def _unique_strings(value: Any) -> list[str]:
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


def _clamp_attempts(value: Any) -> int:
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


def _is_built_in(action_type: Any) -> bool:
    return isinstance(action_type, str) and action_type in _BUILT_IN


def default_policy_text(action_type: Any) -> str:
    """Built-in policy text of a type; unknown types get `custom`'s."""
    key = action_type if _is_built_in(action_type) else "custom"
    return _POLICY_TEXTS.get(key) or _POLICY_TEXTS["custom"]


def default_brief(action_type: Any) -> dict[str, str]:
    """Built-in `{objective, approach, expected_outcome}` of a type; unknown types get `custom`'s."""
    key = action_type if _is_built_in(action_type) else "custom"
    objective, approach, expected_outcome = _BRIEFS.get(key) or _BRIEFS["custom"]
    return {"objective": objective, "approach": approach, "expected_outcome": expected_outcome}


def normalize_brief(raw: Any, action_type: Any) -> dict[str, str]:
    """A brief with each blank field replaced by the type's default (≤ 2 000 chars each)."""
    source = _as_dict(raw)
    defaults = default_brief(action_type)
    aliases = {"expected_outcome": "expectedOutcome"}
    return {
        key: _text(_get(source, key, aliases.get(key)), MAX_BRIEF_LEN) or default
        for key, default in defaults.items()
    }


def normalize_assignment_policy(raw: Any, action_type: str) -> dict[str, Any]:
    """One shape for every mode: {mode, capability, candidate_vp_ids, vp_id, separate_from_stage_types}.

    A `fixed` policy without an id, or a `pool` without candidates, cannot be honoured and
    degrades to `auto` rather than rejecting the whole workflow.
    """
    source = _as_dict(raw)
    mode = source.get("mode")
    if mode not in ASSIGNMENT_MODES:
        mode = "auto"
    vp_id = _text(_get(source, "vp_id", "fixedVpId")) or _text(source.get("fixed_vp_id")) or None
    candidates = _unique_strings(_get(source, "candidate_vp_ids", "candidateVpIds"))
    if (mode == "fixed" and not vp_id) or (mode == "pool" and not candidates):
        mode = "auto"
    return {
        "mode": mode,
        "capability": clean_id(source.get("capability"), action_type, max_len=MAX_TYPE_LEN),
        "candidate_vp_ids": candidates,
        "vp_id": vp_id if mode == "fixed" else None,
        "separate_from_stage_types": _unique_strings(
            _get(source, "separate_from_stage_types", "separateFromStageTypes")
        ),
    }


def normalize_model_policy(raw: Any) -> dict[str, Any]:
    """{mode, model, effort}; `specific` without a model degrades to `inherit` [PERIPH]."""
    source = _as_dict(raw)
    mode = source.get("mode")
    if mode not in MODEL_MODES:
        mode = "inherit"
    model = _text(source.get("model")) or None
    if mode == "specific" and not model:
        mode = "inherit"
    effort = source.get("effort")
    if effort not in MODEL_EFFORTS:
        effort = None
    return {"mode": mode, "model": model, "effort": effort}


def _normalize_type(raw_type: Any, planning_mode: str) -> str:
    if planning_mode == "ai":
        return clean_id(raw_type, "custom", max_len=MAX_TYPE_LEN)
    slug = clean_id(raw_type, "custom")
    return slug if slug in _BUILT_IN else "custom"


# --------------------------------------------------------------------------- normalisation (§4.1)


def normalize_stage(raw: Any, index: int, *, planning_mode: str = "static") -> dict[str, Any]:
    """One stage of DOMAIN §4.1 (uniqueness and review targets are checked per workflow)."""
    source = _as_dict(raw)
    action_type = _normalize_type(source.get("type"), planning_mode)
    stage_id = clean_id(source.get("id"), f"{action_type}-{index + 1}")
    workspace_mode = _get(source, "workspace_mode", "workspaceMode")
    stage: dict[str, Any] = {
        "id": stage_id,
        "name": _text(source.get("name"), MAX_NAME_LEN) or stage_id,
        "type": action_type,
        **normalize_brief(source, action_type),
        "instruction": _text(source.get("instruction")) or default_policy_text(action_type),
        "assignment_policy": normalize_assignment_policy(
            _get(source, "assignment_policy", "assignmentPolicy"), action_type
        ),
        "model_policy": normalize_model_policy(_get(source, "model_policy", "modelPolicy")),
        "depends_on_stage_ids": _unique_strings(
            _get(source, "depends_on_stage_ids", "dependsOnStageIds")
        ),
        "workspace_mode": workspace_mode if workspace_mode in WORKSPACE_MODES else "shared",
        "max_attempts": _clamp_attempts(_get(source, "max_attempts", "maxAttempts")),
        "changes_requested_stage_id": None,
    }
    if action_type == "review":
        stage["changes_requested_stage_id"] = clean_id(
            _get(source, "changes_requested_stage_id", "changesRequestedStageId"), "implement"
        )
    return stage


def _check_review_targets(stages: list[dict[str, Any]]) -> None:
    positions = {stage["id"]: i for i, stage in enumerate(stages)}
    for i, stage in enumerate(stages):
        if stage["type"] != "review":
            continue
        target_id = stage["changes_requested_stage_id"]
        target_index = positions.get(target_id)
        if target_index is None:
            raise WorkflowError(
                f'Review stage "{stage["id"]}" points to missing stage "{target_id}"'
            )
        if target_index >= i or stages[target_index]["type"] in ("review", "deliver"):
            raise WorkflowError(
                f'Review stage "{stage["id"]}" must return to an earlier editable stage'
            )


def _normalize_type_map(raw: Any, normalize_value) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in _as_dict(raw).items():
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
    planning_mode = "ai" if _get(raw, "planning_mode", "planningMode") == "ai" else "static"
    requested_mode = _get(raw, "execution_mode", "executionMode")
    execution = "graph" if planning_mode == "ai" and requested_mode == "graph" else "linear"
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

    raw_templates = _get(raw, "action_templates", "actionTemplates")
    templates = (
        [normalize_workflow(t, i) for i, t in enumerate(raw_templates)]
        if isinstance(raw_templates, (list, tuple))
        else []
    )
    return {
        "version": 1,
        "id": workflow_id,
        "name": _text(raw.get("name"), MAX_NAME_LEN) or workflow_id,
        "planning_mode": planning_mode,
        "execution_mode": execution,
        "work_item_type": clean_id(
            _get(raw, "work_item_type", "workItemType"), "", max_len=MAX_TYPE_LEN
        ) or None,
        "global_instructions": _text(
            _get(raw, "global_instructions", "globalInstructions"), MAX_GLOBAL_INSTRUCTIONS_LEN
        ),
        "model_policy": normalize_model_policy(_get(raw, "model_policy", "modelPolicy")),
        "action_model_policies": _normalize_type_map(
            _get(raw, "action_model_policies", "actionModelPolicies"),
            lambda v: normalize_model_policy(v) if isinstance(v, dict) else None,
        ),
        "action_instructions": _normalize_type_map(
            _get(raw, "action_instructions", "actionInstructions"),
            lambda v: _text(v) or None,
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


def _snapshot_stages(snapshot: Any) -> list[dict[str, Any]]:
    if isinstance(snapshot, dict):
        stages = snapshot.get("stages")
        if isinstance(stages, list) and stages:
            return stages
    return []


def execution_mode(snapshot: Any) -> str:
    """`graph` only when the snapshot says so; absent snapshot or mode ⇒ `linear`."""
    if not isinstance(snapshot, dict):
        return "linear"
    return "graph" if _get(snapshot, "execution_mode", "executionMode") == "graph" else "linear"


def effective_stages(snapshot: Any) -> list[dict[str, Any]]:
    """The snapshot's stages, or the legacy workflow's when it has none (DOMAIN §4.2)."""
    return _snapshot_stages(snapshot) or legacy_workflow()["stages"]


def required_role_for(stage: Any) -> str:
    """The fixed assignee of a stage, else ""."""
    policy = _as_dict(_as_dict(stage).get("assignment_policy"))
    if policy.get("mode") != "fixed":
        return ""
    return _text(policy.get("vp_id")) or _text(policy.get("fixed_vp_id"))


def stage_action_fields(stage: dict[str, Any]) -> dict[str, Any]:
    """The fields an action copies from its stage (DOMAIN §4.5), minus instruction and context."""
    return {
        "type": stage["type"],
        "stage_id": stage["id"],
        "assignment_policy": copy.deepcopy(stage.get("assignment_policy") or {}),
        "model_policy": copy.deepcopy(stage.get("model_policy") or {}),
        "depends_on_stage_ids": list(stage.get("depends_on_stage_ids") or []),
        "workspace_mode": stage.get("workspace_mode") or "shared",
        "changes_requested_stage_id": stage.get("changes_requested_stage_id") or None,
        "max_attempts": _clamp_attempts(stage.get("max_attempts")),
        "required_role": required_role_for(stage),
        "brief": normalize_brief(stage, stage["type"]),
    }


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
            "type": "triage",
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
        "execution_mode": "linear",
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
    stages = _snapshot_stages(snapshot)
    for stage in stages:
        if isinstance(stage, dict) and stage.get("type") == "triage":
            return copy.deepcopy(stage)
    if stages:
        return copy.deepcopy(stages[0])
    return planning_snapshot()["stages"][0]


def _type_lookup(mapping: Any, action_type: str) -> Any:
    table = _as_dict(mapping)
    value = table.get(action_type)
    if value is None and not _is_built_in(action_type):
        value = table.get("custom")
    return value


def _plan_dependencies(entry: dict[str, Any], previous_id: str | None) -> list[str]:
    """Rule 5: a present key is used as given (trimmed, deduplicated); absent ⇒ the previous entry."""
    if _has(entry, "depends_on_action_ids", "dependsOnActionIds"):
        value = _get(entry, "depends_on_action_ids", "dependsOnActionIds")
        if isinstance(value, str):
            value = [value]
        return _unique_strings(value)
    return [previous_id] if previous_id else []


def _generate_stage(
    snapshot: dict[str, Any], entry: dict[str, Any], position: int, seen: set[str],
    previous_id: str | None,
) -> dict[str, Any]:
    action_type = clean_id(entry.get("type"), "custom", max_len=MAX_TYPE_LEN)
    if action_type == "triage":
        raise PlanError("AI-planned Actions cannot add another triage Action")
    stage_id = clean_id(entry.get("id"), f"{action_type}-{position}")
    if stage_id in seen:
        raise PlanError(f'Duplicate AI-planned Action id "{stage_id}"')
    seen.add(stage_id)
    objective = _text(entry.get("objective"), MAX_BRIEF_LEN)
    if not objective:
        raise PlanError(f'AI-planned Action "{stage_id}" requires an objective')
    defaults = default_brief(action_type)
    workspace_mode = _get(entry, "workspace_mode", "workspaceMode")
    model_policy = _type_lookup(snapshot.get("action_model_policies"), action_type)
    return {
        "id": stage_id,
        "name": _text(entry.get("name"), MAX_NAME_LEN) or stage_id,
        "type": action_type,
        "objective": objective,
        "approach": _text(entry.get("approach"), MAX_BRIEF_LEN) or defaults["approach"],
        "expected_outcome": _text(
            _get(entry, "expected_outcome", "expectedOutcome"), MAX_BRIEF_LEN
        ) or defaults["expected_outcome"],
        "instruction": _text(_type_lookup(snapshot.get("action_instructions"), action_type))
        or default_policy_text(action_type),
        "assignment_policy": normalize_assignment_policy(
            {
                "mode": "auto",
                "capability": entry.get("capability"),
                "separate_from_stage_types": _get(
                    entry, "separate_from_action_types", "separateFromActionTypes"
                ),
            },
            action_type,
        ),
        "model_policy": normalize_model_policy(
            model_policy if isinstance(model_policy, dict) else snapshot.get("model_policy")
        ),
        "depends_on_stage_ids": _plan_dependencies(entry, previous_id),
        "workspace_mode": workspace_mode if workspace_mode in WORKSPACE_MODES else "shared",
        "max_attempts": _clamp_attempts(_get(entry, "max_attempts", "maxAttempts")),
        "changes_requested_stage_id": None,
    }


def _assign_review_targets(stages: list[dict[str, Any]], entries: list[dict[str, Any]]) -> None:
    """Rule 6: explicit targets must be earlier editable entries; defaults go by list position."""
    for i, stage in enumerate(stages):
        if stage["type"] != "review":
            continue
        earlier = [s for s in stages[:i] if s["type"] not in ("review", "deliver")]
        requested = _get(entries[i], "changes_requested_action_id", "changesRequestedActionId")
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
    isolated = [s["id"] for s in stages if s["workspace_mode"] == "isolated-write"]
    if isolated and sum(1 for s in stages if s["workspace_mode"] == "integrate") != 1:
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
        if stage["workspace_mode"] == "integrate":
            if stage["type"] != "integrate" or not isolated_deps:
                raise PlanError(
                    f'AI-planned integration Action "{stage["id"]}" must depend on '
                    "isolated-write Actions"
                )
            if any(d not in stage["depends_on_stage_ids"] for d in isolated):
                raise PlanError(
                    f'AI-planned integration Action "{stage["id"]}" must depend on every '
                    "isolated-write Action"
                )
        elif stage["type"] == "integrate":
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
    raw_type = _get(plan, "work_item_type", "workItemType")
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
            if isinstance(s, dict) and s.get("type") != "triage"
        ]
        if not reused:
            raise PlanError(
                f'AI-planned triage template "{template.get("id")}" has no non-triage stage'
            )
        # A template is a static workflow, so the item continues linear whatever mode the
        # snapshot had before (a re-triaged graph item that picks a template, DEV-6).
        source.update(execution_mode="linear", work_item_type=work_item_type, action_templates=[],
                      stages=[triage, *reused])
        return source

    # Rule 5: the generated entries.
    entries = plan.get("actions")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PLAN_ACTIONS:
        raise PlanError(
            f"AI-planned triage requires between 1 and {MAX_PLAN_ACTIONS} Actions"
        )
    entries = [_as_dict(e) for e in entries]
    seen = {"triage"}
    stages: list[dict[str, Any]] = []
    for position, entry in enumerate(entries, start=1):
        previous_id = stages[-1]["id"] if stages else None
        stages.append(_generate_stage(source, entry, position, seen, previous_id))
    _assign_review_targets(stages, entries)  # rule 6
    _check_graph(stages)  # rules 7–8
    # Rule 9.
    source.update(execution_mode="graph", work_item_type=work_item_type, stages=[triage, *stages])
    return source


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
    if current.get("type") == "review":
        if review_decision == "changes_requested":
            target = current.get("changes_requested_stage_id") or "implement"
            target_index = _stage_index(stages, target, None)
            if target_index < 0:
                raise WorkflowError(f'Review return target "{target}" is an unknown stage')
            return stages[target_index].get("id")
        if review_decision != "approved":
            raise WorkflowError("Completed review requires approved or changes_requested")
    if index + 1 < len(stages):
        return stages[index + 1].get("id")
    return None
