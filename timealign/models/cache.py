"""Where timealign builds its local models (`tiny`, `smol`, ...) and how: once, atomically, safe under several
processes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def default_cache_dir() -> Path:
    """Where the local models are built on first use: $TIMEALIGN_CACHE or ~/.cache/timealign."""
    return Path(os.environ.get("TIMEALIGN_CACHE", Path.home() / ".cache" / "timealign"))


def build_once(target: Path, build: Callable[[Path], object], marker: str) -> Path:
    """`target`, built by `build(staging_folder)` unless already complete (`marker`, a file the builder writes last,
    is present). The build goes to a folder of this process and is renamed into place (atomic), so several processes
    may race: the first rename wins and the others' copies, identical (fixed seeds, fixed inputs), are dropped."""
    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}-build-{os.getpid()}"
    try:
        build(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # our own half-built folder; the error goes on
        raise
    try:
        staging.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    return target
