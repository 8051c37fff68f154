"""An executor for the end-to-end tests of submission retries: it writes the run's id to
$WORKCENTER_TEST_EXECUTIONS.started as it begins, works for a while, then writes one line per
finished execution ("<action id> <run id>") to $WORKCENTER_TEST_EXECUTIONS and completes the
action (a review approves). The lines tell how often each action was worked on."""
from __future__ import annotations

import os
import threading

from workcenter.executors import acceptance_checks
from workcenter.worker import RunAborted


class RecordingExecutor:
    def __init__(self):
        self.log = os.environ["WORKCENTER_TEST_EXECUTIONS"]
        self.seconds = float(os.environ.get("WORKCENTER_TEST_EXECUTION_SECONDS", "0.4"))

    def execute(self, task: dict, report, stop: threading.Event) -> dict:
        with open(self.log + ".started", "a", encoding="utf-8") as f:
            f.write(f"{task['run']['id']}\n")
        if stop.wait(self.seconds):
            raise RunAborted()
        action, item = task["action"], task["work_item"]
        with open(self.log, "a", encoding="utf-8") as f:  # one short append per line: lines never interleave
            f.write(f"{action['id']} {task['run']['id']}\n")
        result = {"outcome": "completed", "summary": f"{action.get('stage_id')} done", "evidence": ["worked"],
                  "acceptance_checks": acceptance_checks(item.get("acceptance_criteria") or [])}
        if action.get("type") == "review":
            result["review_decision"] = "approved"
        return result
