"""The worker's store beside the database (DOMAIN §13): the service layer in this process.

`LocalStore` answers the `WorkerStore` calls of workcenter.worker with the same JSON shapes the
worker protocol of API.md §3 returns, so an executor sees the same task as over `HttpStore`.
"""
from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError, close_old_connections, connection

from .clock import iso_ms
from .errors import WorkcenterError
from .selectors import claim_dependencies
from .services import action_claim, run_interrupt, run_progress, run_renew, run_submit, run_unseen_claim, runs_recover
from .services.run_logs import run_log_append
from .services.runs import AppliedSubmission
from .worker import StoreError

logger = logging.getLogger("workcenter.worker")


class LocalStore:
    """Calls the service layer directly (the worker runs beside the database)."""

    @property
    def scope(self) -> str:
        """What a journal entry belongs to (workcenter.worker_journal): this database."""
        s = connection.settings_dict
        return f"db:{connection.vendor}:{s.get('HOST') or ''}:{s.get('PORT') or ''}:{s.get('NAME')}"

    def recover(self, boot_id):
        return runs_recover(current_boot_id=boot_id, expired_only=True)

    long_poll = False  # beside the database the worker's loop polls (it has no event loop to park on)

    def claim(self, boot_id, lease_ms, wait_ms=0):
        close_old_connections()
        c = action_claim(owner_boot_id=boot_id, lease_ms=lease_ms)
        return None if c is None else self._task(c)

    @staticmethod
    def _task(c) -> dict:
        item, action, run = c.work_item, c.action, c.run
        return {
            "work_item": {
                "id": item.pk, "title": item.title, "goal": item.goal, "revision": item.revision,
                "acceptance_criteria": list(item.acceptance_criteria or []), "work_dir": item.work_dir,
                "workspace_key": item.workspace_key, "workflow_snapshot": item.workflow_snapshot,
                "status": item.status,
            },
            "action": {
                "id": action.pk, "type": action.type, "stage_id": action.effective_stage_id,
                "brief": action.brief, "instruction": action.instruction, "context": action.context,
                "attempt": action.attempt, "max_attempts": action.max_attempts,
                "workspace_mode": action.workspace_mode, "depends_on_stage_ids": action.depends_on_stage_ids,
                "sequence": action.sequence,
            },
            "run": {"id": run.pk, "owner_boot_id": run.owner_boot_id, "lease_epoch": run.lease_epoch,
                    "expires_at": iso_ms(run.expires_at)},
            "dependencies": claim_dependencies(action, item),
        }

    @staticmethod
    def _fence(run):
        return dict(run_id=run["id"], owner_boot_id=run["owner_boot_id"], lease_epoch=run["lease_epoch"])

    def renew(self, run, lease_ms):
        return run_renew(**self._fence(run), lease_ms=lease_ms) is not None

    def progress(self, run, progress):
        return run_progress(**self._fence(run), progress=progress) is not None

    def log(self, run, chunks):
        """As over HTTP: refused input is a StoreError, a database out of reach a ConnectionError."""
        try:
            return run_log_append(**self._fence(run), chunks=chunks) is not None
        except WorkcenterError as exc:
            raise StoreError(exc.message, exc.code) from None
        except (OperationalError, InterfaceError) as exc:
            connection.close()
            raise ConnectionError(f"database: {exc}") from exc

    def submit(self, run, result, claim_next=None):
        """As over HTTP: a submission applied already (the same fence) answers as applied, and a
        database out of reach is a ConnectionError (the worker sends the submission again)."""
        try:
            submission = run_submit(**self._fence(run), result=result)
        except WorkcenterError as exc:
            raise StoreError(exc.message, exc.code) from None
        except (OperationalError, InterfaceError) as exc:
            connection.close()  # the next attempt opens a new connection
            raise ConnectionError(f"database: {exc}") from exc
        r, _, i = submission
        following = None
        if claim_next is not None:  # committed: a failed claim leaves the submission as it is
            try:
                unseen = (run_unseen_claim(run=r, owner_boot_id=claim_next[0])
                          if isinstance(submission, AppliedSubmission) else None)  # the lost answer's claim
                following = self._task(unseen) if unseen is not None else self.claim(*claim_next)
            except Exception:
                logger.exception("claim_next after run %s failed", r.pk)
        return {"run": {"id": r.pk, "status": r.status, "error": r.error}, "work_item": {"id": i.pk, "status": i.status},
                "next": following}

    def interrupt(self, run, reason, final_progress):
        try:
            return run_interrupt(**self._fence(run), reason=reason, final_progress=final_progress)
        except WorkcenterError as exc:
            raise StoreError(exc.message, exc.code) from None

    def thread_done(self) -> None:
        """A worker thread that called the store ends: its database connection (one per thread) goes too."""
        connection.close()
