"""Pure tests of workflow definitions, planning snapshots and triage plans (DOMAIN §4, §7.4)."""
from __future__ import annotations

import copy

import pytest

from workcenter.errors import PlanError, WorkflowError
from workcenter.services import workflows as wf


def _stage_ids(snapshot):
    return [stage["id"] for stage in snapshot["stages"]]


def _planning(requested_type=None):
    return wf.planning_snapshot(None, requested_type)


def _action(**fields):
    entry = {"objective": f"Do {fields.get('id') or fields.get('type') or 'it'}."}
    entry.update(fields)
    return entry


def _apply(actions, work_item_type="inventory-bug", snapshot=None):
    return wf.apply_triage_plan(
        snapshot or _planning(), {"work_item_type": work_item_type, "actions": actions}
    )


def _plan_error(actions, **kw) -> str:
    with pytest.raises(PlanError) as info:
        _apply(actions, **kw)
    return str(info.value)


# --------------------------------------------------------------------------- constants / clean_id


def test_constants_match_domain():
    assert len(wf.ACTION_TYPES) == 14
    assert wf.ACTION_TYPES[0] == "triage" and wf.ACTION_TYPES[-1] == "custom"
    assert "integrate" in wf.ACTION_TYPES
    assert wf.WORKSPACE_MODES == ("shared", "read", "isolated-write", "integrate")
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
    assert wf.execution_mode(None) == "linear"
    assert wf.execution_mode({}) == "linear"
    assert wf.execution_mode({"execution_mode": "linear", "stages": []}) == "linear"
    assert wf.execution_mode({"execution_mode": "weird"}) == "linear"


def test_execution_mode_stage_less_snapshot_decides_mode():
    assert wf.execution_mode({"execution_mode": "graph"}) == "graph"


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


def test_stage_action_fields_copies_stage():
    stage = wf.legacy_workflow()["stages"][2]
    fields = wf.stage_action_fields(stage)
    assert fields["type"] == "review"
    assert fields["stage_id"] == "review"
    assert fields["required_role"] == "martin"
    assert fields["changes_requested_stage_id"] == "implement"
    assert fields["brief"] == wf.default_brief("review")
    fields["assignment_policy"]["mode"] = "auto"
    assert stage["assignment_policy"]["mode"] == "fixed"


# --------------------------------------------------------------------------- planning snapshot


def test_planning_snapshot_shape():
    snapshot = _planning()
    assert snapshot["id"] == "ai-planned"
    assert snapshot["planning_mode"] == "ai"
    assert snapshot["execution_mode"] == "linear"
    assert snapshot["work_item_type"] is None
    assert _stage_ids(snapshot) == ["triage"]
    triage = snapshot["stages"][0]
    assert triage["type"] == "triage"
    assert triage["objective"] == wf.default_brief("triage")["objective"]
    assert triage["instruction"].startswith(wf.default_policy_text("triage"))
    assert "software-change: Software change (triage -> implement -> review -> deliver)" in (
        triage["instruction"])
    assert [t["id"] for t in snapshot["action_templates"]] == ["software-change"]
    assert snapshot["action_templates"][0]["work_item_type"] == "software-change"


def test_planning_snapshot_tags_templates_with_id_when_type_missing():
    workflows = [{"id": "Hotfix", "name": "Hot fix", "stages": [{"type": "implement"}]}]
    snapshot = wf.planning_snapshot(workflows)
    assert snapshot["action_templates"][0]["work_item_type"] == "hotfix"
    assert "hotfix: Hot fix (implement)" in snapshot["stages"][0]["instruction"]


def test_planning_snapshot_requested_template_type_returns_template():
    snapshot = _planning("Software-Change")
    assert snapshot["id"] == "software-change"
    assert snapshot["planning_mode"] == "static"
    assert snapshot["execution_mode"] == "linear"
    assert _stage_ids(snapshot) == ["triage", "implement", "review", "deliver"]


def test_planning_snapshot_requested_type_matches_template_id():
    workflows = [{"id": "hotfix", "work_item_type": "urgent-fix", "stages": [{"type": "implement"}]}]
    assert wf.planning_snapshot(workflows, "hotfix")["id"] == "hotfix"
    assert wf.planning_snapshot(workflows, "urgent-fix")["id"] == "hotfix"


@pytest.mark.parametrize("requested", [None, "", "auto", "AUTO", "  Auto  "])
def test_planning_snapshot_auto_means_no_type(requested):
    snapshot = _planning(requested)
    assert snapshot["id"] == "ai-planned"
    assert snapshot["work_item_type"] is None


def test_planning_snapshot_freezes_unknown_requested_type():
    snapshot = _planning("Data Migration " + "x" * 80)
    assert snapshot["id"] == "ai-planned"
    assert snapshot["work_item_type"].startswith("data-migration-x")
    assert len(snapshot["work_item_type"]) == 64
    assert snapshot["work_item_type"] in snapshot["stages"][0]["instruction"]


def test_planning_snapshot_uses_given_workflows():
    workflows = [
        {"id": "a", "stages": [{"type": "research"}]},
        {"id": "b", "work_item_type": "bee", "stages": [{"type": "write"}]},
    ]
    snapshot = wf.planning_snapshot(workflows)
    assert [t["work_item_type"] for t in snapshot["action_templates"]] == ["a", "bee"]


# --------------------------------------------------------------------------- triage plan: errors


def test_apply_triage_plan_requires_structured_plan():
    for plan in (None, "do it", ["a"], 3):
        with pytest.raises(PlanError, match="requires a structured plan"):
            wf.apply_triage_plan(_planning(), plan)


def test_apply_triage_plan_requires_specific_work_item_type():
    for plan in ({}, {"work_item_type": "  "}, {"work_item_type": 5}):
        with pytest.raises(PlanError, match="requires a specific workItemType"):
            wf.apply_triage_plan(_planning(), plan)


def test_apply_triage_plan_requires_valid_work_item_type():
    with pytest.raises(PlanError, match="requires a valid workItemType"):
        wf.apply_triage_plan(_planning(), {"work_item_type": "!!!", "actions": [_action()]})


def test_apply_triage_plan_must_keep_selected_work_item_type():
    snapshot = _planning("data-migration")
    with pytest.raises(PlanError, match="must keep the selected workItemType"):
        _apply([_action(type="migrate")], work_item_type="bug-fix", snapshot=snapshot)
    # the same type (after slugging) is accepted
    result = _apply([_action(type="migrate")], work_item_type="Data Migration", snapshot=snapshot)
    assert result["work_item_type"] == "data-migration"


def test_apply_triage_plan_template_without_non_triage_stage():
    workflows = [{"id": "solo", "stages": [{"type": "triage"}]}]
    snapshot = wf.planning_snapshot(workflows)
    with pytest.raises(PlanError, match=r'template "solo" has no non-triage stage'):
        wf.apply_triage_plan(snapshot, {"work_item_type": "solo"})


@pytest.mark.parametrize("actions", [[], None, "x", [_action(id=f"a{i}") for i in range(9)]])
def test_apply_triage_plan_between_1_and_8_actions(actions):
    assert "between 1 and 8" in _plan_error(actions)


def test_apply_triage_plan_accepts_exactly_8_actions():
    result = _apply([_action(id=f"a{i}") for i in range(8)])
    assert len(result["stages"]) == 9


def test_apply_triage_plan_duplicate_id():
    message = _plan_error([_action(id="Fix"), _action(id="fix")])
    assert "Duplicate" in message and "fix" in message


def test_apply_triage_plan_duplicate_of_reserved_triage_id():
    assert "Duplicate" in _plan_error([_action(id="Triage", type="research")])


def test_apply_triage_plan_duplicate_of_default_id():
    # the second entry's default id is "research-2"
    assert "Duplicate" in _plan_error([_action(id="research-2"), _action(type="research")])


def test_apply_triage_plan_requires_objective():
    assert "requires an objective" in _plan_error([{"type": "research", "objective": "   "}])
    assert "requires an objective" in _plan_error(["not an object"])


def test_apply_triage_plan_cannot_add_another_triage():
    assert "cannot add another triage" in _plan_error([_action(type=" TRIAGE ")])


@pytest.mark.parametrize(
    "actions",
    [
        [_action(id="a", depends_on_action_ids=["a"])],  # self
        [_action(id="a", depends_on_action_ids=["b"]), _action(id="b")],  # future
        [_action(id="a", depends_on_action_ids=["nope"])],  # missing
        [_action(id="a", depends_on_action_ids=["triage"])],  # triage is not an entry
        [_action(id="fix"), _action(id="b", depends_on_action_ids=["Fix"])],  # not slugged
    ],
)
def test_apply_triage_plan_missing_self_or_future_dependency(actions):
    assert "missing, self, or future dependency" in _plan_error(actions)


def test_apply_triage_plan_exactly_one_integration():
    none = [_action(id="w", workspace_mode="isolated-write", depends_on_action_ids=[])]
    assert "exactly one integration" in _plan_error(none)
    two = [
        _action(id="w", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="i1", type="integrate", workspace_mode="integrate", depends_on_action_ids=["w"]),
        _action(id="i2", type="integrate", workspace_mode="integrate", depends_on_action_ids=["w"]),
    ]
    assert "exactly one integration" in _plan_error(two)


def test_apply_triage_plan_integration_must_depend_on_isolated_write():
    actions = [
        _action(id="w", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="r", workspace_mode="read", depends_on_action_ids=[]),
        _action(id="i", type="integrate", workspace_mode="integrate", depends_on_action_ids=["r"]),
    ]
    message = _plan_error(actions)
    assert "must depend on isolated-write" in message


def test_apply_triage_plan_integrate_mode_requires_integrate_type():
    actions = [
        _action(id="w", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="i", type="implement", workspace_mode="integrate", depends_on_action_ids=["w"]),
    ]
    assert "must depend on isolated-write" in _plan_error(actions)


def test_apply_triage_plan_integration_must_depend_on_every_isolated_write():
    actions = [
        _action(id="w1", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="w2", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="i", type="integrate", workspace_mode="integrate", depends_on_action_ids=["w1"]),
    ]
    assert "must depend on every isolated-write" in _plan_error(actions)


def test_apply_triage_plan_integrate_type_requires_integration_mode():
    actions = [_action(id="i", type="integrate", workspace_mode="shared")]
    assert "requires integration workspace mode" in _plan_error(actions)


def test_apply_triage_plan_consume_isolated_writes_through_integration():
    actions = [
        _action(id="w", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="t", type="test", depends_on_action_ids=["w"]),
        _action(id="i", type="integrate", workspace_mode="integrate", depends_on_action_ids=["w"]),
    ]
    assert "consume isolated writes through integration" in _plan_error(actions)


@pytest.mark.parametrize(
    "target", ["later", "check", "ship", "nope", "", "review-x"],
)
def test_apply_triage_plan_invalid_return_action(target):
    # later entry, a review, a deliver, a missing id, a blank id, the review itself
    actions = [_action(id="fix", type="implement"), _action(id="ship", type="deliver"),
               _action(id="check", type="review"),
               _action(id="review-x", type="review", changes_requested_action_id=target),
               _action(id="later", type="implement")]
    assert "invalid return Action" in _plan_error(actions)


def test_apply_triage_plan_review_requires_earlier_editable_action():
    actions = [_action(id="ship", type="deliver"), _action(id="check", type="review")]
    assert "requires an earlier editable Action" in _plan_error(actions)


def test_apply_triage_plan_errors_checked_in_rule_order():
    # rule 5 (objective) is reported before rule 8 (dependency) even for a later entry
    actions = [_action(id="a", depends_on_action_ids=["zzz"]), {"id": "b", "type": "test"}]
    assert "requires an objective" in _plan_error(actions)
    # rule 6 (review target) before rule 8 (dependency)
    actions = [_action(id="a", depends_on_action_ids=["zzz"]), _action(id="r", type="review",
               changes_requested_action_id="nope")]
    assert "invalid return Action" in _plan_error(actions)


def test_apply_triage_plan_failure_leaves_snapshot_unchanged():
    snapshot = _planning()
    before = copy.deepcopy(snapshot)
    with pytest.raises(PlanError):
        wf.apply_triage_plan(snapshot, {"work_item_type": "x", "actions": []})
    assert snapshot == before


# --------------------------------------------------------------------------- triage plan: results


def test_apply_triage_plan_template_reuse_is_linear_with_planning_triage():
    snapshot = _planning()
    plan = {"work_item_type": "Software Change", "actions": [_action(id="ignored")]}
    result = wf.apply_triage_plan(snapshot, plan)
    assert result["execution_mode"] == "linear"
    assert result["planning_mode"] == "ai"
    assert result["id"] == "ai-planned"
    assert result["work_item_type"] == "software-change"
    assert result["action_templates"] == []
    assert _stage_ids(result) == ["triage", "implement", "review", "deliver"]
    assert result["stages"][0] == snapshot["stages"][0]  # the planning triage, catalogue and all
    assert result["stages"][2]["changes_requested_stage_id"] == "implement"
    # input untouched
    assert len(snapshot["action_templates"]) == 1


def test_apply_triage_plan_generated_graph_snapshot():
    snapshot = _planning()
    plan = {
        "work_item_type": "Inventory Bug",
        "actions": [
            {"id": "Trace Writes", "type": "research", "objective": " Trace every writer. ",
             "capability": "Code Search", "max_attempts": 9},
            {"id": "fix", "type": "implement", "objective": "Make it atomic.",
             "approach": "Use F().", "expected_outcome": "Atomic decrement.",
             "workspace_mode": "bogus", "name": "Fix it"},
            {"id": "check", "type": "review", "objective": "Review the fix.",
             "separate_from_action_types": ["implement", " implement ", ""]},
        ],
    }
    result = wf.apply_triage_plan(snapshot, plan)
    assert result["execution_mode"] == "graph"
    assert result["planning_mode"] == "ai"
    assert result["work_item_type"] == "inventory-bug"
    assert _stage_ids(result) == ["triage", "trace-writes", "fix", "check"]
    assert result["stages"][0] == snapshot["stages"][0]
    trace, fix, check = result["stages"][1:]
    assert trace["objective"] == "Trace every writer."
    assert trace["approach"] == wf.default_brief("research")["approach"]
    assert trace["expected_outcome"] == wf.default_brief("research")["expected_outcome"]
    assert trace["name"] == "trace-writes"
    assert trace["max_attempts"] == 5
    assert trace["instruction"] == wf.default_policy_text("research")
    assert trace["assignment_policy"]["mode"] == "auto"
    assert trace["assignment_policy"]["capability"] == "code-search"
    assert trace["depends_on_stage_ids"] == []
    assert fix["name"] == "Fix it"
    assert fix["approach"] == "Use F()."
    assert fix["expected_outcome"] == "Atomic decrement."
    assert fix["workspace_mode"] == "shared"
    assert fix["assignment_policy"]["capability"] == "implement"
    assert fix["depends_on_stage_ids"] == ["trace-writes"]
    assert fix["changes_requested_stage_id"] is None
    assert check["depends_on_stage_ids"] == ["fix"]
    assert check["changes_requested_stage_id"] == "fix"
    assert check["assignment_policy"]["separate_from_stage_types"] == ["implement"]
    for stage in result["stages"][1:]:
        assert set(stage) == set(snapshot["stages"][0])


def test_apply_triage_plan_absent_depends_builds_chain_present_empty_is_root():
    result = _apply([
        _action(id="a"),
        _action(id="b"),
        _action(id="c", depends_on_action_ids=[]),
        _action(id="d"),
        _action(id="e", depends_on_action_ids=[" a ", "b", "a", ""]),
    ])
    deps = {s["id"]: s["depends_on_stage_ids"] for s in result["stages"][1:]}
    assert deps == {"a": [], "b": ["a"], "c": [], "d": ["c"], "e": ["a", "b"]}


def test_apply_triage_plan_default_ids_by_position():
    result = _apply([
        {"objective": "First."},
        {"type": "Data Fix", "objective": "Second."},
    ])
    assert _stage_ids(result)[1:] == ["custom-1", "data-fix-2"]
    assert result["stages"][2]["type"] == "data-fix"
    assert result["stages"][2]["instruction"] == wf.default_policy_text("custom")


def test_apply_triage_plan_review_default_target_by_list_position_not_graph():
    result = _apply([
        _action(id="build", type="implement", depends_on_action_ids=[]),
        _action(id="docs", type="document", depends_on_action_ids=[]),
        _action(id="ship", type="deliver", depends_on_action_ids=[]),
        _action(id="check", type="review", depends_on_action_ids=["build"]),
    ])
    # the nearest earlier non-review/non-deliver entry is "docs", even though check depends on build
    assert result["stages"][4]["changes_requested_stage_id"] == "docs"


def test_apply_triage_plan_review_explicit_target_slugged():
    result = _apply([
        _action(id="build", type="implement"),
        _action(id="docs", type="document"),
        _action(id="check", type="review", changes_requested_action_id=" Build "),
    ])
    assert result["stages"][3]["changes_requested_stage_id"] == "build"


def test_apply_triage_plan_consecutive_reviews_skip_review_entries():
    result = _apply([
        _action(id="build", type="implement"),
        _action(id="r1", type="review"),
        _action(id="r2", type="review"),
    ])
    assert result["stages"][2]["changes_requested_stage_id"] == "build"
    assert result["stages"][3]["changes_requested_stage_id"] == "build"


def test_apply_triage_plan_valid_isolated_write_fan_in():
    result = _apply([
        _action(id="w1", type="implement", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="w2", type="implement", workspace_mode="isolated-write", depends_on_action_ids=[]),
        _action(id="merge", type="integrate", workspace_mode="integrate",
                depends_on_action_ids=["w1", "w2"]),
        _action(id="verify", type="test"),
    ])
    assert [s["workspace_mode"] for s in result["stages"][1:]] == [
        "isolated-write", "isolated-write", "integrate", "shared"]
    assert result["stages"][4]["depends_on_stage_ids"] == ["merge"]


def test_apply_triage_plan_only_research_actions_is_valid():
    result = _apply([_action(id=f"r{i}", type="research", depends_on_action_ids=[]) for i in range(3)])
    assert result["execution_mode"] == "graph"
    assert all(s["type"] == "research" for s in result["stages"][1:])


@pytest.mark.parametrize("weird", ["constructor", "__proto__", "get", "items"])
def test_apply_triage_plan_special_type_names_are_plain_strings(weird):
    result = _apply([_action(id="x", type=weird)])
    stage = result["stages"][1]
    assert stage["type"] == wf.clean_id(weird, "custom", max_len=64)
    assert stage["instruction"] == wf.default_policy_text("custom")
    assert stage["approach"] == wf.default_brief("custom")["approach"]


def test_apply_triage_plan_uses_snapshot_action_instructions():
    snapshot = _planning()
    snapshot["action_instructions"] = {"research": "Local research policy.", "custom": "Local custom."}
    result = _apply([_action(id="a", type="research"), _action(id="b", type="odd-type")],
                    snapshot=snapshot)
    assert result["stages"][1]["instruction"] == "Local research policy."
    assert result["stages"][2]["instruction"] == "Local custom."


def test_apply_triage_plan_objective_and_name_capped():
    result = _apply([_action(id="a", objective="o" * 3000, name="n" * 200)])
    assert len(result["stages"][1]["objective"]) == 2000
    assert len(result["stages"][1]["name"]) == 120


def test_apply_triage_plan_non_ai_snapshot_unchanged():
    snapshot = wf.default_workflows()[0]
    assert wf.apply_triage_plan(snapshot, None) == snapshot


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


def test_next_stage_id_template_reuse_snapshot():
    result = wf.apply_triage_plan(_planning(), {"work_item_type": "software-change"})
    assert wf.next_stage_id(result, "triage", "triage", None) == "implement"
    assert wf.next_stage_id(result, "review", "review", "changes_requested") == "implement"
