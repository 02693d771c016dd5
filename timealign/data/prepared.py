"""The prepared-data folder: where data prep writes and training/evaluation read, prepared once per job.

`ensure_prepared(recipe)` returns the folder that holds this recipe's data, preparing it first if needed. DPO
recipes get TicToc pairs (`timealign.data.pairs`), SFT recipes TIMER dialogs (`timealign.data.timer_prep`).

Which folder: `data.prepared_dir` when given, else `<output_dir>/data/<kind>-<fingerprint[:12]>`, where the
fingerprint (`timealign.data.fingerprint`) covers the data settings, the source files' content and
`DATA_FORMAT_VERSION`.

Once per job, whatever the launcher: only the job's global rank 0 prepares (the rank its launcher set:
`timealign.config.cli.launcher_rank`; under torchrun on CPU accelerate calls every rank "main"). It takes a file lock
next to the folder (`.<name>.lock`), prepares into a temporary sibling (`.<name>.tmp-<host>-<pid>`) and renames that
into place, so the folder appears complete or not at all. The other ranks, on any node of a shared filesystem, wait for
the folder to hold the wanted fingerprint (`data.prep_timeout`). Two jobs on one folder: the lock serializes them and
the second checks the first's fingerprint. With `data.direct_answer=generate` rank 0 also generates the direct answers
here (`timealign.data.generated_answers`, cached in `generations/` beside the folder, so a killed prep resumes); a
large set is better prepared beforehand with data_prep/tictoc.py than while the other ranks wait.

Never silent reuse. A folder is used only when its fingerprint equals this run's:
- the default folder is keyed by the fingerprint, so other settings or changed source files simply get a folder
  of their own, prepared anew;
- an explicit `data.prepared_dir` that holds other data stops the run (PreparedDataError, exit code 2) with each
  differing setting's prepared and wanted value and the ways out. An explicit folder says "train on this data":
  preparing something else beside it would train on data the user did not point at (say a v1 folder written by
  data_prep/tictoc.py, then a training run that forgot data.source=v1 and would get synthetic data).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import time
from pathlib import Path

from timealign.config.cli import launcher_rank
from timealign.data.fingerprint import (
    DATA_FORMAT_VERSION,
    KIND_NAMES,
    MANIFEST,
    NOT_A_SETTING,
    PREP_COMMANDS,
    Fingerprint,
    PreparedDataError,
    data_fingerprint,
    read_fingerprint,
    seal,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DATA_FORMAT_VERSION",
    "MANIFEST",
    "PreparedDataError",
    "answer_generation",
    "ensure_prepared",
    "prepared_dir_for",
    "write_prepared",
]

POLL_SECONDS = 0.5
GENERATIONS = "generations"  # beside the prepared folders: the cache of generated direct answers


def kind_of(recipe, kind: str | None = None) -> str:
    return kind or ("dialogs" if recipe.task == "sft" else "pairs")


def answer_generation(recipe, kind: str | None = None):
    """The recipe's `AnswerGeneration` when its pairs' direct answers are generated (data.direct_answer=generate),
    else None."""
    if kind_of(recipe, kind) != "pairs" or recipe.data.direct_answer != "generate":
        return None
    from timealign.data.generated_answers import AnswerGeneration

    return AnswerGeneration.from_recipe(recipe)


def fingerprint_of(recipe, kind: str | None = None) -> Fingerprint:
    return data_fingerprint(kind_of(recipe, kind), recipe.data, recipe.timer, answer_generation(recipe, kind))


def prepared_dir_for(recipe, kind: str | None = None, fingerprint: Fingerprint | None = None) -> Path:
    """`data.prepared_dir`, else `<output_dir>/data/<kind>-<fingerprint[:12]>`."""
    if recipe.data.prepared_dir:
        return Path(recipe.data.prepared_dir)
    fingerprint = fingerprint or fingerprint_of(recipe, kind)
    return Path(recipe.resolved_output_dir()) / "data" / f"{fingerprint.kind}-{fingerprint.sha256[:12]}"


def lock_file(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.lock"


def mismatch_message(folder: Path, found: Fingerprint, wanted: Fingerprint, recipe_name: str) -> str:
    lines = found.differences(wanted) or [
        f"fingerprint {found.sha256[:12]} (prepared) -> {wanted.sha256[:12]} (this run)"
    ]
    command = PREP_COMMANDS[wanted.kind]
    ways = [
        f"  - prepare this run's data in a folder of its own: drop data.prepared_dir (the data then goes to "
        f"<output_dir>/data/{wanted.kind}-{wanted.sha256[:12]}) or point it at a new folder;",
        f"  - or replace the data in this folder: `{command} recipe={recipe_name} out={folder}` with this run's "
        "data.* overrides (or delete the folder);",
    ]
    changes = found.setting_changes(wanted)
    only_settings = (
        found.kind == wanted.kind
        and found.format_version == wanted.format_version
        and found.sources == wanted.sources
        and changes
        and NOT_A_SETTING not in {old for old, _ in changes.values()}
    )
    if only_settings:
        overrides = " ".join(f"{key}={_override(old)}" for key, (old, _) in changes.items())
        ways.append(f"  - or train/evaluate on the data as prepared: run with {overrides}")
    return (
        f"{folder} holds {KIND_NAMES[found.kind]} prepared from other data than this run asks for:\n"
        + "\n".join(f"  {line}" for line in lines)
        + "\nIt is not used. Either\n"
        + "\n".join(ways)
    )


def _override(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _ready(folder: Path, wanted: Fingerprint, recipe_name: str) -> bool:
    """True when `folder` holds the wanted data, False when it holds none yet; other data raises."""
    found = read_fingerprint(folder, wanted.kind)
    if found is None:
        return False
    if found.sha256 != wanted.sha256:
        raise PreparedDataError(mismatch_message(folder, found, wanted, recipe_name))
    return True


def _prepare_into(folder: Path, kind: str, data, timer, fingerprint: Fingerprint, generation=None) -> dict:
    if kind == "dialogs":
        from timealign.data.timer_prep import prepare_timer_data

        return prepare_timer_data(data, timer, folder, fingerprint=fingerprint)
    from timealign.data.pairs import prepare

    return prepare(data, folder, fingerprint=fingerprint, generation=generation)


def _acquire(lock, folder: Path, timeout: float) -> None:
    from filelock import Timeout

    try:
        lock.acquire(timeout=0)
        return
    except Timeout:
        logger.info("waiting for %s: another process is preparing %s", lock.lock_file, folder)
    try:
        lock.acquire(timeout=timeout)
    except Timeout as err:
        raise TimeoutError(
            f"waited {timeout:.0f} s (data.prep_timeout) for the lock {lock.lock_file}: another process kept "
            f"preparing data into {folder}. If no job is preparing it any more, delete {lock.lock_file}; else "
            "raise data.prep_timeout"
        ) from err


def write_prepared(
    kind: str,
    data,
    timer,
    folder: str | Path,
    *,
    fingerprint: Fingerprint | None = None,
    replace: bool = False,
    recipe_name: str = "NAME",
    generation=None,
) -> dict:
    """Prepare into a temporary sibling of `folder` and rename it into place, under the folder's file lock.

    `replace=False` (training, evaluation): a folder that already holds this fingerprint is reused, other data is
    refused. `replace=True` (the data-prep commands): whatever the folder holds is replaced. Returns the manifest
    (with `"reused": true` when nothing was prepared). `generation`: the recipe's `answer_generation` (needed with
    data.direct_answer=generate); its cache defaults to `generations/` beside `folder`, which an interrupted data
    prep leaves in place (the temporary folder is removed), so a rerun resumes the generations.
    """
    from filelock import FileLock

    folder = Path(folder)
    if generation is not None and generation.cache_dir is None:
        generation = generation.with_cache_dir(folder.parent / GENERATIONS)
    fingerprint = fingerprint or data_fingerprint(kind, data, timer, generation)
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_file(folder)))
    _acquire(lock, folder, data.prep_timeout)
    try:
        if not replace and _ready(folder, fingerprint, recipe_name):
            logger.info("reusing %s (data fingerprint %s)", folder, fingerprint.sha256[:12])
            return {"reused": True, **_manifest(folder)}
        if folder.exists() and not (folder / MANIFEST).is_file() and any(folder.iterdir()):
            raise PreparedDataError(
                f"{folder} holds files but no {MANIFEST}: not a prepared-data folder (or an "
                "interrupted data prep of an older timealign), so it is neither used nor "
                "replaced. Delete it or write the data elsewhere."
            )
        for stale in folder.parent.glob(f".{folder.name}.tmp-*"):  # left by a killed data prep; we hold the lock
            logger.info("removing %s (an interrupted data prep)", stale)
            shutil.rmtree(stale)
        tmp = folder.parent / f".{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}"
        logger.info(
            "preparing %s from data.source=%s into %s (data fingerprint %s)",
            KIND_NAMES[kind],
            data.source,
            folder,
            fingerprint.sha256[:12],
        )
        try:
            info = _prepare_into(tmp, kind, data, timer, fingerprint, generation)
            seal(tmp)  # the hashes of what was written: a later load finds any change (check_loadable)
            if not _publish(tmp, folder, replace):
                if not _ready(folder, fingerprint, recipe_name):  # other data raises in _ready
                    raise PreparedDataError(
                        f"{folder} was filled by another process (without the lock "
                        f"{lock_file(folder)}) and holds no {MANIFEST}; delete it and run again"
                    )
                logger.info("%s appeared meanwhile with the same data fingerprint; using it", folder)
            else:
                logger.info("data prep done: %s", folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        return info
    finally:
        lock.release()


def _publish(tmp: Path, folder: Path, replace: bool) -> bool:
    """Rename `tmp` to `folder` (the rename itself replaces an empty `folder`); False when `folder` holds data
    and `replace` is off (a writer that ignored the lock got there first)."""
    try:
        os.rename(tmp, folder)
        return True
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        if not replace:
            return False
    aside = folder.parent / f".{folder.name}.tmp-old-{os.getpid()}"
    os.rename(folder, aside)
    os.rename(tmp, folder)
    shutil.rmtree(aside)
    return True


def _manifest(folder: Path) -> dict:
    import json

    return json.loads((folder / MANIFEST).read_text())


def _wait_for(folder: Path, wanted: Fingerprint, timeout: float, rank: int, recipe_name: str) -> None:
    start = time.monotonic()
    last_note = start
    while not _ready(folder, wanted, recipe_name):
        now = time.monotonic()
        if now - start > timeout:
            raise TimeoutError(
                f"rank {rank} waited {timeout:.0f} s (data.prep_timeout) for rank 0 to prepare {folder} (lock file "
                f"{lock_file(folder)}). See rank 0's log: did its data prep fail? On several nodes the folder must be "
                "on a filesystem every node shares. Raise data.prep_timeout if data prep takes longer."
            )
        if now - last_note > 60:
            logger.info("rank %d: still waiting for rank 0 to prepare %s", rank, folder)
            last_note = now
        time.sleep(POLL_SECONDS)


def ensure_prepared(recipe, kind: str | None = None) -> Path:
    """The folder holding this recipe's prepared data: rank 0 prepares it if needed, the other ranks wait for it.

    `kind`: "pairs" (TicToc offset-DPO pairs) or "dialogs" (TIMER SFT dialogs); default: from `recipe.task`.
    Raises PreparedDataError when `data.prepared_dir` holds other data (see the module docstring).
    """
    fingerprint = fingerprint_of(recipe, kind)
    folder = prepared_dir_for(recipe, fingerprint=fingerprint)
    rank = launcher_rank()
    if _ready(folder, fingerprint, recipe.name):
        return folder
    if rank != 0:
        logger.info("rank %d: waiting for rank 0 to prepare %s", rank, folder)
        _wait_for(folder, fingerprint, recipe.data.prep_timeout, rank, recipe.name)
        return folder
    if not recipe.data.prepared_dir and (folder.parent / MANIFEST).exists():
        logger.warning(
            "ignoring %s: data prepared by an older timealign (no fingerprint); delete it", folder.parent / MANIFEST
        )
    write_prepared(
        fingerprint.kind,
        recipe.data,
        recipe.timer,
        folder,
        fingerprint=fingerprint,
        recipe_name=recipe.name,
        generation=answer_generation(recipe, kind),
    )
    return folder
