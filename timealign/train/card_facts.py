"""What a trained folder's records say, for its model card (`timealign.train.model_card` renders them): the resolved
recipe, the prepared data's fingerprint, the run record (run_info.json, wandb_run.json), the epochs trained, the
previous card's `timealign` block, and one `EvalRow` per overall metric of every suite report in its `eval*/`
folders (a metric's interval read from the report's `intervals` block, as `timealign.eval.bootstrap` writes it).

`gather` collects them; for a `checkpoint-N` the run's records are read from the output_dir around it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from timealign.config.options import RecipeError
from timealign.config.tracking import RUN_INFO_FILE, TRAIN_LOG, TRAINING_RUN_FILE, run_folders
from timealign.render.checkpoint import CHECKPOINT_RECIPE

logger = logging.getLogger(__name__)

CARD_FILE = "README.md"
CARD_KEY = "timealign"  # the metadata block a rewrite reads back
PREPARED_MANIFEST = "manifest.json"


class ModelCardError(RecipeError):
    """The folder has no card to write (not a checkpoint); the message says what is missing."""


@dataclass
class EvalRow:
    suite: str
    metric: str
    value: Any
    interval: tuple[float, float] | None
    level: float | None
    n: Any
    where: str  # the eval folder, relative to the card's folder when inside it
    model: str  # "this model", or the checkpoint the report scored
    data: str = "unknown (the report names no data)"  # the report's data label (timealign.data.identity)
    fingerprint: str | None = None  # the report's data fingerprint
    split: str | None = None


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ModelCardError(f"{path}: not valid JSON ({err})") from None
    return value if isinstance(value, dict) else None


def _first_json(folder: Path, name: str) -> dict | None:
    for place in run_folders(folder):
        found = _read_json(place / name)
        if found is not None:
            return found
    return None


def previous_block(folder: Path) -> dict:
    """The `timealign` metadata block of the card already in `folder` (empty without one)."""
    path = folder / CARD_FILE
    if not path.is_file():
        return {}
    from huggingface_hub import ModelCard

    block = ModelCard.load(path).data.to_dict().get(CARD_KEY)
    return block if isinstance(block, dict) else {}


def recipe_dict(folder: Path, recipe=None) -> dict | None:
    """The resolved recipe as a dict: the given one, else the folder's timealign_recipe.yaml."""
    if recipe is not None:
        return recipe.to_dict() if hasattr(recipe, "to_dict") else dict(recipe)
    for place in run_folders(folder):
        path = place / CHECKPOINT_RECIPE
        if path.is_file():
            raw = yaml.safe_load(path.read_text())
            if not isinstance(raw, dict):
                raise ModelCardError(f"{path}: not a recipe (a YAML mapping)")
            return raw
    return None


def prepared_fingerprint(folder: Path, recipe: dict | None, data_dir=None) -> dict | None:
    """{kind, sha256, folder} of the prepared data the run trained on: `data_dir`, else the recipe's
    data.prepared_dir, else the one prepared folder under `<output_dir>/data/` (None when it cannot be told)."""
    from timealign.data.fingerprint import read_fingerprint

    candidates: list[Path] = []
    if data_dir is not None:
        candidates = [Path(data_dir)]
    elif recipe and (recipe.get("data") or {}).get("prepared_dir"):
        candidates = [Path(recipe["data"]["prepared_dir"])]
    else:
        kind = "dialogs" if (recipe or {}).get("task") == "sft" else "pairs"
        for place in run_folders(folder):
            found = sorted(p for p in (place / "data").glob(f"{kind}-*") if (p / PREPARED_MANIFEST).is_file())
            if found:
                if len(found) > 1:  # earlier runs' data beside this run's: the folder name does not say which
                    logger.warning(
                        "%s holds %d prepared-data folders; the card names none", place / "data", len(found)
                    )
                    return None
                candidates = found
                break
    for path in candidates:
        if (path / PREPARED_MANIFEST).is_file():
            kind = "dialogs" if (recipe or {}).get("task") == "sft" else "pairs"
            fingerprint = read_fingerprint(path, kind)
            if fingerprint is not None:
                return {"kind": fingerprint.kind, "sha256": fingerprint.sha256, "folder": path.name}
    return None


def metric_interval(report: dict, metric: str) -> tuple[tuple[float, float] | None, float | None]:
    """(interval, confidence level) of one overall metric, from the one block the evaluator writes
    (`timealign.eval.bootstrap`: `report["intervals"] = {"confidence": 0.95, "metrics": {metric: [low, high] |
    None}}`); (None, level) when the block gives this metric none, (None, None) without the block."""
    block = report.get("intervals")
    if not isinstance(block, dict):
        return None, None
    level = block.get("confidence") if isinstance(block.get("confidence"), (int, float)) else None
    metrics = block.get("metrics") if isinstance(block.get("metrics"), dict) else {}
    raw = metrics.get(metric)
    if isinstance(raw, (list, tuple)) and len(raw) == 2 and all(isinstance(v, (int, float)) for v in raw):
        return (float(raw[0]), float(raw[1])), level
    return None, level


def eval_rows(folder: Path, extra_dirs=()) -> list[EvalRow]:
    """One row per overall metric of every suite report in `folder/eval*/` and in `extra_dirs`. Floats always;
    counts (ints) only when the report gives them an interval."""
    dirs = [d for d in sorted(folder.glob("eval*")) if d.is_dir()] + [Path(d) for d in extra_dirs]
    rows: list[EvalRow] = []
    seen: set[Path] = set()
    for directory in dirs:
        if not directory.is_dir():
            raise ModelCardError(f"eval folder {directory}: no such folder")
        for path in sorted(directory.glob("*.json")):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            report = _read_json(path)
            if not report or not isinstance(report.get("overall"), dict) or "suite" not in report:
                continue  # not a suite report (a cache index, a summary)
            checkpoint = str(report.get("checkpoint") or "")
            this = bool(checkpoint) and Path(checkpoint).resolve() == folder.resolve()
            try:
                where = str(directory.resolve().relative_to(folder.resolve()))
            except ValueError:
                where = str(directory)
            overall = report["overall"]
            for key, value in overall.items():
                if key == "n" or isinstance(value, (bool, dict, list, str)):
                    continue
                interval, level = metric_interval(report, key)
                if isinstance(value, int) and interval is None:
                    continue  # a count (tp, tool_calls, ...): the table is for rates
                data = report.get("data") if isinstance(report.get("data"), dict) else {}
                rows.append(
                    EvalRow(
                        suite=str(report["suite"]),
                        metric=key,
                        value=value,
                        interval=interval,
                        level=level,
                        n=overall.get("n", data.get("samples")),
                        where=where,
                        model="this model" if this else (checkpoint or "?"),
                        data=data.get("label") or EvalRow.data,
                        fingerprint=data.get("fingerprint"),
                        split=data.get("split"),
                    )
                )
    return rows


def label_training_data(rows: list[EvalRow], fingerprint: dict | None, eval_split: str | None) -> list[EvalRow]:
    """Each row's data cell says whether it is the held-out split of the data the model was trained on; rows on the
    training data come first. Results on different data are never one row: every row carries its own data."""
    for row in rows:
        if fingerprint and row.fingerprint:
            same = row.fingerprint == fingerprint.get("sha256") and row.split == eval_split
            row.data += " (the training data's held-out split)" if same else " (not the training data)"
    order = {id(r): i for i, r in enumerate(rows)}
    return sorted(rows, key=lambda r: (not r.data.endswith("held-out split)"), order[id(r)]))


def _epochs_trained(folder: Path) -> float | None:
    """The last epoch the trainer logged (train_log.json beside the saved model), None without a log."""
    for place in run_folders(folder):
        path = place / TRAIN_LOG
        if path.is_file():
            try:
                log = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise ModelCardError(f"{path}: not valid JSON ({err})") from None
            epochs = [e["epoch"] for e in log if isinstance(e, dict) and isinstance(e.get("epoch"), (int, float))]
            return float(epochs[-1]) if epochs else None
    return None


def gather(
    folder: str | Path,
    recipe=None,
    *,
    data_dir=None,
    wandb_url: str | None = None,
    eval_dirs=(),
    exported_from: str | None = None,
    merged_from_adapter: bool | None = None,
    source: str | Path | None = None,
    title: str | None = None,
) -> dict:
    """Every fact the card of `folder` shows, from the arguments, the run's folder (`source`, default `folder`:
    an export reads the trained folder's records) and that folder's previous card (see the module doc)."""
    import timealign
    from timealign.train.tracking import git_revision

    folder = Path(folder)
    src = Path(source) if source is not None else folder
    previous = previous_block(src)
    raw = recipe_dict(src, recipe)
    if raw is None:
        raise ModelCardError(
            f"{src}: no {CHECKPOINT_RECIPE}: not a folder timealign trained (train/dpo.py, "
            "train/sft.py) or exported (train/export.py)"
        )
    overrides = getattr(recipe, "overrides", None)
    if overrides is None:
        overrides = previous.get("overrides", {})
    run_info = _first_json(src, RUN_INFO_FILE) or {}
    wandb = _first_json(src, TRAINING_RUN_FILE) or {}
    fingerprint = prepared_fingerprint(src, raw, data_dir) or previous.get("data_fingerprint")
    git = run_info.get("git") or previous.get("git")
    if git is None and recipe is not None:  # training is writing the card now: this checkout ran it
        git = git_revision()
    wandb_record = {k: wandb.get(k) for k in ("id", "name", "project", "entity", "group") if wandb.get(k)}
    wandb_record = wandb_record or dict(previous.get("wandb") or {})
    url = wandb_url or wandb_record.get("url")
    if not url and wandb_record.get("entity") and wandb_record.get("project") and wandb_record.get("id"):
        url = f"https://wandb.ai/{wandb_record['entity']}/{wandb_record['project']}/runs/{wandb_record['id']}"
    if url:
        wandb_record["url"] = url
    adapter = (folder / "adapter_config.json").is_file()
    if not adapter and not (folder / "config.json").is_file():  # mid-training: no model saved here yet
        adapter = bool((raw.get("lora") or {}).get("enabled"))
    return {
        "recipe": raw,
        "recipe_name": raw.get("name") or previous.get("recipe"),
        "source": getattr(recipe, "source", None) or previous.get("source"),
        "overrides": {str(k): str(v) for k, v in (overrides or {}).items()},
        "data_fingerprint": fingerprint,
        "git": git,
        "version": previous.get("version") if recipe is None and previous.get("version") else timealign.__version__,
        "wandb": wandb_record,
        "run_info": run_info,
        "epochs_trained": _epochs_trained(src),
        "adapter": adapter,
        "merged_from_adapter": bool(merged_from_adapter) or bool(previous.get("merged_from_adapter")),
        "exported_from": exported_from or previous.get("exported_from"),
        "evals": label_training_data(
            eval_rows(src, eval_dirs), fingerprint, (raw.get("data") or {}).get("eval_split")
        ),
        "folder": folder,
        "title": title or folder.name,
    }
