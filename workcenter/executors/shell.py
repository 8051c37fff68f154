"""Runs one of the worker's own commands for an action, in the item's work_dir, streaming output.

What can run is fixed when the worker starts, by whoever starts it: a commands file
(`--commands FILE` or WORKCENTER_SHELL_COMMANDS) and/or a scripts directory (`--scripts DIR` or
WORKCENTER_SHELL_SCRIPTS). An item only picks one of those commands by name; item text is never
run, never handed to a shell and never passed as an argument.

The commands file is TOML (JSON when its name ends in `.json`); each top-level key is a command
name, its value a command line (split like a shell would split it, then run without one), an argv
list, or a table with `run` (a command line) or `argv`, and optionally `timeout_s`, `env` (extra
variables) and `shell = true` (run `run` with /bin/sh -c; the line is the file's, never the
item's):

    test = "pytest -q"
    lint = ["ruff", "check", "."]

    [build]
    argv = ["make", "build"]
    timeout_s = 1800
    env = { CI = "1" }

In a scripts directory every executable file whose name is a valid command name is a command of
that name (hidden files and files that are not executable are ignored). Both are read once, at
start-up; a file or directory that cannot be used stops the worker with a message naming it.

The name an action asks for is its stage id (command_name_for: a `command` on the stored stage,
then on the brief, would come first, but the server stores neither — workflows and plans keep
only the stage keys of DOMAIN §4.1, and a brief's repair refuses other keys). A name the worker
was not given fails the run without starting anything; the error lists the names it has. The
process runs in the item's work_dir (the worker's directory when the item has none) with the
worker's environment minus WORKCENTER_TOKEN, plus the command's `env`, plus WORKCENTER_ITEM_ID,
WORKCENTER_ACTION_ID, WORKCENTER_STAGE_ID, WORKCENTER_RUN_ID, WORKCENTER_ATTEMPT and
WORKCENTER_COMMAND.

The command's stdout and stderr go to the run's log as they come, line by line (a line still open
after LINE_WAIT_S is sent as far as it goes), and their last TAIL characters are the run's
progress every second and its response at the end.

Exit code 0 ⇒ completed with the output tail as evidence; 75 (EX_TEMPFAIL) ⇒ retryable; any other
code, a timeout or a program that cannot start ⇒ failed. Stopping the run ends the command's whole
process group (SIGTERM, then SIGKILL after 10 s).
"""
from __future__ import annotations

import codecs
import json
import logging
import os
import re
import selectors
import shlex
import signal
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import ExecutorConfigError, acceptance_checks
from ..worker import RunAborted
from ..worker_log import log_to

logger = logging.getLogger("workcenter.executors.shell")

TAIL = 4000
LINE_WAIT_S = 1.0  # a line that has not ended after this long is sent as far as it goes (a progress bar)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENTRY_KEYS = {"run", "argv", "timeout_s", "env", "shell"}
# the worker's own credential stays with the worker: commands work on item content
WITHHELD_ENV = ("WORKCENTER_TOKEN",)


@dataclass(frozen=True)
class Command:
    name: str
    argv: tuple[str, ...]
    timeout_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)

    def display(self) -> str:
        line = shlex.join(self.argv)
        return line if len(line) <= 300 else line[:299] + "…"


# --- the worker's configuration ------------------------------------------------------------------

def _entry(name: str, spec: Any, where: str) -> Command:
    """One command of a commands file; raises ExecutorConfigError naming the file and the command."""
    def bad(message: str) -> ExecutorConfigError:
        return ExecutorConfigError(f"{where}: command {name!r}: {message}")

    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ExecutorConfigError(f"{where}: {name!r} is not a command name (letters, digits, '.', '_', '-'; "
                                  "at most 64, starting with a letter or digit)")
    if isinstance(spec, (str, list)):
        spec = {"run": spec} if isinstance(spec, str) else {"argv": spec}
    if not isinstance(spec, dict):
        raise bad("must be a command line, an argv list or a table")
    unknown = sorted(set(spec) - ENTRY_KEYS)
    if unknown:
        raise bad(f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(ENTRY_KEYS))})")
    if ("run" in spec) == ("argv" in spec):
        raise bad("give exactly one of `run` (a command line) or `argv` (a list)")
    shell = spec.get("shell", False)
    if not isinstance(shell, bool):
        raise bad("`shell` must be true or false")
    if "run" in spec:
        line = spec["run"]
        if not isinstance(line, str) or not line.strip():
            raise bad("`run` must be a non-empty command line")
        if shell:
            argv = ["/bin/sh", "-c", line]
        else:
            try:
                argv = shlex.split(line)
            except ValueError as exc:
                raise bad(f"cannot split `run`: {exc}") from None
    else:
        if shell:
            raise bad("`shell = true` needs `run`, not `argv`")
        argv = spec["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
            raise bad("`argv` must be a non-empty list of non-empty strings")
    if any("\0" in a for a in argv):
        raise bad("contains a NUL character")
    timeout = spec.get("timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise bad("`timeout_s` must be a positive number of seconds")
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and k and "=" not in k and isinstance(v, str)
                                            for k, v in env.items()):
        raise bad("`env` must be a table of NAME = \"value\" strings")
    return Command(name, tuple(argv), float(timeout) if timeout is not None else None, dict(env))


def commands_from_file(path: str | os.PathLike) -> dict[str, Command]:
    path = Path(path).expanduser().absolute()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExecutorConfigError(f"cannot read commands file {path}: {exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ExecutorConfigError(f"commands file {path} is not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise ExecutorConfigError(f"commands file {path} must map command names to commands")
    return {name: _entry(name, spec, str(path)) for name, spec in data.items()}


def commands_from_dir(path: str | os.PathLike) -> dict[str, Command]:
    path = Path(path).expanduser().absolute()
    if not path.is_dir():
        raise ExecutorConfigError(f"scripts directory {path} is not a directory")
    out = {}
    for entry in sorted(path.iterdir()):
        if entry.name.startswith(".") or not entry.is_file() or not os.access(entry, os.X_OK):
            continue
        if not NAME.fullmatch(entry.name):
            logger.warning("ignoring script %s: not a command name", entry)
            continue
        out[entry.name] = Command(entry.name, (str(entry),))
    return out


def load_commands(commands: str | os.PathLike | None, scripts: str | os.PathLike | None) -> dict[str, Command]:
    """The worker's commands from a file and/or a directory; refuses none at all and duplicate names."""
    if not commands and not scripts:
        raise ExecutorConfigError(
            "the shell executor runs only the commands its worker is given: pass --commands FILE and/or "
            "--scripts DIR (or set WORKCENTER_SHELL_COMMANDS / WORKCENTER_SHELL_SCRIPTS)")
    found = commands_from_file(commands) if commands else {}
    if scripts:
        from_dir = commands_from_dir(scripts)
        both = sorted(set(found) & set(from_dir))
        if both:
            raise ExecutorConfigError(f"command(s) {', '.join(both)} defined both in {commands} and in {scripts}")
        found.update(from_dir)
    if not found:
        raise ExecutorConfigError(f"no commands found in {' or '.join(str(p) for p in (commands, scripts) if p)}")
    return found


# --- one action ------------------------------------------------------------------------------------

def command_name_for(task: dict) -> str | None:
    """The name an action asks for: its stage id. A `command` on the stored stage, then on the brief,
    would come first; nothing the server stores has one (module doc)."""
    item, action = task["work_item"], task["action"]
    stage_id = action.get("stage_id")
    for stage in (item.get("workflow_snapshot") or {}).get("stages") or []:
        if isinstance(stage, dict) and stage.get("id") == stage_id and stage.get("command"):
            return str(stage["command"])
    brief = action.get("brief") if isinstance(action.get("brief"), dict) else {}
    if brief.get("command"):
        return str(brief["command"])
    return str(stage_id) if stage_id else None


def _env_value(value: Any) -> str:
    """Item ids as environment values: no NUL, nothing that cannot be encoded."""
    return str(value).replace("\0", "").encode("utf-8", "replace").decode("utf-8")


class OutputTail:
    """The last `size` characters of a command's output (stdout and stderr as they came), bounded."""

    def __init__(self, size: int):
        self.size, self._text, self._lock = size, "", threading.Lock()

    def add(self, text: str) -> None:
        with self._lock:
            self._text = (self._text + text)[-2 * self.size:] if len(self._text) + len(text) > 2 * self.size \
                else self._text + text

    def text(self) -> str:
        with self._lock:
            return self._text[-self.size:]


def read_lines(pipes: dict, line_wait_s: float = LINE_WAIT_S):
    """(stream, text) as a process writes to its pipes ({stream name: binary pipe}), line by line
    (each with its newline), decoded as UTF-8 (a byte that is not is replaced; NUL becomes U+FFFD);
    a line still open after `line_wait_s` comes as far as it goes, its rest later. Ends when every
    pipe is closed."""
    sel = selectors.DefaultSelector()
    open_since: dict[str, float] = {}
    partial: dict[str, str] = {}
    decoders = {}
    for stream, pipe in pipes.items():
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe, selectors.EVENT_READ, stream)
        decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
        partial[stream] = ""
    try:
        while sel.get_map():
            now = time.monotonic()
            waits = [since + line_wait_s - now for since in open_since.values()]
            for key, _ in sel.select(max(0.0, min(waits)) if waits else None):
                stream = key.data
                try:
                    data = os.read(key.fileobj.fileno(), 65_536)
                except BlockingIOError:
                    continue
                text = decoders[stream].decode(data, final=not data).replace("\x00", "\ufffd")
                if not data:
                    sel.unregister(key.fileobj)
                buffered = partial[stream] + text
                cut = buffered.rfind("\n") + 1
                if cut:
                    yield stream, buffered[:cut]
                    buffered = buffered[cut:]
                    open_since.pop(stream, None)
                if buffered and not data:  # the pipe closed on an open line
                    yield stream, buffered
                    buffered = ""
                partial[stream] = buffered
                if buffered:
                    open_since.setdefault(stream, time.monotonic())
            now = time.monotonic()
            for stream, since in list(open_since.items()):
                if now - since >= line_wait_s and partial[stream]:
                    yield stream, partial[stream]
                    partial[stream] = ""
                    del open_since[stream]
    finally:
        sel.close()


def _end_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class ShellExecutor:
    def __init__(self, commands: str | os.PathLike | None = None, scripts: str | os.PathLike | None = None,
                 timeout_s: float = 3600):
        self.commands = load_commands(commands or os.environ.get("WORKCENTER_SHELL_COMMANDS"),
                                      scripts or os.environ.get("WORKCENTER_SHELL_SCRIPTS"))
        self.timeout_s = timeout_s
        logger.info("shell executor commands: %s", ", ".join(sorted(self.commands)))

    def _environment(self, command: Command, task: dict) -> dict[str, str]:
        item, action, run = task["work_item"], task["action"], task["run"]
        env = {k: v for k, v in os.environ.items() if k not in WITHHELD_ENV}
        env.update(command.env)
        ids = {"ITEM_ID": item.get("id"), "ACTION_ID": action.get("id"), "STAGE_ID": action.get("stage_id"),
               "RUN_ID": run.get("id"), "ATTEMPT": action.get("attempt"), "COMMAND": command.name}
        env.update({f"WORKCENTER_{k}": _env_value(v) for k, v in ids.items() if v is not None})
        return env

    def execute(self, task: dict, report: Callable[[dict], bool], stop: threading.Event) -> dict:
        allowed = ", ".join(sorted(self.commands))
        name = command_name_for(task)
        command = self.commands.get(name) if name else None
        if command is None:
            asked = f"command {name[:100]!r} is not one this worker runs" if name else "the action names no command"
            return {"outcome": "failed", "error": f"Refused: {asked} (this worker's commands: {allowed})"}
        cwd = task["work_item"].get("work_dir") or os.getcwd()
        if not os.path.isdir(cwd):
            return {"outcome": "failed", "error": f"`{name}`: the item's work_dir is not a directory on this worker"}
        try:
            proc = subprocess.Popen(command.argv, cwd=cwd, env=self._environment(command, task), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        except OSError as exc:
            return {"outcome": "failed", "error": f"`{name}` could not start ({command.argv[0]}): {exc.strerror or exc}"}
        output = OutputTail(TAIL)

        def pump():
            for stream, text in read_lines({"stdout": proc.stdout, "stderr": proc.stderr}):
                output.add(text)
                log_to(report, text, stream)

        def tail() -> str:
            return output.text()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timeout = command.timeout_s or self.timeout_s
        started = last = time.monotonic()
        timed_out = False
        while proc.poll() is None:
            if stop.wait(0.2):
                _end_group(proc, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    _end_group(proc, signal.SIGKILL)
                    proc.wait()
                raise RunAborted()
            if time.monotonic() - started > timeout:
                timed_out = True
                _end_group(proc, signal.SIGKILL)
                proc.wait()
                break
            if time.monotonic() - last > 1.0:
                last = time.monotonic()
                report({"response": tail()})
        reader.join(5)
        text, code = tail(), proc.returncode
        if timed_out:
            return {"outcome": "failed", "response": text, "error": f"`{name}` timed out after {timeout:g} s"}
        if code == 0:
            criteria = task["work_item"].get("acceptance_criteria") or []
            return {"outcome": "completed", "response": text, "summary": f"`{name}` exited 0",
                    "evidence": [{"kind": "text", "label": f"{name}: {command.display()} (exit 0)"},
                                 {"kind": "text", "label": text.strip()[-500:] or "(no output)"}],
                    "acceptance_checks": acceptance_checks(criteria, evidence=f"`{name}` exited 0")}
        outcome = "retryable" if code == 75 else "failed"
        return {"outcome": outcome, "response": text, "error": f"`{name}` exited {code}"}
