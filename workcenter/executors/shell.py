"""Runs a shell command for an action, in the item's work_dir, streaming output as progress.

The command is the first of: the stage's `command` in the item's workflow snapshot, the action
brief's `command`, or the brief's objective when it starts with "$ ". Exit code 0 ⇒ completed with
the output tail as evidence; 75 (EX_TEMPFAIL) ⇒ retryable; any other code ⇒ failed.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Callable

from . import acceptance_checks
from ..worker import RunAborted

TAIL = 4000


def command_for(task: dict) -> str | None:
    item, action = task["work_item"], task["action"]
    for stage in (item.get("workflow_snapshot") or {}).get("stages") or []:
        if isinstance(stage, dict) and stage.get("id") == action.get("stage_id") and stage.get("command"):
            return str(stage["command"])
    brief = action.get("brief") or {}
    if brief.get("command"):
        return str(brief["command"])
    objective = str(brief.get("objective") or "")
    if objective.startswith("$ "):
        return objective[2:]
    return None


class ShellExecutor:
    def __init__(self, timeout_s: float = 3600):
        self.timeout_s = timeout_s

    def execute(self, task: dict, report: Callable[[dict], bool], stop: threading.Event) -> dict:
        command = command_for(task)
        if not command:
            return {"outcome": "failed", "error": "No command: give the stage a `command` or the brief an objective starting with '$ '"}
        cwd = task["work_item"].get("work_dir") or os.getcwd()
        proc = subprocess.Popen(command, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1, start_new_session=True)
        output: list[str] = []
        last = 0.0

        def pump():
            for line in proc.stdout:
                output.append(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        started = time.monotonic()
        while proc.poll() is None:
            if stop.wait(0.2):
                proc.terminate()
                proc.wait(10)
                raise RunAborted()
            if time.monotonic() - started > self.timeout_s:
                proc.kill()
                break
            if time.monotonic() - last > 1.0:
                last = time.monotonic()
                report({"response": "".join(output)[-TAIL:]})
        reader.join(5)
        text = "".join(output)[-TAIL:]
        code = proc.returncode
        if code == 0:
            criteria = task["work_item"].get("acceptance_criteria") or []
            return {"outcome": "completed", "response": text, "summary": f"`{command}` exited 0",
                    "evidence": [{"kind": "text", "label": f"$ {command} (exit 0)"},
                                 {"kind": "text", "label": text.strip()[-500:] or "(no output)"}],
                    "acceptance_checks": acceptance_checks(criteria, evidence=f"`{command}` exited 0")}
        outcome = "retryable" if code == 75 else "failed"
        return {"outcome": outcome, "response": text, "error": f"`{command}` exited {code}"}
