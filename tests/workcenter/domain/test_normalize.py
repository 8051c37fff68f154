"""Pure unit tests for workcenter.domain.normalize (no database)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workcenter.errors import InvalidInput
from workcenter.domain.normalize import (
    COUNTER_FIELDS,
    RESPONSE_CAP,
    cap_response,
    checkpoint_on_read,
    context_on_read,
    evidence_on_read,
    normalize_brief,
    normalize_checkpoint,
    normalize_counters,
    normalize_evidence,
    normalize_session_context,
    normalize_submission,
    storable_text,
)

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

CRITERIA = ["Tests pass", "Docs updated"]


def checks(*statuses, criteria=CRITERIA):
    return [
        {"criterion": c, "status": s, "evidence": f"evidence for {c}"} for c, s in zip(criteria, statuses)
    ]


def submission(**overrides):
    raw = {
        "outcome": "completed",
        "response": "done",
        "summary": "All good",
        "evidence": ["ran the suite"],
        "acceptance_checks": checks("passed", "passed"),
    }
    raw.update(overrides)
    return raw


# ---------------------------------------------------------------------------------------------
# counters
# ---------------------------------------------------------------------------------------------


def test_counter_fields_are_the_eight_snake_case_counters():
    assert COUNTER_FIELDS == (
        "llm_request_count",
        "loop_count",
        "tool_count",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "total_tokens",
    )


def test_normalize_counters_none_gives_all_zero():
    assert normalize_counters(None) == {f: 0 for f in COUNTER_FIELDS}


def test_normalize_counters_keeps_valid_ints():
    raw = {f: i + 1 for i, f in enumerate(COUNTER_FIELDS)}
    assert normalize_counters(raw) == raw


def test_normalize_counters_invalid_values_become_zero():
    raw = {
        "llm_request_count": -3,
        "loop_count": "abc",
        "tool_count": True,
        "input_tokens": float("nan"),
        "output_tokens": None,
        "cache_read_tokens": [1],
        "cache_write_tokens": float("inf"),
        "total_tokens": {"x": 1},
    }
    assert normalize_counters(raw) == {f: 0 for f in COUNTER_FIELDS}


def test_normalize_counters_truncates_floats_and_accepts_numeric_strings():
    out = normalize_counters({"loop_count": 3.9, "tool_count": "12", "total_tokens": "-4"})
    assert out["loop_count"] == 3
    assert out["tool_count"] == 12
    assert out["total_tokens"] == 0
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in out.values())


def test_normalize_counters_ignores_unknown_keys():
    out = normalize_counters({"loop_count": 2, "bogus": 7})
    assert set(out) == set(COUNTER_FIELDS)
    assert out["loop_count"] == 2


# ---------------------------------------------------------------------------------------------
# response cap
# ---------------------------------------------------------------------------------------------


def test_cap_response_none_is_empty_string():
    assert cap_response(None) == ""


def test_cap_response_stringifies_non_strings():
    assert cap_response(42) == "42"


def test_cap_response_truncates_to_cap():
    assert RESPONSE_CAP == 65536
    out = cap_response("a" * (RESPONSE_CAP + 10))
    assert len(out) == RESPONSE_CAP


def test_cap_response_short_text_unchanged():
    assert cap_response("hello") == "hello"


def test_cap_response_counts_non_bmp_characters_as_one():
    emoji = "\U0001F600"  # outside the BMP: 2 UTF-16 units, 1 code point
    out = cap_response(emoji * (RESPONSE_CAP + 5))
    assert len(out) == RESPONSE_CAP
    assert out == emoji * RESPONSE_CAP
    exact = emoji * RESPONSE_CAP
    assert cap_response(exact) == exact


# ---------------------------------------------------------------------------------------------
# evidence
# ---------------------------------------------------------------------------------------------


def test_normalize_evidence_non_list_is_empty():
    assert normalize_evidence("text") == []
    assert normalize_evidence(None) == []
    assert normalize_evidence({"kind": "text", "label": "x"}) == []


def test_normalize_evidence_string_becomes_trimmed_text_item():
    assert normalize_evidence(["  ran tests  "]) == [{"kind": "text", "label": "ran tests"}]


def test_normalize_evidence_blank_string_dropped():
    assert normalize_evidence(["   ", ""]) == []


def test_normalize_evidence_string_label_capped_at_500():
    out = normalize_evidence(["x" * 600])
    assert out == [{"kind": "text", "label": "x" * 500}]


def test_normalize_evidence_tool_item_completed_and_raw_fields_dropped():
    out = normalize_evidence([{"tool": " bash ", "stdout": "secret output", "input": {"cmd": "ls"}}])
    assert out == [{"kind": "tool", "label": "bash", "status": "completed"}]


def test_normalize_evidence_tool_item_is_error_gives_error_status():
    out = normalize_evidence([{"tool": "bash", "is_error": True}, {"tool": "grep", "is_error": False}])
    assert out == [
        {"kind": "tool", "label": "bash", "status": "error"},
        {"kind": "tool", "label": "grep", "status": "completed"},
    ]


def test_normalize_evidence_tool_item_truthy_non_bool_is_not_error():
    out = normalize_evidence([{"tool": "bash", "is_error": "yes"}])
    assert out[0]["status"] == "completed"


def test_normalize_evidence_tool_item_blank_label_dropped():
    assert normalize_evidence([{"tool": "   "}]) == []


def test_normalize_evidence_tool_label_capped_at_500():
    out = normalize_evidence([{"tool": "t" * 700}])
    assert out[0]["label"] == "t" * 500


def test_normalize_evidence_object_kept_with_ref_and_status():
    out = normalize_evidence(
        [{"kind": "pr", "label": " PR #4 ", "ref": " https://x/pr/4 ", "status": "passed", "stdout": "raw"}]
    )
    assert out == [{"kind": "pr", "label": "PR #4", "ref": "https://x/pr/4", "status": "passed"}]


def test_normalize_evidence_object_all_allowed_kinds_kept():
    kinds = ["text", "tool", "test", "file", "link", "pr", "commit"]
    out = normalize_evidence([{"kind": k, "label": k} for k in kinds])
    assert [i["kind"] for i in out] == kinds


def test_normalize_evidence_object_unknown_kind_dropped():
    assert normalize_evidence([{"kind": "screenshot", "label": "x"}, {"label": "no kind"}]) == []


def test_normalize_evidence_object_blank_or_missing_label_dropped():
    assert normalize_evidence([{"kind": "file", "label": "  "}, {"kind": "file"}, {"kind": "file", "label": 3}]) == []


def test_normalize_evidence_object_empty_ref_omitted():
    out = normalize_evidence([{"kind": "file", "label": "a.py", "ref": "   "}])
    assert out == [{"kind": "file", "label": "a.py"}]
    assert "ref" not in out[0]


def test_normalize_evidence_object_invalid_status_omitted():
    out = normalize_evidence([{"kind": "test", "label": "unit", "status": "weird"}])
    assert out == [{"kind": "test", "label": "unit"}]


def test_normalize_evidence_object_allowed_statuses_kept():
    statuses = ["completed", "passed", "failed", "error", "pending"]
    out = normalize_evidence([{"kind": "test", "label": s, "status": s} for s in statuses])
    assert [i["status"] for i in out] == statuses


def test_normalize_evidence_object_label_and_ref_capped():
    out = normalize_evidence([{"kind": "link", "label": "l" * 600, "ref": "r" * 1200}])
    assert len(out[0]["label"]) == 500
    assert len(out[0]["ref"]) == 1000


def test_normalize_evidence_other_values_dropped():
    assert normalize_evidence([1, None, True, ["x"], 2.5]) == []


def test_normalize_evidence_keeps_at_most_50_valid_items():
    items = ["", None] + [f"item {i}" for i in range(60)]
    out = normalize_evidence(items)
    assert len(out) == 50
    assert out[0]["label"] == "item 0"
    assert out[-1]["label"] == "item 49"


def test_normalize_evidence_is_idempotent():
    once = normalize_evidence([{"tool": "bash", "is_error": True}, {"kind": "pr", "label": "x", "ref": "y"}, "z"])
    assert normalize_evidence(once) == once


# ---------------------------------------------------------------------------------------------
# checkpoint
# ---------------------------------------------------------------------------------------------


def test_normalize_checkpoint_non_object_is_none():
    assert normalize_checkpoint(None) is None
    assert normalize_checkpoint([{"name": "x"}]) is None
    assert normalize_checkpoint("x") is None


def test_normalize_checkpoint_empty_object_gives_version_and_no_events():
    assert normalize_checkpoint({}) == {"version": 1, "tool_events": []}


def test_normalize_checkpoint_event_status_error_else_completed():
    out = normalize_checkpoint(
        {"tool_events": [{"name": "a", "status": "error"}, {"name": "b", "status": "failed"}, {"name": "c"}]}
    )
    assert out["tool_events"] == [
        {"name": "a", "status": "error"},
        {"name": "b", "status": "completed"},
        {"name": "c", "status": "completed"},
    ]


def test_normalize_checkpoint_invalid_events_dropped():
    out = normalize_checkpoint(
        {"tool_events": [{"name": "  "}, {"status": "error"}, "bash", 3, {"name": 5}, {"name": " ok "}]}
    )
    assert out["tool_events"] == [{"name": "ok", "status": "completed"}]


def test_normalize_checkpoint_keeps_last_16_valid_events():
    events = []
    for i in range(20):
        events.append({"name": f"e{i}"})
        events.append({"name": ""})  # invalid, must not count
    out = normalize_checkpoint({"tool_events": events})
    assert [e["name"] for e in out["tool_events"]] == [f"e{i}" for i in range(4, 20)]


def test_normalize_checkpoint_name_capped_at_80():
    out = normalize_checkpoint({"tool_events": [{"name": "n" * 100}]})
    assert out["tool_events"][0]["name"] == "n" * 80


def test_normalize_checkpoint_url_credentials_query_fragment_removed():
    out = normalize_checkpoint(
        {"tool_events": [{"name": "fetch", "resource": "https://user:pw@example.com/a/b?token=x#frag"}]}
    )
    assert out["tool_events"][0]["resource"] == "https://example.com/a/b"


def test_normalize_checkpoint_url_port_kept():
    out = normalize_checkpoint({"tool_events": [{"name": "f", "resource": "http://u@host:8080/p?q=1"}]})
    assert out["tool_events"][0]["resource"] == "http://host:8080/p"


def test_normalize_checkpoint_non_url_resource_kept_and_capped():
    out = normalize_checkpoint(
        {"tool_events": [{"name": "read", "resource": "/tmp/file.txt"}, {"name": "r2", "resource": "x" * 300}]}
    )
    assert out["tool_events"][0]["resource"] == "/tmp/file.txt"
    assert out["tool_events"][1]["resource"] == "x" * 240


def test_normalize_checkpoint_blank_resource_omitted_and_extra_fields_dropped():
    out = normalize_checkpoint({"tool_events": [{"name": "x", "resource": "  ", "output": "raw"}], "other": 1})
    assert out == {"version": 1, "tool_events": [{"name": "x", "status": "completed"}]}


# ---------------------------------------------------------------------------------------------
# on read (§12.4 "normalisation applies on write and on read"; §12.5 likewise)
# ---------------------------------------------------------------------------------------------

# raw forms an older version could have stored, with what every read must show
RAW_EVIDENCE_ON_READ = [
    (["ran it"], [{"kind": "text", "label": "ran it"}]),
    ([{"tool": "Bash", "is_error": True, "stdout": "Traceback"}],
     [{"kind": "tool", "label": "Bash", "status": "error"}]),
    ([{"tool": "Bash", "isError": True}], [{"kind": "tool", "label": "Bash", "status": "error"}]),
    ([{"tool": "Read", "stdout": "x"}], [{"kind": "tool", "label": "Read", "status": "completed"}]),
    ([{"kind": "test", "label": "t", "status": "passed", "stdout": "ok", "duration_ms": 3}],
     [{"kind": "test", "label": "t", "status": "passed"}]),
    ([{"kind": "file", "label": " a ", "ref": " b ", "status": "odd"}], [{"kind": "file", "label": "a", "ref": "b"}]),
    ([{"label": "x", "kind": "text", "extra": None}], [{"kind": "text", "label": "x"}]),
    ([{"kind": "text", "label": "x" * 501}], [{"kind": "text", "label": "x" * 500}]),
    ([{"kind": "text", "label": "x "}], [{"kind": "text", "label": "x"}]),
    ([{"kind": "file", "label": "\u3000y"}], [{"kind": "file", "label": "y"}]),
    ([{"kind": "file", "label": "y", "ref": "r\n"}], [{"kind": "file", "label": "y", "ref": "r"}]),
    ([{"kind": "text", "label": "x", "ref": ""}], [{"kind": "text", "label": "x"}]),
    ([{"kind": "text", "label": "x", "status": None}], [{"kind": "text", "label": "x"}]),
    ([{"kind": ["text"], "label": "x"}], []),
    ([{"kind": "text", "label": "x", "status": ["passed"]}], [{"kind": "text", "label": "x"}]),
    ([None, 3, [], {}], []),
    ([f"e{i}" for i in range(51)], [{"kind": "text", "label": f"e{i}"} for i in range(50)]),
    ({"kind": "text", "label": "not a list"}, []),
    ("a string", []),
    (None, []),
]

RAW_CHECKPOINTS_ON_READ = [
    ({"version": 1, "toolEvents": [{"name": "Grep", "status": "completed"}]},
     {"version": 1, "tool_events": [{"name": "Grep", "status": "completed"}]}),
    ({"tool_events": [{"name": "a"}]}, {"version": 1, "tool_events": [{"name": "a", "status": "completed"}]}),
    ({"version": 1, "tool_events": [{"name": "a ", "status": "completed", "resource": " /x"}]},
     {"version": 1, "tool_events": [{"name": "a", "status": "completed", "resource": "/x"}]}),
    ({"version": True, "tool_events": []}, {"version": 1, "tool_events": []}),
    ({"version": 1.0, "tool_events": []}, {"version": 1, "tool_events": []}),
    ({"version": 1, "tool_events": [], "cursor": 2}, {"version": 1, "tool_events": []}),
    ({"version": 1, "tool_events": [{"name": "a", "status": "completed", "input": "x"}]},
     {"version": 1, "tool_events": [{"name": "a", "status": "completed"}]}),
    ({"version": 1, "tool_events": [{"name": "a", "status": "failed"}]},
     {"version": 1, "tool_events": [{"name": "a", "status": "completed"}]}),
    ({"version": 1, "tool_events": [{"name": "a", "status": "completed", "resource": "https://u:p@h/x?q#f"}]},
     {"version": 1, "tool_events": [{"name": "a", "status": "completed", "resource": "https://h/x"}]}),
    ({"version": 1, "tool_events": [{"name": "a", "status": "completed", "resource": "HTTPS://h/x"}]},
     {"version": 1, "tool_events": [{"name": "a", "status": "completed", "resource": "https://h/x"}]}),
    ({"version": 1, "tool_events": [{"name": "a", "status": "completed", "resource": "https://h:99999/x"}]},
     {"version": 1, "tool_events": [{"name": "a", "status": "completed"}]}),
    ({"version": 1, "tool_events": [{"name": f"e{i}", "status": "completed"} for i in range(17)]},
     {"version": 1, "tool_events": [{"name": f"e{i}", "status": "completed"} for i in range(1, 17)]}),
    ({"version": 1, "tool_events": "Bash"}, {"version": 1, "tool_events": []}),
    ([{"name": "a"}], None),
    ("Bash", None),
    (3, None),
]


@pytest.mark.parametrize("raw,shown", RAW_EVIDENCE_ON_READ)
def test_evidence_on_read_normalises_every_raw_form(raw, shown):
    assert evidence_on_read(raw) == shown == normalize_evidence(raw)


@pytest.mark.parametrize("raw,shown", RAW_CHECKPOINTS_ON_READ)
def test_checkpoint_on_read_normalises_every_raw_form(raw, shown):
    assert checkpoint_on_read(raw) == shown == normalize_checkpoint(raw)
    if shown is not None:
        assert type(checkpoint_on_read(raw)["version"]) is int


def test_values_already_normal_are_returned_as_they_are():
    evidence = normalize_evidence(["a", {"tool": "b", "is_error": True}, {"kind": "pr", "label": "c", "ref": "d",
                                                                         "status": "passed"}])
    checkpoint = normalize_checkpoint({"tool_events": [
        {"name": "a", "resource": "https://h.example/x/y"}, {"name": "b", "status": "error", "resource": "/etc/x"},
        {"name": "c", "resource": "http://h:8080/p"}]})
    context = [{"type": "triage", "summary": "s", "evidence": evidence}, {"type": "guidance", "evidence": []}, "odd"]
    assert evidence_on_read(evidence) is evidence
    assert checkpoint_on_read(checkpoint) is checkpoint
    assert context_on_read(context) is context
    assert checkpoint_on_read(None) is None


def test_context_on_read_normalises_only_the_evidence_of_entries():
    raw = [{"type": "triage", "summary": "s", "evidence": ["a", {"tool": "b", "stdout": "x"}], "reviewDecision": None},
           {"type": "guidance", "role": "user", "summary": "g"}, "not an entry",
           {"type": "retry", "evidence": "not a list"}]
    shown = context_on_read(raw)
    assert shown == [
        {"type": "triage", "summary": "s", "evidence": [{"kind": "text", "label": "a"},
                                                        {"kind": "tool", "label": "b", "status": "completed"}],
         "reviewDecision": None},
        {"type": "guidance", "role": "user", "summary": "g"}, "not an entry",
        {"type": "retry", "evidence": []},
    ]
    assert raw[0]["evidence"] == ["a", {"tool": "b", "stdout": "x"}]  # the stored value is not changed in place
    assert context_on_read({"type": "triage"}) == [] and context_on_read(None) == []


def test_a_cut_at_whitespace_is_trimmed_so_normalising_twice_changes_nothing():
    # the 500th character is a space: the cut label is trimmed again (a "trimmed string ≤ 500")
    label = "a" * 499 + " tail"
    once = normalize_evidence([label, {"kind": "file", "label": "f", "ref": "r" * 999 + " x"}])
    assert once == [{"kind": "text", "label": "a" * 499}, {"kind": "file", "label": "f", "ref": "r" * 999}]
    assert normalize_evidence(once) == once and evidence_on_read(once) is once
    cp = normalize_checkpoint({"tool_events": [{"name": "n" * 79 + " x", "resource": "p" * 239 + " q"},
                                               {"name": "u", "resource": "https://h/" + "p" * 229 + " q"}]})
    assert cp["tool_events"][0] == {"name": "n" * 79, "status": "completed", "resource": "p" * 239}
    assert normalize_checkpoint(cp) == cp and checkpoint_on_read(cp) is cp


# Property: for any JSON value, reading shows exactly the normal form, normalising is idempotent,
# and the fast check accepts every normal form (so what this store writes is returned as it is).

_TEXT = st.one_of(
    st.sampled_from(["", " ", "a", " a", "a ", "a\u3000", "Bash", "x" * 499 + " y", "x" * 501, "\t\n", "\u3000z",
                     "e\u0301"]),
    st.sampled_from(["https://u:p@h.example:8080/a?b#c", "http://h/x", "HTTPS://H/x", "https://[::1]/x",
                     "https://[::1/x", "https:///x", "http://h:99999/", "https://h/a b", "https://h/\tx",
                     "ftp://h/x", "https://h/" + "p" * 240, "/etc/hosts"]),
    st.text(max_size=12),
)
_KEYS = st.sampled_from(["kind", "label", "ref", "status", "tool", "is_error", "isError", "stdout", "name",
                         "resource", "tool_events", "toolEvents", "version", "evidence", "type"])
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.floats(allow_nan=False), _TEXT,
                    st.sampled_from(["text", "tool", "test", "file", "link", "pr", "commit", "completed",
                                     "passed", "failed", "error", "pending"]))
_JSON = st.recursive(_VALUES, lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                       st.dictionaries(_KEYS, inner, max_size=5)), max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_reads_show_the_normal_form_of_any_stored_value(value):
    evidence = normalize_evidence(value)
    assert evidence_on_read(value) == evidence
    assert normalize_evidence(evidence) == evidence and evidence_on_read(evidence) is evidence
    checkpoint = normalize_checkpoint(value)
    assert checkpoint_on_read(value) == checkpoint
    if checkpoint is not None:
        assert normalize_checkpoint(checkpoint) == checkpoint and checkpoint_on_read(checkpoint) is checkpoint
    context = context_on_read(value)
    assert context_on_read(context) is context
    if isinstance(value, list):
        assert context == [{**e, "evidence": normalize_evidence(e["evidence"])}
                           if isinstance(e, dict) and "evidence" in e else e for e in value]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries(
    {"kind": st.sampled_from(["text", "tool", "test", "file", "link", "pr", "commit", "nope"]), "label": _TEXT},
    optional={"ref": _TEXT, "status": st.sampled_from(["completed", "passed", "failed", "error", "pending", "odd"])}),
    max_size=55))
def test_evidence_reads_of_any_near_normal_items(items):
    evidence = normalize_evidence(items)
    assert evidence_on_read(items) == evidence
    assert normalize_evidence(evidence) == evidence and evidence_on_read(evidence) is evidence


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({"name": _TEXT}, optional={"status": _VALUES, "resource": _TEXT}), max_size=20))
def test_checkpoint_reads_of_any_events(events):
    raw = {"tool_events": events}
    checkpoint = normalize_checkpoint(raw)
    assert checkpoint_on_read(raw) == checkpoint
    assert normalize_checkpoint(checkpoint) == checkpoint and checkpoint_on_read(checkpoint) is checkpoint


# ---------------------------------------------------------------------------------------------
# brief
# ---------------------------------------------------------------------------------------------


def test_normalize_brief_trims_and_caps():
    out = normalize_brief({"objective": "  do it ", "approach": "a" * 2500, "expected_outcome": " ok "})
    assert out == {"objective": "do it", "approach": "a" * 2000, "expected_outcome": "ok"}


def test_normalize_brief_missing_fields_from_default():
    out = normalize_brief({"objective": "mine"}, default={"objective": "d-o", "approach": "d-a", "expected_outcome": "d-e"})
    assert out == {"objective": "mine", "approach": "d-a", "expected_outcome": "d-e"}


def test_normalize_brief_non_object_without_default_is_none():
    assert normalize_brief(None) is None
    assert normalize_brief("text") is None


def test_normalize_brief_non_object_with_default_uses_default():
    default = {"objective": "o", "approach": "a", "expected_outcome": "e"}
    assert normalize_brief(None, default=default) == default


def test_normalize_brief_missing_fields_without_default_are_empty():
    assert normalize_brief({}) == {"objective": "", "approach": "", "expected_outcome": ""}


# ---------------------------------------------------------------------------------------------
# submission: normalisation (§7.2)
# ---------------------------------------------------------------------------------------------


def test_normalize_submission_returns_all_keys():
    out = normalize_submission(submission(), action_type="implement", criteria=CRITERIA)
    expected = {
        "outcome",
        "response",
        "summary",
        "evidence",
        "waiting_reason",
        "error",
        "review_decision",
        "contract_patch",
        "plan",
        "acceptance_checks",
        "checkpoint",
        *COUNTER_FIELDS,
    }
    assert set(out) == expected
    assert out["outcome"] == "completed"
    assert out["error"] is None


def test_normalize_submission_invalid_outcome_raises():
    with pytest.raises(InvalidInput) as exc:
        normalize_submission(submission(outcome="done"), action_type="implement", criteria=CRITERIA)
    assert "Invalid" in exc.value.message and "outcome" in exc.value.message
    assert exc.value.extra["errors"][0]["field"] == "outcome"


def test_normalize_submission_missing_outcome_raises():
    raw = submission()
    del raw["outcome"]
    with pytest.raises(InvalidInput, match="Invalid.*outcome"):
        normalize_submission(raw, action_type="implement", criteria=CRITERIA)


def test_normalize_submission_waiting_without_reason_raises():
    with pytest.raises(InvalidInput) as exc:
        normalize_submission({"outcome": "waiting", "waiting_reason": "   "}, action_type="implement", criteria=[])
    assert "waiting outcome requires waitingReason" in exc.value.message
    assert exc.value.extra["errors"][0]["field"] == "waiting_reason"


def test_normalize_submission_waiting_with_reason_kept():
    out = normalize_submission({"outcome": "waiting", "waiting_reason": "Need the API key"}, action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "waiting"
    assert out["waiting_reason"] == "Need the API key"
    assert out["error"] is None


def test_normalize_submission_patch_criteria_not_list_raises():
    raw = submission(contract_patch={"acceptance_criteria": "one"})
    with pytest.raises(InvalidInput) as exc:
        normalize_submission(raw, action_type="triage", criteria=CRITERIA)
    assert exc.value.extra["errors"][0]["field"] == "contract_patch"


def test_normalize_submission_patch_normalised():
    raw = submission(
        contract_patch={"goal": "  New goal ", "acceptance_criteria": [" A ", "", "  ", 7], "extra": 1},
        acceptance_checks=checks("passed", "passed", criteria=["A", "7"]),
    )
    out = normalize_submission(raw, action_type="triage", criteria=CRITERIA)
    assert out["contract_patch"] == {"goal": "New goal", "acceptance_criteria": ["A", "7"]}
    assert out["outcome"] == "completed"


def test_normalize_submission_empty_patch_is_none():
    out = normalize_submission(submission(contract_patch={"goal": "   "}), action_type="implement", criteria=CRITERIA)
    assert out["contract_patch"] is None
    assert out["outcome"] == "completed"


def test_normalize_submission_non_object_patch_ignored():
    out = normalize_submission(submission(contract_patch="patch"), action_type="implement", criteria=CRITERIA)
    assert out["contract_patch"] is None
    assert out["outcome"] == "completed"


def test_normalize_submission_non_triage_patch_downgrades():
    raw = submission(contract_patch={"goal": "change"})
    out = normalize_submission(raw, action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert out["error"] == "Only triage may submit a WorkItem contractPatch"
    assert out["contract_patch"] is None


def test_normalize_submission_review_without_decision_downgrades():
    raw = submission(review_decision="maybe")
    out = normalize_submission(raw, action_type="review", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert out["error"] == "Completed review requires approved or changes_requested"
    assert out["review_decision"] is None


def test_normalize_submission_review_missing_decision_never_approval():
    out = normalize_submission(submission(), action_type="review", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert "requires approved" in out["error"]


def test_normalize_submission_review_failed_outcome_without_decision_kept_failed_with_own_error():
    out = normalize_submission({"outcome": "failed", "error": "boom"}, action_type="review", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert out["error"] == "boom"


def test_normalize_submission_stringifies_and_caps_fields():
    raw = submission(response="r" * (RESPONSE_CAP + 1), summary=None, error=12, waiting_reason=None)
    out = normalize_submission(raw, action_type="implement", criteria=CRITERIA)
    assert len(out["response"]) == RESPONSE_CAP
    assert out["summary"] == ""
    assert out["waiting_reason"] is None
    assert out["error"] == "12"


def test_normalize_submission_plan_checkpoint_counters_and_evidence():
    raw = submission(
        plan=["not", "object"],
        checkpoint={"tool_events": [{"name": "x", "resource": "https://a:b@h/p?q"}]},
        loop_count=3,
        total_tokens=-1,
        evidence=[{"tool": "bash", "stdout": "raw"}],
    )
    out = normalize_submission(raw, action_type="implement", criteria=CRITERIA)
    assert out["plan"] is None
    assert out["checkpoint"] == {"version": 1, "tool_events": [{"name": "x", "status": "completed", "resource": "https://h/p"}]}
    assert out["loop_count"] == 3
    assert out["total_tokens"] == 0
    assert out["evidence"] == [{"kind": "tool", "label": "bash", "status": "completed"}]
    out2 = normalize_submission(submission(plan={"actions": []}), action_type="triage", criteria=CRITERIA)
    assert out2["plan"] == {"actions": []}
    assert out2["checkpoint"] is None


def test_normalize_submission_acceptance_checks_non_list_treated_as_empty():
    out = normalize_submission(submission(acceptance_checks="all good"), action_type="implement", criteria=[])
    assert out["acceptance_checks"] == []
    assert out["outcome"] == "completed"


def test_normalize_submission_stores_normalised_checks():
    raw = submission(
        acceptance_checks=[
            {"criterion": " Tests pass ", "status": "passed", "evidence": "  ran  ", "junk": 1},
            {"criterion": "Docs updated", "status": "deferred", "evidence": "e" * 1500},
        ]
    )
    out = normalize_submission(raw, action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "completed"
    assert out["acceptance_checks"][0] == {"criterion": "Tests pass", "status": "passed", "evidence": "ran"}
    assert out["acceptance_checks"][1]["evidence"] == "e" * 1000


# ---------------------------------------------------------------------------------------------
# submission: completion validation (§7.3)
# ---------------------------------------------------------------------------------------------


def test_normalize_submission_completed_without_evidence_downgrades():
    raw = submission(evidence=["   ", {"stdout": "x"}])
    out = normalize_submission(raw, action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert out["error"] == "Completed Action requires at least one concrete evidence item"


def test_normalize_submission_non_completed_skips_completion_validation():
    out = normalize_submission({"outcome": "retryable", "error": "flaky"}, action_type="test", criteria=CRITERIA)
    assert out["outcome"] == "retryable"
    assert out["error"] == "flaky"


def test_normalize_submission_missing_checks_downgrades():
    out = normalize_submission(submission(acceptance_checks=[]), action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert out["error"] == (
        "Completed Action requires one ordered acceptance check with evidence for every acceptance criterion"
    )


def test_normalize_submission_checks_wrong_order_downgrades():
    raw = submission(acceptance_checks=list(reversed(checks("passed", "passed"))))
    out = normalize_submission(raw, action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert "every acceptance criterion" in out["error"]


def test_normalize_submission_checks_criterion_mismatch_downgrades():
    bad = checks("passed", "passed")
    bad[1]["criterion"] = "Docs rewritten"
    out = normalize_submission(submission(acceptance_checks=bad), action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert "every acceptance criterion" in out["error"]


def test_normalize_submission_checks_extra_entry_downgrades():
    extra = checks("passed", "passed") + [{"criterion": "More", "status": "passed", "evidence": "x"}]
    out = normalize_submission(submission(acceptance_checks=extra), action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert "every acceptance criterion" in out["error"]


def test_normalize_submission_checks_blank_evidence_downgrades():
    bad = checks("passed", "passed")
    bad[0]["evidence"] = "   "
    out = normalize_submission(submission(acceptance_checks=bad), action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert "every acceptance criterion" in out["error"]


def test_normalize_submission_checks_invalid_status_downgrades():
    out = normalize_submission(
        submission(acceptance_checks=checks("passed", "failed")), action_type="implement", criteria=CRITERIA
    )
    assert out["outcome"] == "failed"
    assert "every acceptance criterion" in out["error"]


def test_normalize_submission_checks_non_object_entry_downgrades():
    bad = [checks("passed", "passed")[0], "Docs updated: passed"]
    out = normalize_submission(submission(acceptance_checks=bad), action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "failed"
    assert "every acceptance criterion" in out["error"]


def test_normalize_submission_checks_trimmed_criterion_matches():
    ok = checks("passed", "not_applicable")
    ok[0]["criterion"] = "  Tests pass  "
    out = normalize_submission(submission(acceptance_checks=ok), action_type="implement", criteria=CRITERIA)
    assert out["outcome"] == "completed"


def test_normalize_submission_zero_criteria_requires_empty_checks():
    ok = normalize_submission(submission(acceptance_checks=[]), action_type="implement", criteria=[])
    assert ok["outcome"] == "completed"
    bad = normalize_submission(
        submission(acceptance_checks=[{"criterion": "x", "status": "passed", "evidence": "y"}]),
        action_type="implement",
        criteria=[],
    )
    assert bad["outcome"] == "failed"
    assert "every acceptance criterion" in bad["error"]


def test_normalize_submission_triage_patch_criteria_are_effective():
    raw = submission(
        contract_patch={"acceptance_criteria": ["New one"]},
        acceptance_checks=checks("passed", criteria=["New one"]),
    )
    out = normalize_submission(raw, action_type="triage", criteria=CRITERIA)
    assert out["outcome"] == "completed"
    # checks against the old criteria no longer match
    raw_old = submission(contract_patch={"acceptance_criteria": ["New one"]})
    out_old = normalize_submission(raw_old, action_type="triage", criteria=CRITERIA)
    assert out_old["outcome"] == "failed"
    assert "every acceptance criterion" in out_old["error"]


def test_normalize_submission_triage_patch_without_criteria_uses_item_criteria():
    out = normalize_submission(submission(contract_patch={"goal": "New"}), action_type="triage", criteria=CRITERIA)
    assert out["outcome"] == "completed"
    assert out["contract_patch"] == {"goal": "New"}


def test_normalize_submission_deferred_allowed_for_implement():
    out = normalize_submission(
        submission(acceptance_checks=checks("deferred", "not_applicable")), action_type="implement", criteria=CRITERIA
    )
    assert out["outcome"] == "completed"
    assert out["error"] is None


@pytest.mark.parametrize("action_type", ["test", "deliver"])
def test_normalize_submission_deferred_rejected_for_verification_types(action_type):
    out = normalize_submission(
        submission(acceptance_checks=checks("passed", "deferred")), action_type=action_type, criteria=CRITERIA
    )
    assert out["outcome"] == "failed"
    assert out["error"] == f"{action_type} Action requires every acceptance check to pass"


@pytest.mark.parametrize("action_type", ["test", "deliver"])
def test_normalize_submission_all_passed_completes_verification_types(action_type):
    out = normalize_submission(submission(), action_type=action_type, criteria=CRITERIA)
    assert out["outcome"] == "completed"


def test_normalize_submission_not_applicable_rejected_for_approved_review():
    out = normalize_submission(
        submission(review_decision="approved", acceptance_checks=checks("passed", "not_applicable")),
        action_type="review",
        criteria=CRITERIA,
    )
    assert out["outcome"] == "failed"
    assert out["error"] == "review Action requires every acceptance check to pass"


def test_normalize_submission_deferred_allowed_for_changes_requested_review():
    out = normalize_submission(
        submission(review_decision="changes_requested", acceptance_checks=checks("deferred", "passed")),
        action_type="review",
        criteria=CRITERIA,
    )
    assert out["outcome"] == "completed"
    assert out["review_decision"] == "changes_requested"


def test_normalize_submission_approved_review_all_passed_completes():
    out = normalize_submission(submission(review_decision="approved"), action_type="review", criteria=CRITERIA)
    assert out["outcome"] == "completed"
    assert out["review_decision"] == "approved"


# ---------------------------------------------------------------------------------------------
# session context
# ---------------------------------------------------------------------------------------------


def test_normalize_session_context_non_list_is_empty():
    assert normalize_session_context(None) == []
    assert normalize_session_context("hi") == []


def test_normalize_session_context_keeps_user_and_assistant_only():
    out = normalize_session_context(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": " hello "},
            {"role": "tool", "content": "t"},
            {"role": "assistant", "content": "hi", "vp_id": "vp-1"},
        ]
    )
    assert out == [
        {"role": "user", "vp_id": None, "text": "hello"},
        {"role": "assistant", "vp_id": "vp-1", "text": "hi"},
    ]


def test_normalize_session_context_skips_flagged_messages():
    out = normalize_session_context(
        [
            {"role": "user", "content": "a", "internal": True},
            {"role": "assistant", "content": "b", "system_only": True},
            {"role": "assistant", "content": "c", "reflection": True},
            {"role": "user", "content": "d"},
        ]
    )
    assert [m["text"] for m in out] == ["d"]


def test_normalize_session_context_text_blocks_joined_and_blank_dropped():
    out = normalize_session_context(
        [
            {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "image", "url": "x"}, {"type": "text", "text": "two"}]},
            {"role": "user", "content": "   "},
            {"role": "user", "content": [{"type": "image"}]},
        ]
    )
    assert len(out) == 1
    assert "one" in out[0]["text"] and "two" in out[0]["text"]


def test_normalize_session_context_message_capped_at_4000():
    out = normalize_session_context([{"role": "user", "content": "x" * 5000}])
    assert len(out[0]["text"]) == 4000


def test_normalize_session_context_vp_id_rules():
    out = normalize_session_context(
        [
            {"role": "user", "content": "u", "vp_id": "vp-1"},
            {"role": "assistant", "content": "a", "vp_id": "bad id!"},
            {"role": "assistant", "content": "b", "vp_id": "x" * 129},
            {"role": "assistant", "content": "c", "vp_id": "Good_ID-9"},
        ]
    )
    assert [m["vp_id"] for m in out] == [None, None, None, "Good_ID-9"]


def test_normalize_session_context_keeps_newest_48_messages():
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(60)]
    out = normalize_session_context(msgs)
    assert len(out) == 48
    assert out[0]["text"] == "m12"
    assert out[-1]["text"] == "m59"


def test_normalize_session_context_total_chars_limit_cuts_oldest_to_tail():
    msgs = [
        {"role": "user", "content": "A" * 3000 + "TAIL"},  # oldest; should be cut
        *[{"role": "assistant", "content": "b" * 4000} for _ in range(5)],
        {"role": "user", "content": "c" * 3000},
    ]
    out = normalize_session_context(msgs)
    total = sum(len(m["text"]) for m in out)
    assert total == 24000
    assert out[-1]["text"] == "c" * 3000
    assert out[0]["text"].endswith("TAIL")
    assert len(out[0]["text"]) == 24000 - 5 * 4000 - 3000


def test_normalize_session_context_drops_messages_beyond_char_budget():
    msgs = [{"role": "user", "content": "old"}] + [{"role": "user", "content": "x" * 4000} for _ in range(6)]
    out = normalize_session_context(msgs)
    assert len(out) == 6
    assert all(m["text"] != "old" for m in out)


# ---------------------------------------------------------------------------------------------
# storable text
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, storable", [
    ("", True), ("plain", True), ("é ü 😀", True), ("a\x00b", False), ("\x00", False),
    ("lone \ud800", False), ("\udfff", False), ("pair \ud83d\ude00", False),
])
def test_storable_text_refuses_nul_and_surrogates(text, storable):
    assert storable_text(text) is storable
