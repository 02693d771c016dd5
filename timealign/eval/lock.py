"""One evaluation at a time per output folder: `<out>/.eval.lock`, the file lock data prep uses (filelock).

Two evaluations into one `out=` would both generate every sample (each reads the cache before the other wrote it)
and append to the same cache files. The second one stops at once, before loading a model, with `EvaluationBusy`
(exit 2) naming the folder and the lock. The lock is an OS lock on the file (released when the process ends, even
killed), so a lock file left behind never blocks a later run.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from timealign.config import RecipeError

LOCK_NAME = ".eval.lock"


class EvaluationBusy(RecipeError):
    """Another evaluation holds the output folder's lock."""


def lock_path(out: str | Path) -> Path:
    return Path(out) / LOCK_NAME


@contextlib.contextmanager
def out_lock(out: str | Path):
    """Hold `<out>/.eval.lock` (creating `out`) for the block; `EvaluationBusy` when another process holds it."""
    from filelock import FileLock, Timeout

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path(out)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise EvaluationBusy(
            f"another evaluation is writing into {out} (it holds the lock {lock_path(out)}); "
            "wait for it to finish or pass another out="
        ) from None
    try:
        yield
    finally:
        lock.release()
