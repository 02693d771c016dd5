"""TIMER SFT data prep: load the recipe's dialogs, validate them, save them with a manifest.

`prepare_timer_data` (run by `train/sft.py`, or `python data_prep/timelychat.py recipe=NAME out=DIR`) reads the
source named by `data.source` (synthetic | timelychat | dialogs | hub; loaders in `timealign.data.timelychat`) and
writes:
    dataset/         datasets.DatasetDict saved with save_to_disk: the dialogs, one split per data split
    manifest.json    counts, the target interval distribution over the paper's buckets, rejects, the settings used,
                     the data's fingerprint (`timealign.data.fingerprint`: settings, source hashes, format version)
    rejects.jsonl    every rejected record with its file, id and reason
`load_timer_prepared` reads the folder back.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.disk import writing
from timealign.data.fingerprint import Fingerprint, check_loadable, data_fingerprint, seal
from timealign.data.records import (
    LoadResult,
    MissingData,
    load_saved_datasets,
    nothing_usable,
    reject_count,
    reject_reasons,
)
from timealign.data.timelychat import TimerDialog, dialog_records, load_dialogs, load_timelychat
from timealign.render.intervals import interval_bucket

logger = logging.getLogger(__name__)

FORMAT = "timer-dialogs/1"
SOURCES = ("synthetic", "timelychat", "dialogs", "hub")


def load_timer_source(data, timer) -> LoadResult[TimerDialog]:
    """Dialogs from the recipe's data source (a `DataSection` and a `TimerSection`), in the splits
    `data.train_split` and `data.eval_split`."""
    names = {"train": data.train_split, "eval": data.eval_split}
    if data.source == "synthetic":
        from timealign.data.synthetic import generate_timelychat

        result = LoadResult()
        for split, n, seed in (
            (data.train_split, timer.synthetic_dialogs, data.seed),
            (data.eval_split, timer.synthetic_eval_dialogs, data.seed + 1000),
        ):
            records = generate_timelychat(n, seed=seed, split=split)
            dialog_records(
                records, f"synthetic[{split}]", split, layout="timelychat", on_error=data.on_error, result=result
            )
        return result
    if not data.path:
        raise RecipeError(f"data.source={data.source} needs data.path (a file, folder or hub id)")
    if data.source == "timelychat":
        return load_timelychat(data.path, data.on_error, names)
    if data.source == "dialogs":
        return load_dialogs(data.path, data.on_error, names)
    if data.source == "hub":  # the release as published (timealign.data.hub)
        from timealign.data.hub import load_timelychat_release

        return load_timelychat_release(data.path, data.on_error, names)
    raise RecipeError(f"data.source={data.source!r} is not one of: {', '.join(SOURCES)} (task sft)")


def manifest(dialogs: list[TimerDialog], rejects: list[dict]) -> dict:
    """Counts per split, the target interval buckets, and the rejects with their reasons."""
    splits: dict[str, dict] = {}
    for split in sorted({d.split for d in dialogs}):
        subset = [d for d in dialogs if d.split == split]
        buckets = Counter(interval_bucket(d.target_minutes) for d in subset)
        splits[split] = {
            "dialogs": len(subset),
            "with_instant_response": sum(1 for d in subset if d.instant_response),
            "turns_mean": round(sum(len(d.speakers) for d in subset) / len(subset), 3),
            "target_minutes_mean": round(sum(d.target_minutes for d in subset) / len(subset), 3),
            "target_interval_buckets": dict(sorted(buckets.items())),
        }
    return {
        "format": FORMAT,
        "dialogs": len(dialogs),
        "splits": splits,
        "rejects": reject_count(rejects),
        "reject_reasons": reject_reasons(rejects),
    }


def prepare_timer_data(data, timer, out_dir: str | Path, fingerprint: Fingerprint | None = None) -> dict:
    """Load, validate and save the dialogs into `out_dir` (see the module docstring); returns the manifest.

    `fingerprint`: `data_fingerprint("dialogs", data, timer)` when the caller has it already. Training goes
    through `timealign.data.prepared`, which writes a temporary folder and renames it into place.
    """
    from datasets import Dataset, DatasetDict

    start = time.perf_counter()
    fingerprint = fingerprint or data_fingerprint("dialogs", data, timer)  # before reading: the sources as loaded
    loaded = load_timer_source(data, timer)
    if not loaded.dialogs:
        where = f"data.path={data.path} (data.source={data.source})" if data.path else f"data.source={data.source}"
        raise nothing_usable("dialogs", where, loaded.rejects)
    splits = {}
    for split in sorted({d.split for d in loaded.dialogs}):
        rows = [d for d in loaded.dialogs if d.split == split]
        columns = {
            key: [getattr(d, key) for d in rows]
            for key in ("id", "speakers", "utterances", "minutes", "instant_response", "source", "split", "narrative")
        }
        splits[split] = Dataset.from_dict(columns)
    out = Path(out_dir)
    info = manifest(loaded.dialogs, loaded.rejects)
    info["data"] = {k: getattr(data, k) for k in data.__dataclass_fields__}
    info["timer"] = {k: getattr(timer, k) for k in timer.__dataclass_fields__}
    info["fingerprint"] = fingerprint.to_dict()
    info["seconds"] = round(time.perf_counter() - start, 3)
    with writing(out, "prepared dialogs"):  # a full disk: one line naming the folder
        out.mkdir(parents=True, exist_ok=True)
        DatasetDict(splits).save_to_disk(str(out / "dataset"))
        with open(out / "rejects.jsonl", "w", encoding="utf-8") as fh:  # ASCII escapes: ids may hold bad bytes
            fh.writelines(json.dumps(reject) + "\n" for reject in loaded.rejects)
        (out / "manifest.json").write_text(json.dumps(info, indent=2))
        seal(out)  # the written files' hashes: a folder prepared from Python loads as the CLI's does (no warning)
    logger.info(
        "wrote %d dialogs (%s) to %s",
        info["dialogs"],
        ", ".join(f"{k}={v['dialogs']}" for k, v in info["splits"].items()),
        out,
    )
    if loaded.rejects:  # data.on_error=skip: what was left out is worth a look
        logger.warning(
            "%d records rejected (data.on_error=skip), each with its reason in %s",
            info["rejects"],
            out / "rejects.jsonl",
        )
    return info


def load_timer_prepared(prepared_dir: str | Path):
    """The DatasetDict written by `prepare_timer_data` (refuses pairs, another data format version, a folder
    without a fingerprint)."""
    prepared = Path(prepared_dir)
    check_loadable(prepared, "dialogs")
    path = prepared / "dataset"
    if not path.exists():
        raise MissingData(
            f"{path}: no prepared dialogs; run data prep first (python data_prep/timelychat.py recipe=NAME out=DIR)"
        )
    return load_saved_datasets(prepared, "python data_prep/timelychat.py recipe=NAME")
