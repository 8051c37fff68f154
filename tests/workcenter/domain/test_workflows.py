"""Pure tests of workflow definitions and the linear next step (DOMAIN §4.1-§4.2, §7.4)."""
from __future__ import annotations

import pytest

from workcenter.errors import WorkflowError
from workcenter.choices import ExecutionMode, WorkspaceMode
from workcenter.domain import workflows as wf


def _stage_ids(snapshot):
    return [stage["id"] for stage in snapshot["stages"]]


# --------------------------------------------------------------------------- constants / clean_id


def test_constants_match_domain():
    assert len(wf.ACTION_TYPES) == 14
    assert wf.ACTION_TYPES[0] == "triage" and wf.ACTION_TYPES[-1] == "custom"
    assert "integrate" in wf.ACTION_TYPES
    assert WorkspaceMode.values == ["shared", "read", "isolated-write", "integrate"]
    assert wf.LEGACY_ASSIGNEES == {
        "triage": "omni", "implement": "linus", "review": "martin", "deliver": "linus",
    }


@pytest.mark.parametrize(
    "value, expected",
    [
        ("Fix Bug", "fix-bug"),
        ("  --Hello   World!!--  ", "hello-world"),
        ("a__b--c", "a__b--c"),
        ("Ünïcode Stage", "n-code-stage"),
        ("a/b\\c.d", "a-b-c-d"),
        ("UPPER_case-9", "upper_case-9"),
    ],
)
def test_clean_id_slugs(value, expected):
    assert wf.clean_id(value, "fallback") == expected


@pytest.mark.parametrize("value", ["", "   ", "!!!", "---", None, 42, ["x"], {"a": 1}])
def test_clean_id_falls_back_for_empty_or_non_strings(value):
    assert wf.clean_id(value, "fallback") == "fallback"


def test_clean_id_respects_max_len():
    assert wf.clean_id("x" * 100, "f", max_len=64) == "x" * 64
    # truncation never leaves a trailing separator
    assert wf.clean_id("a" * 63 + "-bbb", "f", max_len=64) == "a" * 63


# --------------------------------------------------------------------------- defaults by type


def test_default_policy_text_per_type_and_custom_fallback():
    texts = {t: wf.default_policy_text(t) for t in wf.ACTION_TYPES}
    assert all(texts.values())
    assert len(set(texts.values())) == len(wf.ACTION_TYPES)
    assert wf.default_policy_text("brand-new-type") == texts["custom"]


@pytest.mark.parametrize("weird", ["constructor", "__proto__", "__class__", "get", "items", "keys"])
def test_default_lookups_treat_special_names_as_unknown_types(weird):
    assert wf.default_policy_text(weird) == wf.default_policy_text("custom")
    assert wf.default_brief(weird) == wf.default_brief("custom")


def test_default_brief_shape_and_custom_fallback():
    for action_type in wf.ACTION_TYPES:
        brief = wf.default_brief(action_type)
        assert set(brief) == {"objective", "approach", "expected_outcome"}
        assert all(isinstance(v, str) and v for v in brief.values())
    assert wf.default_brief("review") != wf.default_brief("custom")
    assert wf.default_brief(None) == wf.default_brief("custom")
    # callers get a fresh dict
    brief = wf.default_brief("test")
    brief["objective"] = "changed"
    assert wf.default_brief("test")["objective"] != "changed"


# --------------------------------------------------------------------------- normalize_stage


def test_normalize_stage_fills_every_key_with_defaults():
    stage = wf.normalize_stage({"type": "implement"}, 1)
    assert set(stage) == {
        "id", "name", "type", "objective", "approach", "expected_outcome", "instruction",
        "assignment_policy", "model_policy", "depends_on_stage_ids", "workspace_mode",
        "max_attempts", "changes_requested_stage_id",
    }
    assert stage["id"] == "implement-2"
    assert stage["name"] == "implement-2"
    assert stage["instruction"] == wf.default_policy_text("implement")
    assert stage["objective"] == wf.default_brief("implement")["objective"]
    assert stage["workspace_mode"] == "shared"
    assert stage["max_attempts"] == 2
    assert stage["changes_requested_stage_id"] is None
    assert stage["assignment_policy"]["mode"] == "auto"
    assert stage["assignment_policy"]["capability"] == "implement"


def test_normalize_stage_slugs_id_and_keeps_given_texts():
    stage = wf.normalize_stage(
        {"id": "Fix It!", "name": " Fix ", "type": "implement", "objective": " Do X ",
         "instruction": " Custom policy "},
        0,
    )
    assert stage["id"] == "fix-it"
    assert stage["name"] == "Fix"
    assert stage["objective"] == "Do X"
    assert stage["instruction"] == "Custom policy"


@pytest.mark.parametrize(
    "raw, expected",
    [(None, 2), (0, 2), ("abc", 2), (float("nan"), 2), (True, 2), (1, 1), (3, 3), (5, 5),
     (6, 5), (99, 5), (-4, 1), ("4", 4)],
)
def test_normalize_stage_clamps_max_attempts(raw, expected):
    stage = wf.normalize_stage({"type": "test", "max_attempts": raw}, 0)
    assert stage["max_attempts"] == expected


def test_normalize_stage_missing_max_attempts_defaults_to_two():
    assert wf.normalize_stage({"type": "test"}, 0)["max_attempts"] == 2


def test_normalize_stage_dependencies_trimmed_deduped_not_slugged():
    stage = wf.normalize_stage(
        {"type": "test", "depends_on_stage_ids": [" Fix ", "", "b", "Fix", "  ", "b", 7, "a"]}, 0
    )
    assert stage["depends_on_stage_ids"] == ["Fix", "b", "a"]


def test_normalize_stage_unknown_workspace_mode_becomes_shared():
    assert wf.normalize_stage({"type": "test", "workspace_mode": "exclusive"}, 0)[
        "workspace_mode"] == "shared"
    assert wf.normalize_stage({"type": "test", "workspace_mode": "isolated-write"}, 0)[
        "workspace_mode"] == "isolated-write"


def test_normalize_stage_static_unknown_type_becomes_custom():
    stage = wf.normalize_stage({"type": "data-cleanup"}, 2)
    assert stage["type"] == "custom"
    assert stage["id"] == "custom-3"


def test_normalize_stage_ai_keeps_slug_type_up_to_64():
    stage = wf.normalize_stage({"type": "Data Cleanup"}, 0, planning_mode="ai")
    assert stage["type"] == "data-cleanup"
    assert stage["instruction"] == wf.default_policy_text("custom")
    assert stage["objective"] == wf.default_brief("custom")["objective"]
    long_type = wf.normalize_stage({"type": "t" * 80}, 0, planning_mode="ai")["type"]
    assert long_type == "t" * 64
    assert wf.normalize_stage({}, 0, planning_mode="ai")["type"] == "custom"


@pytest.mark.parametrize("weird", ["constructor", "__proto__"])
def test_normalize_stage_special_type_names(weird):
    ai_stage = wf.normalize_stage({"type": weird}, 0, planning_mode="ai")
    assert ai_stage["type"] == weird
    assert ai_stage["instruction"] == wf.default_policy_text("custom")
    static_stage = wf.normalize_stage({"type": weird}, 0)
    assert static_stage["type"] == "custom"


def test_normalize_stage_review_return_target_default_and_slug():
    assert wf.normalize_stage({"type": "review"}, 0)["changes_requested_stage_id"] == "implement"
    stage = wf.normalize_stage({"type": "review", "changes_requested_stage_id": "Fix Code"}, 0)
    assert stage["changes_requested_stage_id"] == "fix-code"
    non_review = wf.normalize_stage({"type": "test", "changes_requested_stage_id": "x"}, 0)
    assert non_review["changes_requested_stage_id"] is None


def test_normalize_stage_accepts_reference_camel_case_keys():
    stage = wf.normalize_stage(
        {"type": "review", "maxAttempts": 4, "dependsOnStageIds": ["a"],
         "workspaceMode": "read", "changesRequestedStageId": "triage",
         "expectedOutcome": "An answer.",
         "assignmentPolicy": {"mode": "fixed", "fixedVpId": "martin"}},
        0,
    )
    assert stage["max_attempts"] == 4
    assert stage["depends_on_stage_ids"] == ["a"]
    assert stage["workspace_mode"] == "read"
    assert stage["changes_requested_stage_id"] == "triage"
    assert stage["expected_outcome"] == "An answer."
    assert wf.required_role_for(stage) == "martin"


# --------------------------------------------------------------------------- normalize_workflow


def _static(stages, **extra):
    return wf.normalize_workflow({"id": "Flow", "stages": stages, **extra})


def test_normalize_workflow_full_snapshot_keys():
    flow = _static([{"type": "implement"}])
    assert set(flow) == {
        "version", "id", "name", "planning_mode", "execution_mode", "work_item_type",
        "global_instructions", "model_policy", "action_model_policies", "action_instructions",
        "action_templates", "stages",
    }
    assert flow["version"] == 1
    assert flow["id"] == "flow"
    assert flow["planning_mode"] == "static"
    assert flow["execution_mode"] == "linear"
    assert flow["work_item_type"] is None


def test_normalize_workflow_id_fallback_by_index():
    assert wf.normalize_workflow({"stages": [{"type": "test"}]}, 2)["id"] == "workflow-3"


def test_normalize_workflow_static_graph_is_forced_linear():
    flow = _static([{"type": "implement"}], execution_mode="graph")
    assert flow["execution_mode"] == "linear"


def test_normalize_workflow_ai_keeps_graph():
    flow = wf.normalize_workflow(
        {"id": "x", "planning_mode": "ai", "execution_mode": "graph",
         "stages": [{"type": "triage"}, {"type": "Data Fix"}]}
    )
    assert flow["execution_mode"] == "graph"
    assert flow["stages"][1]["type"] == "data-fix"


def test_normalize_workflow_empty_stages_rejected():
    with pytest.raises(WorkflowError):
        _static([])
    with pytest.raises(WorkflowError):
        wf.normalize_workflow({"id": "x"})
    with pytest.raises(WorkflowError):
        wf.normalize_workflow("not a workflow")


def test_normalize_workflow_duplicate_stage_ids_rejected():
    with pytest.raises(WorkflowError, match="Duplicate"):
        _static([{"id": "Build", "type": "implement"}, {"id": "build", "type": "test"}])


def test_normalize_workflow_review_defaults_to_implement():
    flow = _static([{"type": "implement", "id": "implement"}, {"type": "review"}])
    assert flow["stages"][1]["changes_requested_stage_id"] == "implement"


def test_normalize_workflow_review_missing_stage_rejected():
    with pytest.raises(WorkflowError, match="missing stage"):
        _static([{"type": "design"}, {"type": "review"}])


def test_normalize_workflow_review_must_return_earlier():
    with pytest.raises(WorkflowError, match="must return to an earlier editable stage"):
        _static([{"id": "review", "type": "review", "changes_requested_stage_id": "implement"},
                  {"id": "implement", "type": "implement"}])


@pytest.mark.parametrize("target_type", ["review", "deliver"])
def test_normalize_workflow_review_cannot_return_to_review_or_deliver(target_type):
    stages = [
        {"id": "implement", "type": "implement"},
        {"id": "target", "type": target_type, "changes_requested_stage_id": "implement"},
        {"id": "final-review", "type": "review", "changes_requested_stage_id": "target"},
    ]
    with pytest.raises(WorkflowError, match="must return to an earlier editable stage"):
        _static(stages)


def test_normalize_workflow_review_may_return_to_triage():
    flow = _static([{"id": "triage", "type": "triage"},
                    {"type": "review", "changes_requested_stage_id": "triage"}])
    assert flow["stages"][1]["changes_requested_stage_id"] == "triage"


def test_normalize_workflow_work_item_type_slugged_or_none():
    assert _static([{"type": "test"}], work_item_type="Bug Fix")["work_item_type"] == "bug-fix"
    assert _static([{"type": "test"}], work_item_type="  ")["work_item_type"] is None


def test_normalize_workflow_global_instructions_capped():
    flow = _static([{"type": "test"}], global_instructions="x" * 25_000)
    assert len(flow["global_instructions"]) == 20_000


# --------------------------------------------------------------------------- defaults / legacy


def test_default_workflows_is_software_change():
    workflows = wf.default_workflows()
    assert len(workflows) == 1
    flow = workflows[0]
    assert flow["id"] == "software-change"
    assert flow["work_item_type"] == "software-change"
    assert flow["planning_mode"] == "static"
    assert flow["execution_mode"] == "linear"
    assert [s["type"] for s in flow["stages"]] == ["triage", "implement", "review", "deliver"]
    assert _stage_ids(flow) == ["triage", "implement", "review", "deliver"]
    assert all(s["max_attempts"] == 2 for s in flow["stages"])
    assert all(s["assignment_policy"]["mode"] == "auto" for s in flow["stages"])
    review = flow["stages"][2]
    assert review["changes_requested_stage_id"] == "implement"
    assert review["assignment_policy"]["separate_from_stage_types"] == ["implement"]
    assert all(wf.required_role_for(s) == "" for s in flow["stages"])


def test_legacy_workflow_has_fixed_assignees():
    flow = wf.legacy_workflow()
    assert [wf.required_role_for(s) for s in flow["stages"]] == ["omni", "linus", "martin", "linus"]
    assert all(s["assignment_policy"]["mode"] == "fixed" for s in flow["stages"])
    assert flow["stages"][0]["assignment_policy"]["vp_id"] == "omni"
    # the default workflow is not mutated by building the legacy one
    assert wf.default_workflows()[0]["stages"][0]["assignment_policy"]["mode"] == "auto"


def test_execution_mode_defaults_to_linear():
    assert ExecutionMode.of(None) == "linear"
    assert ExecutionMode.of({}) == "linear"
    assert ExecutionMode.of({"execution_mode": "linear", "stages": []}) == "linear"
    assert ExecutionMode.of({"execution_mode": "weird"}) == "linear"


def test_execution_mode_stage_less_snapshot_decides_mode():
    assert ExecutionMode.of({"execution_mode": "graph"}) == "graph"
    assert ExecutionMode.of({"executionMode": "graph"}) == "graph"


def test_effective_stages_uses_legacy_for_null_or_stage_less_snapshot():
    for snapshot in (None, {}, {"execution_mode": "graph"}, {"stages": []}):
        stages = wf.effective_stages(snapshot)
        assert [wf.required_role_for(s) for s in stages] == ["omni", "linus", "martin", "linus"]


def test_effective_stages_uses_snapshot_stages():
    snapshot = _static([{"id": "only", "type": "research"}])
    assert _stage_ids({"stages": wf.effective_stages(snapshot)}) == ["only"]


def test_required_role_for_non_fixed_is_empty():
    assert wf.required_role_for({"assignment_policy": {"mode": "auto", "capability": "x"}}) == ""
    assert wf.required_role_for({}) == ""
    assert wf.required_role_for({"assignment_policy": {"mode": "fixed", "vp_id": "ada"}}) == "ada"


# --------------------------------------------------------------------------- find_stage / next_stage_id


def test_find_stage_by_id_then_type():
    snapshot = _static([{"id": "build", "type": "implement"}, {"id": "implement", "type": "test"}])
    assert wf.find_stage(snapshot, "implement", "implement")["type"] == "test"
    assert wf.find_stage(snapshot, "", "implement")["id"] == "build"
    assert wf.find_stage(snapshot, "nope", "implement")["id"] == "build"
    assert wf.find_stage(snapshot, "nope", "deliver") is None


def test_find_stage_legacy_snapshot():
    stage = wf.find_stage(None, "review")
    assert stage["type"] == "review"
    assert wf.required_role_for(stage) == "martin"


def test_next_stage_id_linear_progression():
    snapshot = wf.default_workflows()[0]
    assert wf.next_stage_id(snapshot, "triage", "triage", None) == "implement"
    assert wf.next_stage_id(snapshot, "implement", "implement", None) == "review"


def test_next_stage_id_review_approved_continues():
    snapshot = wf.default_workflows()[0]
    assert wf.next_stage_id(snapshot, "review", "review", "approved") == "deliver"


def test_next_stage_id_review_changes_requested_returns_to_target():
    snapshot = _static([
        {"id": "triage", "type": "triage"},
        {"id": "build", "type": "implement"},
        {"id": "docs", "type": "document"},
        {"id": "check", "type": "review", "changes_requested_stage_id": "build"},
        {"id": "deliver", "type": "deliver"},
    ])
    assert wf.next_stage_id(snapshot, "check", "review", "changes_requested") == "build"
    assert wf.next_stage_id(snapshot, "check", "review", "approved") == "deliver"


def test_next_stage_id_last_stage_is_none():
    snapshot = wf.default_workflows()[0]
    assert wf.next_stage_id(snapshot, "deliver", "deliver", None) is None


def test_next_stage_id_falls_back_to_type_and_legacy():
    # legacy rows: empty stage id, found by type over the legacy workflow
    assert wf.next_stage_id(None, "", "implement", None) == "review"
    assert wf.next_stage_id({"execution_mode": "linear"}, "review", "review",
                            "changes_requested") == "implement"


def test_next_stage_id_unknown_stage_raises():
    with pytest.raises(WorkflowError, match="unknown stage"):
        wf.next_stage_id(wf.default_workflows()[0], "nope", "research", None)


def test_next_stage_id_review_without_decision_raises():
    with pytest.raises(WorkflowError):
        wf.next_stage_id(wf.default_workflows()[0], "review", "review", None)
