"""The shell executor runs only the commands its worker was given, in real worker processes over
the test database: allowed names run, anything else fails without starting a process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.live import ROOT, database_url, wait_until
from workcenter import services
from workcenter.executors import ExecutorConfigError
from workcenter.executors.shell import commands_from_dir, load_commands
from workcenter.models import Run, WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

SHELL = "workcenter.executors.shell.ShellExecutor"
# records what the command saw (cwd and the WORKCENTER_* variables) in the work dir, then prints
RECORD = ("import json, os; json.dump({'cwd': os.getcwd(), 'env': {k: v for k, v in os.environ.items() "
          "if k.startswith('WORKCENTER_')}}, open('seen.json', 'w')); print('hello from the worker')")


def item_with_stage(work_dir, stage: str, criteria=("says hello",)) -> WorkItem:
    """A started item whose one stage has the id `stage` (the name it asks the worker for)."""
    workflow = {"id": "shell-check", "stages": [{"id": stage, "type": "implement"}]}
    return services.work_item_create(title=f"Run {stage}", goal="Run a worker command", acceptance_criteria=list(criteria),
                                     work_dir=str(work_dir), workflow=workflow, trusted=True)


def worker(*args, env=None, once=True, **popen):
    """`manage.py workcenter_worker` as its own process over the test database."""
    cmd = [sys.executable, "manage.py", "workcenter_worker", "--poll-ms", "100", "--lease-ms", "10000", *args]
    if once:
        cmd.append("--once")
    full_env = dict(os.environ, DATABASE_URL=database_url(), PYTHONUNBUFFERED="1", **(env or {}))
    if once:
        return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)
    return subprocess.Popen(cmd, cwd=ROOT, env=full_env, **popen)


def write_commands(path, commands: dict) -> str:
    path.write_text(json.dumps(commands))
    return str(path)


def only_run(item) -> Run:
    runs = list(Run.objects.filter(work_item_id=item.pk))
    assert len(runs) == 1, runs
    return runs[0]


def test_shell_worker_runs_an_allowed_command_and_completes(tmp_path):
    # given a worker allowed one command, and an item whose stage asks for it by name
    work = tmp_path / "work"
    work.mkdir()
    commands = write_commands(tmp_path / "commands.json", {"greet": [sys.executable, "-c", RECORD]})
    item = item_with_stage(work, "greet")
    # when the worker runs (holding a token it must not pass on)
    done = worker("--executor", SHELL, "--commands", commands, env={"WORKCENTER_TOKEN": "wc_secret"})
    # then the command ran in the work dir, with the item's ids, and the item is done with its output as evidence
    assert done.returncode == 0, done.stderr
    run = only_run(item)
    assert run.status == "completed", run.error
    assert WorkItem.objects.get(pk=item.pk).status == "done"
    assert "hello from the worker" in run.response
    labels = [e["label"] for e in run.evidence]
    assert labels[0].startswith("greet: ") and labels[0].endswith("(exit 0)")
    assert labels[1] == "hello from the worker"
    seen = json.loads((work / "seen.json").read_text())
    assert seen["cwd"] == str(work.resolve())
    assert seen["env"] == {"WORKCENTER_ITEM_ID": item.pk, "WORKCENTER_ACTION_ID": run.action_id,
                           "WORKCENTER_STAGE_ID": "greet", "WORKCENTER_RUN_ID": run.pk, "WORKCENTER_ATTEMPT": "1",
                           "WORKCENTER_COMMAND": "greet"}


def test_shell_worker_refuses_a_brief_that_names_a_command_it_was_not_given(tmp_path):
    # given a worker allowed only `greet`, and items whose text asks for something else: a brief
    # objective edited by an admin repair, and a stage and a brief `command` naming shell code
    commands = write_commands(tmp_path / "commands.json", {"greet": [sys.executable, "-c", RECORD]})
    edited_dir, named_dir = tmp_path / "edited", tmp_path / "named"
    edited_dir.mkdir()
    named_dir.mkdir()
    edited = item_with_stage(edited_dir, "implement")
    services.action_edit(action_id=edited.current_action_id, reason="run this instead", actor="user:admin",
                         brief={"objective": "$ touch pwned-objective"})
    named = item_with_stage(named_dir, "implement")
    snapshot = named.workflow_snapshot
    snapshot["stages"][0]["command"] = "touch pwned-stage"
    WorkItem.objects.filter(pk=named.pk).update(workflow_snapshot=snapshot)
    named.actions.update(brief={"objective": "x", "command": "touch pwned-brief"})
    # when the worker runs
    done = worker("--executor", SHELL, "--commands", commands, "--concurrency", "2")
    # then both runs failed, naming what the worker allows, and nothing ran
    assert done.returncode == 0, done.stderr
    for item in (edited, named):
        run = only_run(item)
        assert run.status == "failed"
        assert "this worker's commands: greet" in run.error
        assert WorkItem.objects.get(pk=item.pk).status == "needs_attention"
    assert "'implement' is not one this worker runs" in only_run(edited).error
    assert "'touch pwned-stage' is not one this worker runs" in only_run(named).error
    assert list(edited_dir.iterdir()) == [] and list(named_dir.iterdir()) == []
    assert not (ROOT / "pwned-objective").exists() and not (ROOT / "pwned-stage").exists()


def test_shell_worker_never_runs_a_dollar_objective_even_beside_an_allowed_command(tmp_path):
    # given an item that asks for `greet` by its stage, with an objective that is a shell command
    work = tmp_path / "work"
    work.mkdir()
    commands = write_commands(tmp_path / "commands.json", {"greet": [sys.executable, "-c", RECORD]})
    item = item_with_stage(work, "greet")
    services.action_edit(action_id=item.current_action_id, reason="try it", actor="user:admin",
                         brief={"objective": "$ touch pwned"})
    # when the worker runs
    done = worker("--executor", SHELL, "--commands", commands)
    # then only the allowed command ran
    assert done.returncode == 0, done.stderr
    assert only_run(item).status == "completed"
    assert sorted(p.name for p in work.iterdir()) == ["seen.json"]


def test_shell_worker_runs_the_executables_of_its_scripts_directory(tmp_path):
    # given a scripts directory (named by the environment) with one executable and two files that are not commands
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "hello").write_text("#!/bin/sh\necho \"hello $WORKCENTER_STAGE_ID\" > out.txt\n")
    (scripts / "hello").chmod(0o755)
    (scripts / "notes").write_text("#!/bin/sh\ntouch pwned\n")  # not executable
    (scripts / ".hidden").write_text("#!/bin/sh\ntouch pwned\n")
    (scripts / ".hidden").chmod(0o755)
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    hello, notes = item_with_stage(work, "hello"), item_with_stage(other, "notes")
    # when the worker runs
    done = worker("--executor", SHELL, "--concurrency", "2", env={"WORKCENTER_SHELL_SCRIPTS": str(scripts)})
    # then the executable ran in the work dir and the plain file was refused
    assert done.returncode == 0, done.stderr
    assert only_run(hello).status == "completed", only_run(hello).error
    assert (work / "out.txt").read_text() == "hello hello\n"
    assert only_run(notes).status == "failed"
    assert "this worker's commands: hello" in only_run(notes).error
    assert sorted(p.name for p in work.iterdir()) == ["out.txt"] and list(other.iterdir()) == []


def test_shell_worker_maps_exit_codes_to_outcomes(tmp_path):
    # given commands that exit 75 (try again) and 3, one a command line split without a shell
    config = tmp_path / "commands.toml"
    config.write_text(f'tempfail = ["{sys.executable}", "-c", "raise SystemExit(75)"]\n'
                      f'[broken]\nrun = "{sys.executable} -c \'print(1 + 1); raise SystemExit(3)\'"\n')
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    tempfail, broken = item_with_stage(tmp_path / "a", "tempfail"), item_with_stage(tmp_path / "b", "broken")
    # when the worker runs (--commands alone picks the shell executor)
    done = worker("--commands", str(config), "--concurrency", "2")
    # then
    assert done.returncode == 0, done.stderr
    assert only_run(tempfail).status == "retryable"
    assert "`tempfail` exited 75" in only_run(tempfail).error
    assert only_run(broken).status == "failed"
    assert only_run(broken).error == "`broken` exited 3"
    assert only_run(broken).response.strip() == "2"


def test_shell_worker_stopped_mid_run_ends_the_command_and_interrupts_the_run(tmp_path):
    # given a worker running a long command
    work = tmp_path / "work"
    work.mkdir()
    slow = "import os, time; open('pid', 'w').write(str(os.getpid())); time.sleep(120)"
    commands = write_commands(tmp_path / "commands.json", {"slow": {"argv": [sys.executable, "-c", slow]}})
    item = item_with_stage(work, "slow")
    proc = worker("--commands", commands, once=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: (work / "pid").exists() and (work / "pid").read_text(), 60)
        pid = int((work / "pid").read_text())
        # when the worker is told to stop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # then the command is gone and the run was interrupted, not failed
    assert wait_until(lambda: not _alive(pid), 5)
    assert only_run(item).status == "interrupted"
    assert WorkItem.objects.get(pk=item.pk).status == "ready"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("args, config, message", [
    (["--commands", "{tmp}/missing.toml"], None, "cannot read commands file {tmp}/missing.toml"),
    (["--commands", "{tmp}/commands.toml"], "greet = [", "commands file {tmp}/commands.toml is not valid TOML"),
    (["--commands", "{tmp}/commands.toml"], "[greet]\nargv = []\n", "command 'greet': `argv` must be a non-empty list"),
    (["--executor", SHELL], None, "pass --commands FILE and/or --scripts DIR"),
    (["--executor", "workcenter.executors.simulated.SimulatedExecutor", "--commands", "{tmp}/commands.toml"],
     "greet = 'true'", "takes no option(s) commands"),
    (["--executor", "SimulatedExecutor"], None, "executor must be a dotted path: SimulatedExecutor"),
    (["--executor", "workcenter.executors.missing.Executor"], None,
     "cannot load executor workcenter.executors.missing.Executor: No module named 'workcenter.executors.missing'"),
    (["--executor", "workcenter.executors.simulated.Missing"], None,
     "cannot load executor workcenter.executors.simulated.Missing"),
])
def test_shell_worker_with_a_bad_configuration_refuses_to_start(tmp_path, args, config, message):
    # given an item a worker could claim, and a configuration that cannot be used
    item = item_with_stage(tmp_path, "greet")
    if config is not None:
        (tmp_path / "commands.toml").write_text(config)
    # when the worker starts
    done = worker(*[a.format(tmp=tmp_path) for a in args])
    # then it exits with a message naming the problem, having claimed nothing
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message.format(tmp=tmp_path) in done.stderr
    assert "Traceback" not in done.stderr
    assert not Run.objects.filter(work_item_id=item.pk).exists()
    assert WorkItem.objects.get(pk=item.pk).status == "ready"


@pytest.mark.parametrize("config, message", [
    ("[]", "must map command names to commands"),
    ('{"a b": "true"}', "'a b' is not a command name"),
    ('{"greet": 7}', "must be a command line, an argv list or a table"),
    ('{"greet": {"run": "true", "argv": ["true"]}}', "exactly one of `run`"),
    ('{"greet": {"run": "true", "args": "x"}}', "unknown key(s) args"),
    ('{"greet": {"run": "echo \'open"}}', "cannot split `run`"),
    ('{"greet": {"argv": ["true"], "shell": true}}', "`shell = true` needs `run`"),
    ('{"greet": {"run": "true", "timeout_s": true}}', "`timeout_s` must be a positive number"),
    ('{"greet": {"run": "true", "env": {"A": 1}}}', "`env` must be a table"),
    ("{}", "no commands found in"),
])
def test_shell_commands_file_is_checked_entry_by_entry(tmp_path, config, message):
    path = tmp_path / "commands.json"
    path.write_text(config)
    with pytest.raises(ExecutorConfigError) as caught:
        load_commands(path, None)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_shell_commands_file_and_scripts_directory_combine_without_clashes(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ("build", "run tests", "deploy"):
        (scripts / name).write_text("#!/bin/sh\n")
        (scripts / name).chmod(0o755)
    (tmp_path / "commands.toml").write_text('lint = "ruff check ."\nrelease = { run = "make release", shell = true }\n')
    both = load_commands(tmp_path / "commands.toml", scripts)
    assert sorted(both) == ["build", "deploy", "lint", "release"]  # "run tests" is not a command name
    assert both["lint"].argv == ("ruff", "check", ".")
    assert both["release"].argv == ("/bin/sh", "-c", "make release")
    assert both["build"].argv == (str(scripts / "build"),)
    (tmp_path / "clash.toml").write_text('deploy = "true"\n')
    with pytest.raises(ExecutorConfigError, match="deploy defined both in"):
        load_commands(tmp_path / "clash.toml", scripts)
    with pytest.raises(ExecutorConfigError, match="is not a directory"):
        commands_from_dir(tmp_path / "commands.toml")
