"""An output folder belongs to one training run: a rerun resumes that run, says it is finished, or stops.

    claim_output_dir(recipe)   # train/dpo.py and train/sft.py `run`: after the launch check, before data prep

A run is its resolved recipe, less the keys a resumed run may change (`IGNORED`: `RESUME_IGNORED` of
`timealign.train.resume`, i.e. where things go, logging, saving and step counts), plus its data fingerprint
(`timealign.data.fingerprint`: data settings, the source files' content, the data format version). The first run
into a folder writes both to `<output_dir>/timealign_run.json` before any work. A later run into the same folder:

- the same run, finished (the final model's timealign_recipe.yaml equals this recipe, training length included):
  `AlreadyTrained`, nothing is done (exit 0). training.resume_from_checkpoint=false trains it again;
- the same run, unfinished: it goes on, resuming per training.resume_from_checkpoint (with a warning when that is
  unset while checkpoints are there: the run then starts over);
- another run (recipe or data differ), or a trained run without timealign_run.json (from before this check, or
  copied from elsewhere: what data it saw is not recorded): `OutputDirInUse` (exit 2) naming every difference
  (`key: saved -> now`) and the ways out: another output_dir, `overwrite_output_dir=true`, or the saved values;
- with `overwrite_output_dir=true` instead: the files that run recorded writing (`timealign.config.written`: the
  `written` block of its timealign_run.json, each with the size and modification time it had) are deleted and this
  run claims the folder. Kept: `data/` (prepared data, each folder keyed by its fingerprint), `eval-base/` (the
  base model's evaluation) and every file no run recorded (or edited since): top-level ones are named in the log;
  ones inside a checkpoint, `eval/` or `runs/` folder would mix with this run's, so the run stops before deleting
  anything, naming them. A run without a record of its files (no timealign_run.json, or an older timealign's) is
  never deleted: the user moves it, or trains elsewhere.

A folder that no run owns (no timealign_run.json) and that holds files (other than `data/` and `eval-base/`) is
refused, overwrite_output_dir or not: timealign deletes and overwrites only what it wrote. Choose an empty or new
output_dir.
A claim whose run left nothing trained (it stopped before its first checkpoint) is taken over with a log line.
Two trainings never claim the folder at once: the run holds its lock (`timealign.train.run_lock`, `.train.lock`)
from before the claim until it ends.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from timealign.config import RecipeError
from timealign.config.cli import launcher_rank
from timealign.config.secrets import is_secret_key, redact
from timealign.config.written import (
    KEPT,
    RUN_FILE,
    RUN_LOCK,
    RUN_LOCK_HOLDER,
    TEMPORARY,
    WRITTEN,
    note_baseline,
    signatures,
    write_record,
)
from timealign.config.written import foreign_entries as written_foreign_entries
from timealign.config.written import unowned_message as written_unowned_message
from timealign.data.fingerprint import Fingerprint
from timealign.data.prepared import fingerprint_of
from timealign.render.checkpoint import CHECKPOINT_RECIPE
from timealign.train.checkpoints import checkpoint_folders
from timealign.train.resume import RESUME_IGNORED

logger = logging.getLogger("timealign.train.output_dir")

IGNORED = tuple(RESUME_IGNORED) + ("overwrite_output_dir",)
# What a finished run may still differ in: the training length decides which model the folder holds.
LENGTH_KEYS = ("training.max_steps", "training.num_train_epochs")
COMPLETE_IGNORED = tuple(k for k in IGNORED if k not in LENGTH_KEYS)
FALSE_WORDS = ("", "false", "no", "none", "null", "0", "off")  # training.resume_from_checkpoint: start over

RUN_DIRS = re.compile(r"^(checkpoint-\d+|eval|runs)$")  # what a file left there would mix with
WEIGHTS = re.compile(r"^(model|adapter_model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?$")
TRAINED_FILES = (CHECKPOINT_RECIPE, "run_info.json", "train_log.json", "preempted.json", "trainer_state.json")
SHOWN = 12


class OutputDirInUse(RecipeError):
    """output_dir holds another run; the message names the differences and the ways out (exit code 2)."""


class AlreadyTrained(Exception):
    """output_dir holds this very run, finished: nothing to train."""

    def __init__(self, output_dir: Path, message: str):
        super().__init__(message)
        self.output_dir = output_dir


@dataclass
class Claim:
    """What `claim_output_dir` found and did: `state` is fresh | same | replaced."""

    output_dir: Path
    state: str
    fingerprint: Fingerprint
    notes: list[str] = field(default_factory=list)


def _normal(tree) -> dict:
    return json.loads(json.dumps(tree, default=str))  # tuples -> lists, as the saved files hold them


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


MISSING = "<not set>"


def differences(saved: dict, now: dict, ignored: tuple[str, ...] = IGNORED) -> dict[str, tuple]:
    """{dotted key: (saved value, current value)} for every key that differs, leaving out `ignored` prefixes."""
    a, b = _flatten(_normal(saved)), _flatten(_normal(now))

    def skip(key: str) -> bool:
        return is_secret_key(key) or any(key == k or key.startswith(k + ".") for k in ignored)

    return {
        k: (a.get(k, MISSING), b.get(k, MISSING))
        for k in sorted(set(a) | set(b))
        if not skip(k) and a.get(k, MISSING) != b.get(k, MISSING)
    }


def _show(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _override(value) -> str | None:
    """`value` as a command-line override, or None when it cannot be written as one."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and value != MISSING and value.strip() and not any(c in value for c in " []{},'\""):
        return value
    return None


def _read_yaml(path: Path) -> dict | None:
    try:
        value = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        logger.warning("%s does not parse (%s)", path, str(err).splitlines()[0])
        return None
    return value if isinstance(value, dict) else None


def _read_claim(out: Path) -> dict | None:
    path = out / RUN_FILE
    if not path.is_file():
        return None
    try:
        claim = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise OutputDirInUse(
            f"{path} does not parse ({err}); delete it, or set overwrite_output_dir=true to replace "
            "that run, or use another output_dir"
        ) from err
    if not isinstance(claim, dict) or not isinstance(claim.get("recipe"), dict):
        raise OutputDirInUse(f"{path} is not a timealign run record; delete it or use another output_dir")
    return claim


def trained_entries(out: Path) -> list[str]:
    """What shows that something was trained into `out`: checkpoints, weights, the final recipe, run logs."""
    if not out.is_dir():
        return []
    found = [p.name for p in checkpoint_folders(out)]
    found += sorted(
        p.name for p in out.iterdir() if p.is_file() and (WEIGHTS.match(p.name) or p.name in TRAINED_FILES)
    )
    if (out / "eval").is_dir():
        found.append("eval")
    return found


def _finished_recipe(out: Path) -> dict | None:
    """The final model's recipe, when the folder holds a final model (written after the last step)."""
    if not (out / CHECKPOINT_RECIPE).is_file() or not any(WEIGHTS.match(p.name) for p in out.iterdir()):
        return None
    return _read_yaml(out / CHECKPOINT_RECIPE)


def _saved_recipe(out: Path) -> tuple[dict | None, str]:
    """A recipe that the folder's training left, and where it was read (final model, else newest checkpoint)."""
    final = out / CHECKPOINT_RECIPE
    if final.is_file():
        return _read_yaml(final), str(final)
    for folder in reversed(checkpoint_folders(out)):
        if (folder / CHECKPOINT_RECIPE).is_file():
            return _read_yaml(folder / CHECKPOINT_RECIPE), str(folder / CHECKPOINT_RECIPE)
    return None, ""


def _restart_asked(recipe) -> bool:
    training = recipe.training or {}
    if "resume_from_checkpoint" not in training:
        return False
    value = training["resume_from_checkpoint"]
    return value is None or value is False or str(value).strip().lower() in FALSE_WORDS


def _describe(out: Path, claim: dict | None, trained: list[str]) -> str:
    parts = []
    if claim:
        parts.append(f"recipe {claim['recipe'].get('name')!r}, started {claim.get('started', '?')}")
    checkpoints = [t for t in trained if t.startswith("checkpoint-")]
    if checkpoints:
        parts.append(f"{len(checkpoints)} checkpoints, newest {checkpoints[-1]}")
    if any(WEIGHTS.match(t) for t in trained):
        parts.append("a saved model")
    return "; ".join(parts) or ", ".join(trained[:SHOWN])


def conflict_message(
    out: Path, claim: dict | None, trained: list[str], diffs: dict[str, tuple], data_lines: list[str], saved_from: str
) -> str:
    what = _describe(out, claim, trained)
    if claim is None:
        head = (
            f"{out} holds a training run ({what}) without {RUN_FILE}: it comes from an older timealign or from "
            "elsewhere, so which data it was trained on is not recorded and it is not resumed."
        )
        if saved_from and diffs:
            head += f" Its recipe ({saved_from}) differs from this run's:"
        elif saved_from:
            head += f" Its recipe ({saved_from}) equals this run's."
    else:
        head = f"{out} holds another training run ({what}), not this one:"
    lines = [f"  {k}: {_show(old)} (saved) -> {_show(new)} (now)" for k, (old, new) in list(diffs.items())[:SHOWN]]
    if len(diffs) > SHOWN:
        lines.append(f"  ... and {len(diffs) - SHOWN} more")
    lines += [f"  {line}" for line in data_lines]
    ways = ["  - train into a folder of its own: output_dir=NEW_FOLDER;"]
    if claim is None:
        ways.append(
            f"  - or move that run's files out of {out} yourself (no record says which files it wrote, so "
            "overwrite_output_dir=true deletes nothing there)."
        )
    else:
        ways.append(
            f"  - or replace that run: overwrite_output_dir=true deletes the files it recorded writing "
            f"(checkpoints, model, logs) in {out} (its prepared data in {out / 'data'} is kept);"
        )
    overrides = [_override(old) for old, _ in diffs.values()]
    if claim is not None and diffs and not data_lines and all(o is not None for o in overrides):
        ways.append(
            "  - or go on with that run (it resumes, or says it is finished): give its values, "
            + " ".join(f"{k}={o}" for k, o in zip(diffs, overrides))
            + "."
        )
    return "\n".join([head, *lines, "It is neither resumed nor overwritten. Either", *ways])


def _data_lines(claim: dict, wanted: Fingerprint, diffs: dict) -> list[str]:
    """The data fingerprint's differences that the recipe's own differences do not explain (source files, format)."""
    raw = claim.get("data_fingerprint")
    if not isinstance(raw, dict):
        return [f"data fingerprint: not recorded (saved) -> {wanted.sha256[:12]} (now)"]
    try:
        found = Fingerprint.from_dict(raw)
    except (KeyError, TypeError) as err:
        return [f"data fingerprint: unreadable ({err!r}) (saved) -> {wanted.sha256[:12]} (now)"]
    if found.sha256 == wanted.sha256:
        return []
    same_settings = Fingerprint(
        kind=found.kind, settings=wanted.settings, sources=found.sources, format_version=found.format_version
    )
    lines = same_settings.differences(wanted) if found.kind == wanted.kind else []
    if not lines and not diffs:  # settings outside the recipe comparison (should not happen): say so anyway
        lines = [f"data fingerprint: {found.sha256[:12]} (saved) -> {wanted.sha256[:12]} (now)"]
    return [line.replace("(prepared)", "(saved)").replace("(this run)", "(now)") for line in lines]


def _run_owns(path: Path) -> bool:
    """KEPT folders, the run record itself (in a multi-process launch rank 0 writes it while the other ranks still
    look: a rank that read no claim must not then take rank 0's fresh record for a stranger's file) and the run's
    lock (`timealign.train.run_lock`: taken before the claim is written)."""
    return path.name in KEPT or path.name in (RUN_FILE, RUN_LOCK, RUN_LOCK_HOLDER)


def foreign_entries(out: Path) -> list[str]:
    """The entries of `out` that show another use of the folder (`timealign.config.written.foreign_entries`)."""
    return written_foreign_entries(out, _run_owns)


def unowned_message(out: Path, entries: list[str]) -> str:
    return written_unowned_message(
        "output_dir",
        out,
        entries,
        "training would write its checkpoints, model and README.md",
        " (overwrite_output_dir=true included)",
    )


def _removal(out: Path, claim: dict) -> tuple[list[str], list[str]]:
    """(files to delete, files left) for overwrite_output_dir: deleted are those the run recorded writing, still as
    it wrote them; raises OutputDirInUse, deleting nothing, when the record lists none or a file left would mix
    with the next run's (inside a checkpoint-N, eval or runs folder)."""
    written = claim.get(WRITTEN)
    if not isinstance(written, dict):
        raise OutputDirInUse(
            f"{out / RUN_FILE} lists no files that run wrote (an older timealign wrote it), so "
            f"overwrite_output_dir=true deletes nothing in {out}. Move or delete that run's files "
            "yourself, or train into a folder of its own: output_dir=NEW_FOLDER"
        )
    now = signatures(out)
    delete = sorted(rel for rel, sig in now.items() if written.get(rel) == sig)
    left = sorted(rel for rel in now if rel not in delete and not TEMPORARY.match(Path(rel).name))
    mixing = [rel for rel in left if "/" in rel and RUN_DIRS.match(rel.split("/", 1)[0])]
    if mixing:
        shown = ", ".join(mixing[:SHOWN]) + (f", ... ({len(mixing)} files)" if len(mixing) > SHOWN else "")
        raise OutputDirInUse(
            f"overwrite_output_dir=true: {out} also holds files no timealign run recorded writing "
            f"(or changed since): {shown}. They are not deleted, and a new run's checkpoints and "
            "evaluations would mix with them: move them out of the folder (nothing was deleted), or "
            "train into a folder of its own: output_dir=NEW_FOLDER"
        )
    return delete, left


def _remove_files(out: Path, delete: list[str]) -> None:
    folders = set()
    for rel in delete:
        (out / rel).unlink(missing_ok=True)
        folders.update(p for p in (out / rel).parents if out in p.parents)
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):  # deepest first
        leftovers = [p for p in folder.iterdir() if not TEMPORARY.match(p.name)] if folder.is_dir() else [1]
        if not leftovers:
            shutil.rmtree(folder)  # empty but for timealign's own torn temporaries


def _write_claim(out: Path, recipe, fingerprint: Fingerprint, written: dict | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "recipe": _normal(redact(recipe.to_dict())),
        "data_fingerprint": fingerprint.to_dict(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": socket.gethostname(),
        WRITTEN: dict(written or {}),
    }
    write_record(out, record)


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def refuse_unowned(out: Path) -> None:
    """A folder no run owns that holds files (a user's): OutputDirInUse, before this run writes anything there (its
    lock included)."""
    if _read_claim(out) is None and not [t for t in trained_entries(out) if t != "eval"] and foreign_entries(out):
        raise OutputDirInUse(unowned_message(out, foreign_entries(out)))


def claim_output_dir(recipe, kind: str | None = None) -> Claim:
    """Make `recipe.resolved_output_dir()` this run's (see the module docstring). Every rank decides the same from
    the same files; rank 0 alone deletes and writes, then all ranks meet (when a process group exists)."""
    out = Path(recipe.resolved_output_dir())
    wanted = fingerprint_of(recipe, kind)
    now = recipe.to_dict()
    rank0 = launcher_rank() == 0
    claim = _read_claim(out)
    trained = trained_entries(out)
    state, notes, delete, kept_written = "fresh", [], [], None
    if claim is None and not [t for t in trained if t != "eval"] and foreign_entries(out):
        raise OutputDirInUse(unowned_message(out, foreign_entries(out)))  # a user's folder, not a run's
    if claim is not None and not trained:
        kept_written = claim.get(WRITTEN) if isinstance(claim.get(WRITTEN), dict) else None
        recorded = claim.get("data_fingerprint")
        recorded = recorded.get("sha256") if isinstance(recorded, dict) else None
        if differences(claim["recipe"], now) or recorded != wanted.sha256:
            notes.append(f"{out / RUN_FILE}: another run claimed this folder but trained nothing; taking it over")
    elif claim is not None or trained:
        diffs = differences(claim["recipe"], now) if claim is not None else {}
        saved_from = ""
        if claim is None:
            saved, saved_from = _saved_recipe(out)
            diffs = differences(saved, now) if saved is not None else {}
        data_lines = _data_lines(claim, wanted, diffs) if claim is not None else []
        same = claim is not None and not diffs and not data_lines
        finished = _finished_recipe(out) if same else None
        complete = finished is not None and not differences(finished, now, COMPLETE_IGNORED)
        if same and complete and not recipe.overwrite_output_dir and not _restart_asked(recipe):
            raise AlreadyTrained(
                out,
                f"{out} holds this run's finished model (same recipe and data): nothing to "
                "train. To train it again here: training.resume_from_checkpoint=false or "
                "overwrite_output_dir=true; or give another output_dir",
            )
        if same and not complete:
            state = "same"
            checkpoints = checkpoint_folders(out)
            if checkpoints and "resume_from_checkpoint" not in (recipe.training or {}):
                logger.warning(
                    "%s holds checkpoints of this same run (newest %s) but training.resume_from_checkpoint "
                    "is unset: this run starts over and overwrites them. training.resume_from_checkpoint="
                    "auto continues it instead",
                    out,
                    checkpoints[-1].name,
                )
            elif _restart_asked(recipe):
                logger.info(
                    "%s: starting this run over (same recipe and data; training.resume_from_checkpoint=false)", out
                )
            else:
                logger.info("%s: continuing this run (same recipe and data)", out)
        elif same and _restart_asked(recipe) and not recipe.overwrite_output_dir:
            state = "same"
            logger.info(
                "%s holds this run's finished model; training it again (training.resume_from_checkpoint=false)", out
            )
        elif not recipe.overwrite_output_dir:
            raise OutputDirInUse(conflict_message(out, claim, trained, diffs, data_lines, saved_from))
        elif (out / ".git").exists():  # a checkout is never a run's folder to clear
            raise OutputDirInUse(
                f"{out} is a git checkout: overwrite_output_dir=true deletes nothing there. Train "
                "into a folder of its own: output_dir=NEW_FOLDER"
            )
        elif claim is None:
            raise OutputDirInUse(conflict_message(out, claim, trained, diffs, data_lines, saved_from))
        else:
            delete, left = _removal(out, claim)
            if left:
                logger.warning(
                    "overwrite_output_dir: left in %s (no run recorded writing them): %s",
                    out,
                    ", ".join(left[:SHOWN]) + (" ..." if len(left) > SHOWN else ""),
                )
            state = "replaced"
            notes.append(f"overwrite_output_dir=true: deleting the run in {out} ({_describe(out, claim, trained)})")
    for note in notes:
        logger.log(logging.WARNING if state == "replaced" else logging.INFO, note)
    if rank0:
        if state == "replaced":
            _remove_files(out, delete)
        if state != "same":
            _write_claim(out, recipe, wanted, kept_written)
        note_baseline(out)  # what is here now is not what this run writes (timealign.config.written)
    _barrier()
    return Claim(out, state, wanted, notes)
