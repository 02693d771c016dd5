"""What a training run wrote into its output_dir: the only files timealign may later delete or replace there.

    files = WrittenFiles(output_dir)     # rank 0, when training starts: what is there now is not this run's
    files.record()                       # after each checkpoint save and at the end: new or changed files go
                                         # into the run's record

The record is the `written` block of `<output_dir>/timealign_run.json` (`timealign.train.output_dir` writes the
run's claim there first): `{relative path: [size, mtime_ns]}`. `overwrite_output_dir=true` deletes a file only
when it is listed with the size and modification time it still has (a file edited since is the user's); a model
card replaces a README.md only when timealign wrote it (`card_may_replace`). The prepared data (`data/`) and the
base model's evaluation (`eval-base/`) are kept whatever happens, and are not listed. An export
(`timealign.train.export`) lists its files the same way in `<out>/timealign_run.json` (no claim, no recipe): its
`overwrite=true` replaces those files only.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

RUN_FILE = "timealign_run.json"
WRITTEN = "written"
KEPT = ("data", "eval-base")  # never deleted: prepared data (keyed by fingerprint), the base model's evaluation
# One training at a time in output_dir (timealign.train.run_lock): its lock file and the holder's name. Neither is
# any run's output: left out of the record, never deleted, and no sign that the folder is a user's.
RUN_LOCK, RUN_LOCK_HOLDER = ".train.lock", ".train.lock.json"
TEMPORARY = re.compile(r"^\..+\.tmp(-.*)?$")  # timealign's whole-or-absent writes, left by a killed process
CARD_BLOCK = re.compile(r"^timealign:\s*$", re.MULTILINE)  # the model card's metadata block (card_facts.CARD_KEY)


def signatures(out: str | Path) -> dict[str, list[int]]:
    """{relative path: [size, mtime_ns]} of every file under `out`, less KEPT folders, the run record and lock."""
    root = Path(out)
    found = {}
    for folder, dirs, files in os.walk(root):  # symlinked folders are not entered
        here = Path(folder)
        if here == root:
            dirs[:] = [d for d in dirs if d not in KEPT]
        for name in files:
            path = here / name
            rel = path.relative_to(root).as_posix()
            if rel in (RUN_FILE, RUN_LOCK, RUN_LOCK_HOLDER) or path.is_symlink():
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed meanwhile (a temporary renamed into place)
                continue
            found[rel] = [stat.st_size, stat.st_mtime_ns]
    return found


def read_record(out: str | Path) -> dict | None:
    path = Path(out) / RUN_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def written_files(out: str | Path) -> dict[str, list[int]] | None:
    """The files the folder's run recorded writing; None when no record lists them (no run, or an older one)."""
    record = read_record(out)
    written = record.get(WRITTEN) if record else None
    return written if isinstance(written, dict) else None


def write_record(out: str | Path, record: dict) -> None:
    out = Path(out)
    tmp = out / f".{RUN_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, out / RUN_FILE)


def add_written(out: str | Path, files: dict[str, list[int]]) -> None:
    """Add `files` ({relative path: [size, mtime_ns]}) to the run record's `written` block (rank 0 only)."""
    record = read_record(out)
    if record is None or not files:
        return
    written = record.get(WRITTEN) if isinstance(record.get(WRITTEN), dict) else {}
    record[WRITTEN] = dict(sorted({**written, **files}.items()))
    write_record(out, record)


def record_files(out: str | Path, paths) -> None:
    """Record files this process just wrote under `out` (paths absolute or relative to `out`)."""
    root = Path(out)
    files = {}
    for path in paths:
        path = Path(path) if Path(path).is_absolute() else root / path
        if path.is_file():
            stat = path.stat()
            files[path.relative_to(root).as_posix()] = [stat.st_size, stat.st_mtime_ns]
    add_written(root, files)


def record_evaluation(folder: str | Path) -> None:
    """An evaluation's files in `<output_dir>/eval` join the record of the run that owns output_dir, so that
    `overwrite_output_dir=true` removes them with the rest of that run (an evaluation elsewhere is nobody's run)."""
    folder = Path(folder).resolve()
    root = folder.parent
    if written_files(root) is None:
        return
    paths = [Path(here) / name for here, _, names in os.walk(folder) for name in names]  # links to folders not entered
    record_files(root, [p for p in paths if not p.is_symlink()])


_BASELINES: dict[Path, dict] = {}  # output_dir -> its files when this process claimed it


def note_baseline(out: str | Path) -> None:
    """The folder's files now (`timealign.train.output_dir.claim_output_dir`, after the claim): the run's
    `WrittenFiles` records what appears or changes from here on, e.g. lengths.json written before training."""
    _BASELINES[Path(out).resolve()] = signatures(out)


class WrittenFiles:
    """Records the files that appear or change under output_dir between two looks (one process: rank 0), from the
    folder as this process claimed it (`note_baseline`), else as it is now."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        baseline = _BASELINES.pop(self.out.resolve(), None)
        self.seen = signatures(self.out) if baseline is None else baseline

    def record(self) -> None:
        now = signatures(self.out)
        add_written(self.out, {rel: sig for rel, sig in now.items() if self.seen.get(rel) != sig})
        self.seen = now


def _run_roots(path: Path) -> list[Path]:
    """The run folders whose record may list `path`: its folder, and the output_dir around a checkpoint-N."""
    return [root for root in (path.parent, path.parent.parent) if (root / RUN_FILE).is_file()]


def _listed_as_is(path: Path) -> bool | None:
    """Whether the runs that record their files here list `path` as it is now; None when no run records them."""
    stat = path.stat()
    records = [(root, written_files(root)) for root in _run_roots(path)]
    records = [(root, written) for root, written in records if written is not None]
    if not records:
        return None
    return any(
        written.get(path.relative_to(root).as_posix()) == [stat.st_size, stat.st_mtime_ns] for root, written in records
    )


def note_written(path: str | Path) -> None:
    """Record a file timealign just wrote (a model card) in the record of the run folder it is in, if any."""
    path = Path(path)
    roots = _run_roots(path)
    if roots and path.is_file():
        record_files(roots[0], [path])


def card_may_replace(path: str | Path) -> bool:
    """A model card may be written at `path` (a README.md): none is there, or timealign wrote the one there: the
    record of the run folder it is in lists it as it is now, or, where no run records its files (an export, a
    folder of an older timealign), it carries the card's `timealign:` metadata block. A card edited since, or left
    by a run that overwrite_output_dir replaced, is the user's."""
    path = Path(path)
    if not path.exists():
        return True
    if not path.is_file() or path.is_symlink():
        return False
    as_written = _listed_as_is(path)
    if as_written is not None:
        return as_written
    try:
        head = path.read_text(errors="replace")[:20000]
    except OSError:
        return False
    return head.startswith("---") and bool(CARD_BLOCK.search(head.split("\n---", 1)[0]))


SHOWN = 12  # entries named in a message


def foreign_entries(out: str | Path, owned) -> list[str]:
    """The names of the entries of folder `out` that show another use of it: all but timealign's temporaries and
    the entries `owned(path)` accepts as the writer's own (training: `timealign.train.output_dir`; evaluation:
    `timealign.eval.runs`). None when `out` is not a folder."""
    out = Path(out)
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if not TEMPORARY.match(p.name) and not owned(p))


def unowned_message(key: str, out: str | Path, entries: list[str], writes: str, overwrite: str = "") -> str:
    """The one line that refuses `key=out` (a folder holding `entries` that no timealign run wrote): `writes` says
    what the command would write there, `overwrite` which of its options does not change that."""
    shown = ", ".join(entries[:SHOWN]) + (f", ... ({len(entries)} entries)" if len(entries) > SHOWN else "")
    return (
        f"{key}={out} already holds files that no timealign run wrote ({shown}): {writes} among them, and timealign "
        f"neither deletes nor overwrites files it did not write{overwrite}. Choose an empty or new folder: "
        f"{key}=NEW_FOLDER"
    )


def foreign_card_message(path: str | Path) -> str:
    return (
        f"{path} was not written by timealign: the model card does not replace it. Move it elsewhere (the card "
        "is then written there), or write the model into a folder of its own"
    )
