"""The evaluation output folder: every run kept, the latest one where callers look.

    <out>/runs/001/<suite>.json, report.md, run.json    one numbered folder per evaluation run, never overwritten
    <out>/runs/002/...
    <out>/latest -> runs/002                            symlink to the newest finished run
    <out>/<suite>.json, <out>/report.md                 copies of the newest finished run's files (the paths
                                                        eval/run.py always wrote: Makefile, tests, scripts read them)
    <out>/generations/<suite>.jsonl                     the generation cache, shared by the runs (eval.cache)

A run's folder is made when it starts (`run.json` says `"complete": false` until it finishes); the top-level copies
and `latest` move only when a run finishes, so a killed run leaves the previous run's files in place, its own
finished suites in its folder, and its generations in the cache, from which the next run resumes.

An evaluation writes only into a folder that is empty, new, or an evaluation's own (`check_out_folder`, before any
work): a folder holding anything else (a user's report.md, results, a model) is refused, as training refuses an
output_dir that no run wrote (`timealign.config.written.unowned_message`), and nothing in it changes. A top-level
`<suite>.json` or `report.md` is the evaluation's when it is a byte copy of a kept run's file: one edited since is
the user's.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from timealign.backends.cache import CACHE_SUBDIR
from timealign.config import RecipeError
from timealign.config.written import foreign_entries, unowned_message
from timealign.eval.lock import LOCK_NAME

RUNS_DIR = "runs"
LATEST = "latest"
RUN_FILE = "run.json"


def new_run_dir(out: Path) -> Path:
    """Create and return the next numbered run folder `<out>/runs/NNN` (a concurrent run gets the next number)."""
    runs = Path(out) / RUNS_DIR
    runs.mkdir(parents=True, exist_ok=True)
    number = max((int(p.name) for p in runs.iterdir() if p.name.isdigit()), default=0) + 1
    while True:
        folder = runs / f"{number:03d}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            number += 1


def write_run_info(run_dir: Path, **info) -> None:
    """`run.json`: what the run evaluated, when, and whether it finished."""
    path = run_dir / RUN_FILE
    current = json.loads(path.read_text()) if path.is_file() else {"run": f"{RUNS_DIR}/{run_dir.name}"}
    current.update(info)
    path.write_text(json.dumps(current, indent=1))


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _replace(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)  # readers see the old file or the new one, never half of one


def publish(out: Path, run_dir: Path, names: list[str]) -> None:
    """Copy the finished run's files (`names`, e.g. tictoc.json, report.md) to `<out>/` and point `<out>/latest`
    at the run."""
    out = Path(out)
    for name in names:
        _replace(run_dir / name, out / name)
    link, tmp = out / LATEST, out / f".{LATEST}.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(Path(RUNS_DIR) / run_dir.name)  # relative: the folder can be moved or copied whole
    os.replace(tmp, link)


class OutFolderInUse(RecipeError):
    """out= holds files that no evaluation wrote (exit code 2)."""


def _is_run_folder_list(folder: Path) -> bool:
    if not folder.is_dir() or folder.is_symlink():
        return False
    return all(p.is_dir() and p.name.isdigit() for p in folder.iterdir())


def _is_published_copy(path: Path) -> bool:
    """`<out>/<suite>.json` or `<out>/report.md` as `publish` left it: the same bytes as a kept run's file."""
    runs = path.parent / RUNS_DIR
    if not path.is_file() or path.is_symlink() or not _is_run_folder_list(runs):
        return False
    data = path.read_bytes()
    return any((run / path.name).is_file() and (run / path.name).read_bytes() == data for run in runs.iterdir())


def evaluation_owns(path: Path) -> bool:
    """Whether `path`, an entry of an eval output folder, is one an evaluation writes there (module docstring)."""
    name = path.name
    if name == LOCK_NAME:
        return path.is_file()
    if name == RUNS_DIR:
        return _is_run_folder_list(path)
    if name == LATEST:
        return path.is_symlink() and Path(os.readlink(path)).parent == Path(RUNS_DIR)
    if name == CACHE_SUBDIR:
        return path.is_dir() and not path.is_symlink()
    if name == "report.md" or name.endswith(".json"):
        return _is_published_copy(path)
    return False


def check_out_folder(out: str | Path) -> None:
    """Refuse (OutFolderInUse, nothing written) an `out` that holds entries no evaluation wrote."""
    entries = foreign_entries(out, evaluation_owns)
    if entries:
        writes = "the evaluation would write report.md, <suite>.json, runs/ and latest"
        raise OutFolderInUse(unowned_message("out", out, entries, writes))


def report_path(path: str | Path, suite: str = "tictoc") -> Path:
    """A suite report from what a user names: the JSON file itself, a run folder (`<out>/runs/002`), or an eval
    output folder (its `latest` run; else its top-level `<suite>.json`, as written before runs were kept)."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        for candidate in (path / LATEST / f"{suite}.json", path / f"{suite}.json"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(
            f"{path} holds no {suite} report ({suite}.json, {LATEST}/{suite}.json); pass the "
            "report file, or suite= for another suite"
        )
    raise FileNotFoundError(f"no such report or folder: {path}")
