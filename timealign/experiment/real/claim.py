"""An experiment-real output folder holds one command's run: the command writes only into an empty (or new) folder or
one holding its own run of the same command, and replaces there only the files it wrote.

    check_out(o)       # before any work: refuse out= in one line when it holds anything else
    claim_out(o)       # then, before writing anything: the folder's record
    note_outputs(out)  # after writing real.json, real.md and real.png (`timealign.experiment.real.outputs`)

The record, `<out>/timealign_experiment.json`, names the command (its options, less out=: a run, `rescore=`, `merge=`
or `parallel=` are all options) and the size and modification time of real.json, real.md and real.png as written
(`timealign.config.written.signatures`' form). A command into a folder:
- empty or new: claims it;
- holding the record of the same command: goes on there (a rerun: trained models are found trained by training's
  own claim, `timealign.train.output_dir`, evaluations resume from their generation caches, `timealign.eval.runs`);
  real.json, real.md and real.png are replaced only while they are as written (one edited since is the user's);
- holding the record of another command: refused, naming the options that differ;
- holding anything without a record (a user's files, a training or evaluation folder, a run of a timealign older
  than the record): refused, naming the entries.
Beside the record, the folder's own entries are eval/, models/ and runs/ (inside them each training and evaluation
claims its own folder) and the three files as written.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.written import TEMPORARY

RECORD = "timealign_experiment.json"
OUTPUTS = ("real.json", "real.md", "real.png")
FOLDERS = ("eval", "models", "runs")  # the runs' models and evaluations, and parallel= units (folders and logs)
SHOWN = 8  # entries or options named in a message


def command_of(o) -> dict:
    """The command a folder holds: every option but out= (as resolved: device, eval_backend, eval_batch_size)."""
    return {f.name: getattr(o, f.name) for f in fields(o) if f.name != "out"}


def read_record(out: Path) -> dict | None:
    try:
        record = json.loads((out / RECORD).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise RecipeError(f"out={out}: {RECORD} does not parse ({err}); it is not this experiment's folder: "
                          "choose an empty or new folder, out=NEW_FOLDER") from None  # fmt: skip
    return record if isinstance(record, dict) else {}


def signature(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def foreign(out: Path, record: dict | None) -> list[str]:
    """The entries of `out` that this experiment did not write (or that changed since it wrote them)."""
    written = (record or {}).get("written") or {}
    found = []
    for path in sorted(out.iterdir()):
        name = path.name
        if TEMPORARY.match(name) or (name == RECORD and record is not None):
            continue
        if record is not None and name in FOLDERS and path.is_dir() and not path.is_symlink():
            continue
        if record is not None and name in OUTPUTS and path.is_file() and not path.is_symlink():
            if written.get(name) == signature(path):
                continue
            found.append(f"{name} (changed since this experiment wrote it)")
            continue
        found.append(name + ("/" if path.is_dir() else ""))
    return found


def check_out(o) -> None:
    """Refuse out= (one line, nothing written) unless it is empty, new, or holds this very command's run."""
    out = Path(o.out)
    if out.exists() and not out.is_dir():
        raise RecipeError(f"out={o.out} is a file; give a folder (new or empty): out=NEW_FOLDER")
    if not out.is_dir():
        return
    record = read_record(out)
    if record is not None:
        theirs, mine = record.get("options") or {}, command_of(o)
        differ = [k for k in sorted(set(theirs) | set(mine)) if theirs.get(k) != mine.get(k)]
        if differ:
            shown = "; ".join(f"{k}={theirs.get(k, '<unset>')} there, {mine.get(k, '<unset>')} now"
                              for k in differ[:SHOWN]) + (" ..." if len(differ) > SHOWN else "")  # fmt: skip
            raise RecipeError(f"out={o.out} holds another experiment-real run ({RECORD}: {shown}): its files are "
                              "not replaced. Rerun with its options to go on there, or choose a new folder: "
                              "out=NEW_FOLDER")  # fmt: skip
    entries = foreign(out, record)
    if entries:
        shown = ", ".join(entries[:SHOWN]) + (f", ... ({len(entries)} entries)" if len(entries) > SHOWN else "")
        older = "" if record is not None else f"; no {RECORD}: no experiment-real run's folder, or an older one's"
        raise RecipeError(
            f"out={o.out} holds files this experiment did not write ({shown}{older}): it writes "
            f"{', '.join(OUTPUTS)} and {'/, '.join(FOLDERS)}/ there and neither deletes nor overwrites what it did "
            "not write. Choose an empty or new folder: out=NEW_FOLDER"
        )


def claim_out(o) -> None:
    """`check_out`, then the record (the outputs it lists stay listed: a rerun replaces them)."""
    check_out(o)
    out = Path(o.out)
    out.mkdir(parents=True, exist_ok=True)
    record = read_record(out) or {}
    write_record(out, {"command": "python -m timealign.experiment.real", "options": command_of(o),
                       "written": record.get("written") or {}})  # fmt: skip


def write_record(out: Path, record: dict) -> None:
    tmp = out / f".{RECORD}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    os.replace(tmp, out / RECORD)


def note_outputs(out: Path) -> None:
    """real.json, real.md and real.png as just written join the folder's record (when the folder has one)."""
    record = read_record(out)
    if record is None:
        return
    record["written"] = {**(record.get("written") or {}),
                         **{name: signature(out / name) for name in OUTPUTS if (out / name).is_file()}}  # fmt: skip
    write_record(out, record)
