"""Pure tests of planning snapshots and triage plans (DOMAIN §4.3-§4.4)."""
from __future__ import annotations

import copy

import pytest

from workcenter.errors import PlanError
from workcenter.domain import planning
from workcenter.domain import workflows as wf


def _stage_ids(snapshot):
    return [stage["id"] for stage in snapshot["stages"]]


def _planning(requested_type=None):
    return planning.planning_snapshot(None, requested_type)


def _action(**fields):
    entry = {"objective": f"Do {fields.get('id') or fields.get('type') or 'it'}."}
    entry.update(fields)
    return entry


def _apply(actions, work_item_type="inventory-bug", snapshot=None):
    return planning.apply_triage_plan(
        snapshot or _planning(), {"work_item_type": work_item_type, "actions": actions}
    )


def _plan_error(actions, **kw) -> str:
    with pytest.raises(PlanError) as info:
        _apply(actions, **kw)
    return str(info.value)


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
    snapshot = planning.planning_snapshot(workflows)
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
    assert planning.planning_snapshot(workflows, "hotfix")["id"] == "hotfix"
    assert planning.planning_snapshot(workflows, "urgent-fix")["id"] == "hotfix"


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
    snapshot = planning.planning_snapshot(workflows)
    assert [t["work_item_type"] for t in snapshot["action_templates"]] == ["a", "bee"]


# --------------------------------------------------------------------------- triage plan: errors


def test_apply_triage_plan_requires_structured_plan():
    for plan in (None, "do it", ["a"], 3):
        with pytest.raises(PlanError, match="requires a structured plan"):
            planning.apply_triage_plan(_planning(), plan)


def test_apply_triage_plan_requires_specific_work_item_type():
    for plan in ({}, {"work_item_type": "  "}, {"work_item_type": 5}):
        with pytest.raises(PlanError, match="requires a specific workItemType"):
            planning.apply_triage_plan(_planning(), plan)


def test_apply_triage_plan_requires_valid_work_item_type():
    with pytest.raises(PlanError, match="requires a valid workItemType"):
        planning.apply_triage_plan(_planning(), {"work_item_type": "!!!", "actions": [_action()]})


def test_apply_triage_plan_must_keep_selected_work_item_type():
    snapshot = _planning("data-migration")
    with pytest.raises(PlanError, match="must keep the selected workItemType"):
        _apply([_action(type="migrate")], work_item_type="bug-fix", snapshot=snapshot)
    # the same type (after slugging) is accepted
    result = _apply([_action(type="migrate")], work_item_type="Data Migration", snapshot=snapshot)
    assert result["work_item_type"] == "data-migration"


def test_apply_triage_plan_template_without_non_triage_stage():
    workflows = [{"id": "solo", "stages": [{"type": "triage"}]}]
    snapshot = planning.planning_snapshot(workflows)
    with pytest.raises(PlanError, match=r'template "solo" has no non-triage stage'):
        planning.apply_triage_plan(snapshot, {"work_item_type": "solo"})


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
        planning.apply_triage_plan(snapshot, {"work_item_type": "x", "actions": []})
    assert snapshot == before


# --------------------------------------------------------------------------- triage plan: results


def test_apply_triage_plan_template_reuse_is_linear_with_planning_triage():
    snapshot = _planning()
    plan = {"work_item_type": "Software Change", "actions": [_action(id="ignored")]}
    result = planning.apply_triage_plan(snapshot, plan)
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
    result = planning.apply_triage_plan(snapshot, plan)
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
    assert planning.apply_triage_plan(snapshot, None) == snapshot


def test_next_stage_id_template_reuse_snapshot():
    result = planning.apply_triage_plan(_planning(), {"work_item_type": "software-change"})
    assert wf.next_stage_id(result, "triage", "triage", None) == "implement"
    assert wf.next_stage_id(result, "review", "review", "changes_requested") == "implement"
