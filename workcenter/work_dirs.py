"""Which directories a work item may name as its work_dir, and their canonical form (DOMAIN §2.1,
§8.1): the one place that looks at the server's file system for a work item.

A work_dir must be absolute, without `..` segments, and inside the allowed roots
(WORKCENTER_WORK_DIR_ROOTS) both as written and once its symlinks are resolved; without roots,
any directory but the operating system's own trees. Whether a refused path exists is never told:
outside the roots nothing is looked up, and every refusal past the syntax has the same message.
It reads the settings and the file system, never the store.
"""
from __future__ import annotations

import os
from typing import Any

from django.conf import settings

from .errors import InvalidInput

# A create that names no work_dir: WORKCENTER_DEFAULT_WORK_DIR applies.
MISSING: Any = object()

# Without WORKCENTER_WORK_DIR_ROOTS, the trees that hold the operating system rather than
# projects are refused (and the file system root itself). The kernel's trees are refused even
# inside a root: their entries alias other paths (/proc/self/cwd is the server's own directory).
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
                "/sbin", "/sys", "/usr")
KERNEL_TREES = ("/dev", "/proc", "/sys")


def canonicalize_dir(path: Any) -> str:
    """Canonical absolute path with symlinks resolved, or "" if blank or missing (DOMAIN §2.1)."""
    if not isinstance(path, str) or not path.strip():
        return ""
    try:
        real = os.path.realpath(path.strip())
    except (OSError, ValueError):
        return ""
    return real if os.path.isdir(real) else ""


def _within(path: str, trees) -> bool:
    return any(path == tree or path.startswith(tree.rstrip("/") + "/") for tree in trees)


def _work_dir_allowed(path: str, roots: list[str]) -> bool:
    """Is this absolute, normalised path one a work item may name (WORKCENTER_WORK_DIR_ROOTS)?"""
    if _within(path, KERNEL_TREES):
        return False
    if roots:
        return _within(path, roots)
    return path != "/" and not _within(path, SYSTEM_TREES)


def work_dir_syntax_error(work_dir: Any) -> str | None:
    """What is wrong with this work_dir as text (schemas_in.WORK_DIR_PATTERN says the same), or None."""
    if not isinstance(work_dir, str) or not work_dir.strip():
        return "workDir is blank: give the full path of a folder on the server, such as /srv/projects/example"
    if not work_dir.startswith("/"):
        return f"workDir must be a full (absolute) path, starting with /: {work_dir}"
    if ".." in work_dir.split("/"):
        return f"workDir must not step up with '..': {work_dir}"
    return None


def resolve_work_dir(work_dir: Any) -> str:
    """DOMAIN §8.1: a present work_dir must name an existing directory the server allows (the
    module doc); absent (MISSING) ⇒ the default. Answers its canonical path."""
    if work_dir is MISSING:
        default = getattr(settings, "WORKCENTER_DEFAULT_WORK_DIR", "") or ""
        return canonicalize_dir(default) if default else ""
    problem = work_dir_syntax_error(work_dir)
    if problem:
        raise InvalidInput(problem, fields=["work_dir"])
    # the same words whether the folder is missing or outside the roots (nothing outside is looked
    # up); the setting that lists the roots (WORKCENTER_WORK_DIR_ROOTS) is the docs' to name
    refused = InvalidInput(f"this folder is not one the server may use, or it does not exist (workDir: {work_dir}); "
                           "ask an admin which folders are allowed", fields=["work_dir"])
    roots = list(getattr(settings, "WORKCENTER_WORK_DIR_ROOTS", None) or [])
    roots += [os.path.realpath(root) for root in roots]  # a root may itself be a symlink
    path = os.path.normpath(work_dir)
    if not _work_dir_allowed(path, roots):
        raise refused
    # canonicalize_dir strips surrounding blanks; a path with them names another directory here
    real = canonicalize_dir(path) if path == path.strip() else ""
    if not real or not _work_dir_allowed(real, roots):
        raise refused
    return real
