"""A simulated executor for demos and end-to-end tests.

Deterministic per work item (the random stream is seeded by item id, stage and attempt), with
configurable durations (`WORKCENTER_SIM_SCALE`, a multiplier of the base 0.6–2.4 s) and outcome
mix: planning triage picks one of four plans (parallel research branches, isolated writes with an
integration, an implement → review loop whose review requests changes once, or the
software-change template); reviews request changes once, then approve; now and then an action
asks the user a question (waiting), fails, or asks for a retry (`WORKCENTER_SIM_RATES` =
"failure,waiting,retry" probabilities). A title or goal containing `[sim:waiting]` or `[sim:fail]`
scripts that outcome for the item's first non-triage action.
"""
from __future__ import annotations

import hashlib
import os
import random
import threading
from typing import Callable

from . import acceptance_checks
from ..worker import RunAborted
from ..worker_log import log_to

FEEDBACK_MARK = "Addressed review feedback"

PLANS = {
    "research": [
        {"id": "survey", "type": "research", "objective": "Survey the existing behaviour", "depends_on_action_ids": [],
         "workspace_mode": "read"},
        {"id": "measure", "type": "research", "objective": "Measure the current numbers", "depends_on_action_ids": [],
         "workspace_mode": "read"},
        {"id": "write-up", "type": "write", "objective": "Write up the findings",
         "depends_on_action_ids": ["survey", "measure"]},
    ],
    "parallel-change": [
        {"id": "api", "type": "implement", "objective": "Change the API layer", "depends_on_action_ids": [],
         "workspace_mode": "isolated-write"},
        {"id": "ui", "type": "implement", "objective": "Change the UI layer", "depends_on_action_ids": [],
         "workspace_mode": "isolated-write"},
        {"id": "merge", "type": "integrate", "objective": "Integrate both changes",
         "depends_on_action_ids": ["api", "ui"], "workspace_mode": "integrate"},
        {"id": "verify", "type": "test", "objective": "Run the test suite", "depends_on_action_ids": ["merge"]},
    ],
    "reviewed-change": [
        {"id": "implement", "type": "implement", "objective": "Make the change"},
        {"id": "review", "type": "review", "objective": "Review the change", "changes_requested_action_id": "implement"},
        {"id": "deliver", "type": "deliver", "objective": "Ship it"},
    ],
}


# what a simulated step prints to the run's log: a command, a few lines of its output, now and then a warning
LOG_COMMANDS = {
    "triage": ["git log --oneline -5", "grep -rn TODO src/ | head"],
    "research": ["rg --count 'def ' src/", "python -m timeit -n 100 'import json'"],
    "implement": ["git diff --stat", "python -m pytest -q tests/unit", "ruff check src/"],
    "review": ["git diff main...HEAD --stat", "python -m pytest -q"],
    "test": ["python -m pytest -q", "python -m pytest -q -k slow"],
}
LOG_OUTPUT = ["collected {n} items", "{n} passed in {s:.2f}s", "src/store.py:{n}: ok", "wrote {n} bytes",
              "fetching context ({n} tokens)", "tool call: read_file src/module_{n}.py", "diff: +{n} -{m} lines"]
LOG_WARNINGS = ["warning: deprecated option --strict in setup.cfg", "DeprecationWarning: datetime.utcnow() is deprecated",
                "note: retrying request after 429 (attempt 2)"]


def _log_lines(rng: random.Random, action: dict, step: int, steps: int):
    """(stream, text) lines of one simulated step: plausible, and deterministic like the rest."""
    commands = LOG_COMMANDS.get(action.get("type") or "", ["make build", "python -m pytest -q"])
    yield "stdout", f"$ {rng.choice(commands)}\n"
    for _ in range(rng.randint(1, 4)):
        yield "stdout", rng.choice(LOG_OUTPUT).format(n=rng.randint(2, 400), m=rng.randint(0, 80),
                                                      s=rng.uniform(0.1, 9)) + "\n"
    if rng.random() < 0.15:
        yield "stderr", rng.choice(LOG_WARNINGS) + "\n"
    if step + 1 == steps:
        yield "worker", f"{action.get('stage_id')}: {steps} step(s) done\n"


def _rng(*parts) -> random.Random:
    seed = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return random.Random(int(seed[:16], 16))


class SimulatedExecutor:
    def __init__(self, scale: float | None = None, failure_rate: float = 0.04, waiting_rate: float = 0.05,
                 retry_rate: float = 0.06):
        env = os.environ.get("WORKCENTER_SIM_SCALE")
        self.scale = float(scale if scale is not None else (env if env else 1.0))
        rates = os.environ.get("WORKCENTER_SIM_RATES")  # "failure,waiting,retry", e.g. "0,0,0"
        if rates:
            failure_rate, waiting_rate, retry_rate = (float(x) for x in rates.split(","))
        self.failure_rate, self.waiting_rate, self.retry_rate = failure_rate, waiting_rate, retry_rate

    def execute(self, task: dict, report: Callable[[dict], bool], stop: threading.Event) -> dict:
        item, action = task["work_item"], task["action"]
        rng = _rng(item["id"], action.get("stage_id"), action.get("attempt"), action.get("sequence"))
        duration = rng.uniform(0.6, 2.4) * self.scale
        # the log's lines have a random stream of their own: the outcomes stay what they were without a log
        log_rng = _rng("log", item["id"], action.get("stage_id"), action.get("attempt"), action.get("sequence"))
        steps = max(1, int(duration / 0.3))
        counters = {"llm_request_count": 0, "loop_count": 0, "tool_count": 0, "input_tokens": 0,
                    "output_tokens": 0, "total_tokens": 0}
        lines: list[str] = []
        for step in range(steps):
            if stop.wait(duration / steps):
                raise RunAborted()
            counters["loop_count"] += 1
            counters["llm_request_count"] += 1
            counters["tool_count"] += rng.randint(0, 3)
            counters["input_tokens"] += rng.randint(800, 2400)
            counters["output_tokens"] += rng.randint(100, 600)
            counters["total_tokens"] = counters["input_tokens"] + counters["output_tokens"]
            lines.append(f"step {step + 1}/{steps}: working on {action.get('stage_id')}")
            for stream, text in _log_lines(log_rng, action, step, steps):
                log_to(report, text, stream)
            report({"response": "\n".join(lines[-20:]), **counters,
                    "checkpoint": {"tool_events": [{"name": "shell", "resource": item.get("work_dir") or "."}]}})
        return self._outcome(task, rng, counters, "\n".join(lines))

    def _outcome(self, task: dict, rng: random.Random, counters: dict, response: str) -> dict:
        item, action = task["work_item"], task["action"]
        criteria = item.get("acceptance_criteria") or []
        atype = action.get("type")
        context = action.get("context") or []
        base = {"response": response, **counters}
        first_attempt = (action.get("attempt") or 1) == 1
        answered = any(e.get("answer") for e in context if isinstance(e, dict))
        roll = rng.random()
        script = f"{item.get('title', '')} {item.get('goal', '')}"
        if atype != "triage" and not answered and "[sim:waiting]" in script:
            return {**base, "outcome": "waiting", "waiting_reason": "The script of this item asks for an answer"}
        if atype != "triage" and "[sim:fail]" in script:
            return {**base, "outcome": "failed", "error": "The script of this item fails here"}
        if atype not in ("triage",) and first_attempt and not answered:
            if roll < self.failure_rate:
                return {**base, "outcome": "failed", "error": f"Simulated failure in {action.get('stage_id')}"}
            if roll < self.failure_rate + self.waiting_rate:
                return {**base, "outcome": "waiting",
                        "waiting_reason": f"Which option should {action.get('stage_id')} take: A or B?"}
            if roll < self.failure_rate + self.waiting_rate + self.retry_rate:
                return {**base, "outcome": "retryable", "error": "Simulated transient error (rate limited)"}
        result = {**base, "outcome": "completed", "summary": f"{action.get('stage_id')} finished",
                  "evidence": [{"kind": "text", "label": f"Simulated work for {action.get('stage_id')}"},
                               {"kind": "test", "label": "simulated checks", "status": "passed"}],
                  "acceptance_checks": acceptance_checks(criteria)}
        snapshot = item.get("workflow_snapshot") or {}
        if atype == "triage" and snapshot.get("planning_mode") == "ai":
            kind = snapshot.get("work_item_type") or rng.choice(["research", "parallel-change", "reviewed-change",
                                                                 "software-change"])
            if kind not in PLANS and kind != "software-change":
                kind = "research"
            if kind == "software-change":
                result["plan"] = {"work_item_type": "software-change"}
            else:
                result["plan"] = {"work_item_type": kind, "actions": PLANS[kind]}
            result["summary"] = f"Planned as {kind}"
        elif atype == "review":
            texts = [str(e.get("summary", "")) for e in context if isinstance(e, dict)]
            texts += [str(d.get("summary", "")) for d in task.get("dependencies") or []]
            if any(FEEDBACK_MARK in t for t in texts):
                result["review_decision"] = "approved"
            else:
                result["review_decision"] = "changes_requested"
                result["summary"] = "Please tighten the error handling"
                result["acceptance_checks"] = acceptance_checks(criteria, status="deferred")
        elif any(isinstance(e, dict) and e.get("review_decision") == "changes_requested" for e in context):
            result["summary"] = f"{FEEDBACK_MARK} in {action.get('stage_id')}"
        return result
