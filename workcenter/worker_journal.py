"""The worker's journal: a finished run's submission kept on disk until the store acknowledges it.

One small JSON file per run (its fence and its result), written atomically (a temporary file,
fsync, os.replace, fsync of the directory) before the first submit, deleted once the store
accepted it, refused it, or the lease is gone. A worker that starts sends the entries no live
process holds again, with their stored fence, before it claims: a run whose lease is still live
gets its result (and one the server applied already answers as applied), so a finished run is
not run twice because its worker restarted.

Several workers may share a directory: the process that wrote an entry holds an exclusive
flock on it while it is retrying, so a worker starting beside it leaves it alone; the lock goes
with the process. Entries are scoped by the store they belong to (server URL or database), so a
worker never sends another server's run to its own. No Django here (like workcenter.worker).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time

try:
    import fcntl
except ImportError:  # not POSIX: no locks, and two workers starting at once may both send an entry
    fcntl = None

logger = logging.getLogger("workcenter.worker")


def default_journal_dir() -> str:
    """$WORKCENTER_WORKER_JOURNAL, else workcenter/worker-journal under $XDG_STATE_HOME (~/.local/state)."""
    configured = os.environ.get("WORKCENTER_WORKER_JOURNAL")
    if configured:
        return configured
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "workcenter", "worker-journal")


class Journal:
    """Entries of one store (`scope`: its URL or database) in `directory`."""

    def __init__(self, directory: str, scope: str):
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.prefix = hashlib.sha256(scope.encode()).hexdigest()[:12] + "-"
        self._held: dict[str, int] = {}  # run id -> descriptor holding the entry's lock
        self._lock = threading.Lock()

    def _path(self, run_id: str) -> str:
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(run_id))
        return os.path.join(self.directory, f"{self.prefix}{safe}.json")

    def write(self, run: dict, result: dict) -> None:
        """Keep the submission (fence and result) until `remove`; durable once this returns."""
        entry = {"run": {"id": run["id"], "owner_boot_id": run["owner_boot_id"], "lease_epoch": run["lease_epoch"]},
                 "result": result, "written_at": time.time()}
        path = self._path(run["id"])
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(entry).encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self._fsync_dir()
        self._hold(run["id"], path)

    def remove(self, run_id: str) -> None:
        """The store answered: the entry goes (and its lock with it)."""
        try:
            os.unlink(self._path(run_id))
        except FileNotFoundError:
            pass
        self._fsync_dir()
        self.release(run_id)

    def release(self, run_id: str) -> None:
        """Keep the entry for a later start, and let another process take it."""
        with self._lock:
            fd = self._held.pop(run_id, None)
        if fd is not None:
            os.close(fd)

    def orphans(self) -> list[dict]:
        """This store's entries no live process holds, oldest first; each is held by this one now."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if not (name.startswith(self.prefix) and name.endswith(".json")):
                continue
            path = os.path.join(self.directory, name)
            fd = self._try_lock(path)
            if fd is None:
                continue
            try:
                if os.fstat(fd).st_nlink == 0:  # removed by its writer while this one waited
                    os.close(fd)
                    continue
                with open(path, "rb") as f:
                    entry = json.loads(f.read())
                run = entry["run"]
                if not (isinstance(run, dict) and isinstance(entry.get("result"), dict)):
                    raise ValueError("not a journal entry")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.error("journal entry %s is unreadable and is dropped: %s", path, exc)
                os.close(fd)
                try:
                    os.unlink(path)
                except OSError:
                    pass
                continue
            with self._lock:
                self._held[run["id"]] = fd
            found.append(entry)
        found.sort(key=lambda e: e.get("written_at") or 0)
        return found

    # --- files and locks ------------------------------------------------------------------------
    def _hold(self, run_id: str, path: str) -> None:
        fd = self._try_lock(path)
        if fd is not None:
            with self._lock:
                old = self._held.pop(run_id, None)
                self._held[run_id] = fd
            if old is not None:
                os.close(old)

    @staticmethod
    def _try_lock(path: str) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        if fcntl is None:
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live process holds it
            os.close(fd)
            return None
        return fd

    def _fsync_dir(self) -> None:
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
