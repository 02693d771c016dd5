"""TicToc data prep for offset-DPO: load a source, build margin-weighted pairs, split by scenario, save with a
manifest.

`prepare` (run by `train/dpo.py`, or `python data_prep/tictoc.py recipe=NAME out=DIR`) writes the folder
(`data.prepared_dir`); `load_prepared` reads it back:
    dataset/         datasets.DatasetDict saved with save_to_disk, one split per scenario split (train/test)
    manifest.json    counts per split, label and elapse level; rejects with reasons; the data settings used;
                     the data's fingerprint (`timealign.data.fingerprint`: settings, source hashes, format version);
                     with data.direct_answer=generate, `direct_answers`: who wrote them, how many came from the
                     training prompt, how many only without the tools, and every sample that fell back to
                     latest_tool_result with its reason (`timealign.data.generated_answers`)
    rejects.jsonl    every rejected record with its file, id and reason
    left_out.jsonl   (hub release only) every row its retention rule left out, with file, id, split and reason;
                     manifest.json `left_out` counts them per split and reason
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from timealign.config import DataSection, RecipeError
from timealign.config.disk import writing
from timealign.data.fingerprint import Fingerprint, check_loadable, data_fingerprint, seal
from timealign.data.records import LoadResult, MissingData, NoUsableData, load_saved_datasets, nothing_usable
from timealign.data.tictoc import annotated_records, load_annotated, load_v1
from timealign.data.tictoc_hub import RETENTION_RULE, left_out_counts
from timealign.data.tictoc_layout import PREFER_NO_TOOL, PREFER_TOOL, TicTocSample
from timealign.data.tictoc_pairs import build_pairs, manifest

logger = logging.getLogger(__name__)
SOURCES = ("synthetic", "v1", "annotated", "hub")


def load_samples(data: DataSection) -> LoadResult[TicTocSample]:
    """Samples (not pairs yet) from the configured source."""
    common = {"on_error": data.on_error, "unknown": data.unknown_scenarios, "assume_timezone": data.assume_timezone}
    if data.source == "synthetic":
        from timealign.data.synthetic import generate_annotated

        result = LoadResult()
        for offset, split in enumerate((data.train_split, data.eval_split)):
            swap = data.synthetic_sensitivity_swap if split == data.train_split else 0.0  # held-out: never
            records = generate_annotated(
                data.synthetic_trajectories,
                seed=data.seed + 1000 * offset,
                split=split,
                max_rounds=data.synthetic_max_rounds,
                sensitivity_swap=swap,
            )
            annotated_records(records, f"synthetic[{split}]", result, orientation="tool_high", **common)
        return result
    if not data.path:
        raise RecipeError(f"data.source={data.source} needs data.path (a folder, file or hub id)")
    if data.source == "v1":
        return load_v1(data.path, orientation=data.score_orientation, **common)
    if data.source == "annotated":
        return load_annotated(data.path, orientation=data.score_orientation, **common)
    if data.source == "hub":  # the release as published (timealign.data.hub): hub, v1 or annotated files
        from timealign.data.hub import load_tictoc_release

        return load_tictoc_release(data.path, orientation=data.score_orientation, **common)
    raise RecipeError(f"data.source={data.source!r} is not one of: {', '.join(SOURCES)}")


BALANCE_WITHIN = ("scenario", "split")


def balance_labels(rows: list[dict], seed: int, within: str = "scenario") -> tuple[list[dict], list[dict]]:
    """Keep equal prefer-Tool and prefer-noTool counts, subsampling the larger side (seeded). Returns (kept, dropped).

    `within="scenario"`: equal counts within every scenario. A model that ignores time then scores exactly chance on
    every training scenario, so whatever it learns has to come from the times; but a scenario with one label keeps
    nothing (on v1 train 12 of 18 scenarios go, every high-sensitivity sample 1-6 minutes old with them, so the kept
    pairs hold no case where the same gap means "call" for one tool and "answer" for another).
    `within="split"`: equal counts over the whole split, the larger side drawn from every (scenario, elapse level)
    cell in proportion to its size, so every scenario and gap keeps its share: the scenario (what goes stale) and the
    gap both carry signal, and the label prior over the split is still 50/50.
    """
    import random

    if within not in BALANCE_WITHIN:
        raise ValueError(f"data.balance_within must be one of {', '.join(BALANCE_WITHIN)}, got {within!r}")
    rng = random.Random(seed)
    keep_ids: set[int] = set()
    if within == "scenario":
        by_scenario: dict[str, dict[str, list[dict]]] = {}
        for row in rows:
            by_scenario.setdefault(row["scenario"], {PREFER_TOOL: [], PREFER_NO_TOOL: []})[row["label"]].append(row)
        for scenario in sorted(by_scenario):
            groups = by_scenario[scenario]
            n = min(len(groups[PREFER_TOOL]), len(groups[PREFER_NO_TOOL]))
            for label in (PREFER_TOOL, PREFER_NO_TOOL):
                keep_ids.update(id(r) for r in rng.sample(groups[label], n))
    else:
        by_label: dict[str, list[dict]] = {PREFER_TOOL: [], PREFER_NO_TOOL: []}
        for row in rows:
            by_label[row["label"]].append(row)
        n = min(len(v) for v in by_label.values())
        for label, members in by_label.items():
            keep_ids.update(id(r) for r in _proportional_sample(members, n, rng))
    kept = [r for r in rows if id(r) in keep_ids]
    dropped = [r for r in rows if id(r) not in keep_ids]
    return kept, dropped


def _proportional_sample(rows: list[dict], n: int, rng) -> list[dict]:
    """`n` of `rows`, each (scenario, elapse level) cell's count its proportional share (largest remainders, ties
    broken by cell name), the rows within a cell drawn by `rng`."""
    cells: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        cells.setdefault((str(row["scenario"]), int(row["elapse_level"])), []).append(row)
    total = len(rows)
    quotas = {cell: n * len(members) / total for cell, members in cells.items()}
    counts = {cell: int(q) for cell, q in quotas.items()}
    by_remainder = sorted(cells, key=lambda cell: (-(quotas[cell] - counts[cell]), cell))
    for cell in by_remainder[: n - sum(counts.values())]:
        counts[cell] += 1
    chosen: list[dict] = []
    for cell in sorted(cells):
        chosen += rng.sample(cells[cell], counts[cell])
    return chosen


VALIDATION = "validation"
VALIDATION_SEED = 0  # not data.seed: every training seed and configuration is chosen on the same trajectories


VALIDATION_BY = ("trajectory", "scenario")


def set_aside_validation(rows: list[dict], train_split: str, share: float, by: str = "trajectory") -> list[dict]:
    """Move about `share` of the train split into split VALIDATION, seeded by VALIDATION_SEED.

    `by="trajectory"`: about `share` of each scenario's trajectories (a trajectory's every gap level together, so no
    conversation is both trained on and scored); a scenario with one trajectory stays in train. The validation
    scenarios are then the training ones.
    `by="scenario"`: about `share` of the scenarios of each sensitivity class, whole (a class with one scenario keeps
    it in train), so validation asks what the test split asks: how stale does a tool the model was never trained on
    go.
    """
    import random

    if by not in VALIDATION_BY:
        raise ValueError(f"data.validation_by must be one of {', '.join(VALIDATION_BY)}, got {by!r}")
    rng = random.Random(VALIDATION_SEED)
    train = [r for r in rows if r["split"] == train_split]
    if by == "scenario":
        by_class: dict[str, set[str]] = {}
        for row in train:
            by_class.setdefault(str(row.get("sensitivity")), set()).add(row["scenario"])
        held: set[str] = set()
        for sensitivity in sorted(by_class):
            names = sorted(by_class[sensitivity])
            held.update(rng.sample(names, min(len(names) - 1, round(share * len(names)))))
        return [{**r, "split": VALIDATION} if r["split"] == train_split and r["scenario"] in held else r for r in rows]
    by_scenario: dict[str, list[str]] = {}
    for row in train:
        if row["id"] not in by_scenario.setdefault(row["scenario"], []):
            by_scenario[row["scenario"]].append(row["id"])
    chosen: set[str] = set()
    for scenario in sorted(by_scenario):
        ids = sorted(by_scenario[scenario])
        chosen.update(rng.sample(ids, min(len(ids) - 1, round(share * len(ids)))))
    return [{**r, "split": VALIDATION} if r["split"] == train_split and r["id"] in chosen else r for r in rows]


def prepare(data: DataSection, out_dir: str | Path, fingerprint: Fingerprint | None = None, generation=None) -> dict:
    """Run data prep and write the pair dataset into `out_dir` as it goes; returns the manifest.

    `fingerprint`: `data_fingerprint("pairs", data, generation=generation)` when the caller has it already.
    `generation`: the `AnswerGeneration` (timealign.data.generated_answers) that writes the direct answers, needed
    with data.direct_answer=generate. Training and evaluation go through `timealign.data.prepared`, which writes a
    temporary folder and renames it into place.
    """
    from datasets import Dataset, DatasetDict

    start = time.perf_counter()
    # before reading: the sources as loaded
    fingerprint = fingerprint or data_fingerprint("pairs", data, generation=generation)
    loaded = load_samples(data)
    margins = {PREFER_TOOL: data.margin_prefer_tool, PREFER_NO_TOOL: data.margin_prefer_no_tool}
    samples, strategy, answers = loaded.samples, data.direct_answer, None
    if strategy == "generate":
        from timealign.data.generated_answers import FALLBACK, generate_direct_answers

        if generation is None:
            raise ValueError(
                "data.direct_answer=generate needs the model that writes the answers: prepare through "
                "timealign.data.prepared (training, evaluation, data_prep/tictoc.py), or pass "
                "generation=AnswerGeneration.from_recipe(recipe)"
            )
        # pairs that min_margin drops need no answer
        kept = [s for s in samples if s.score is None or abs(s.score - 1.5) >= data.min_margin]
        answered, answers = generate_direct_answers(kept, data, generation)
        by_sample = {id(s): a for s, a in zip(kept, answered)}
        samples, strategy = [by_sample.get(id(s), s) for s in samples], FALLBACK
    pairs = build_pairs(
        samples, default_margins=margins, direct_answer=strategy, min_margin=data.min_margin, on_error=data.on_error
    )
    rows, rejects = pairs.samples, loaded.rejects + pairs.rejects
    dropped: list[dict] = []
    if data.validation_share > 0:
        rows = set_aside_validation(rows, data.train_split, data.validation_share, data.validation_by)
    if data.balance_train_labels:
        train = [r for r in rows if r["split"] == data.train_split]
        kept, dropped = balance_labels(train, data.seed, data.balance_within)
        rows = [r for r in rows if r["split"] != data.train_split] + kept
        logger.info(
            "balance_train_labels: kept %d of %d %s pairs (equal labels per %s)",
            len(kept),
            len(train),
            data.train_split,
            data.balance_within,
        )
    if not rows:
        where = f"data.path={data.path} (data.source={data.source})" if data.path else f"data.source={data.source}"
        why = (
            f": data.min_margin={data.min_margin} or data.balance_train_labels left none (lower or unset them)"
            if loaded.samples
            else ""
        )
        if loaded.left_out and not loaded.samples and not rejects:
            raise NoUsableData(
                f"{where}: no pairs: all {len(loaded.left_out)} rows are left out by the release's retention rule "
                f"({RETENTION_RULE}); point data.path at the data you meant"
            )
        raise nothing_usable("pairs", where, rejects, len(loaded.samples), why)
    splits = {}
    for split in sorted({r["split"] for r in rows}):
        splits[split] = Dataset.from_list([r for r in rows if r["split"] == split])
    out = Path(out_dir)
    info = manifest(rows, rejects)
    info["data"] = {k: getattr(data, k) for k in data.__dataclass_fields__}
    info["balance_dropped"] = len(dropped)
    if loaded.left_out:  # the hub release's retention rule (timealign.data.tictoc_hub), rows listed in left_out.jsonl
        info["left_out"] = left_out_counts(loaded.left_out)
    if answers is not None:
        info["direct_answers"] = answers
    info["fingerprint"] = fingerprint.to_dict()
    info["seconds"] = round(time.perf_counter() - start, 3)
    with writing(out, "prepared pairs"):  # a full disk: one line naming the folder
        out.mkdir(parents=True, exist_ok=True)
        DatasetDict(splits).save_to_disk(str(out / "dataset"))
        with open(out / "rejects.jsonl", "w", encoding="utf-8") as fh:  # ASCII escapes: ids may hold bad bytes
            fh.writelines(json.dumps(reject) + "\n" for reject in rejects)
        if loaded.left_out:
            with open(out / "left_out.jsonl", "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(row) + "\n" for row in loaded.left_out)
        (out / "manifest.json").write_text(json.dumps(info, indent=2))
        seal(out)  # the written files' hashes: a folder prepared from Python loads as the CLI's does (no warning)
    logger.info(
        "wrote %d pairs (%s) to %s", len(rows), ", ".join(f"{k}={v['pairs']}" for k, v in info["splits"].items()), out
    )
    if loaded.left_out:
        logger.info(
            "%d release rows left out by its retention rule (%s), listed in the prepared folder's left_out.jsonl",
            len(loaded.left_out),
            "; ".join(f"{k}: {v}" for k, v in info["left_out"]["by_split"].items()),
        )
    if rejects:  # data.on_error=skip: what was left out is worth a look
        logger.warning(
            "%d records rejected (data.on_error=skip), each with its reason in %s",
            info["rejects"],
            out / "rejects.jsonl",
        )
    return info


def load_prepared(prepared_dir: str | Path):
    """The DatasetDict written by `prepare` (refuses dialogs, another data format version, a folder without a
    fingerprint)."""
    check_loadable(prepared_dir, "pairs")
    path = Path(prepared_dir) / "dataset"
    if not path.exists():
        raise MissingData(f"{path}: no prepared dataset; run data prep first (python data_prep/tictoc.py ...)")
    return load_saved_datasets(Path(prepared_dir), "python data_prep/tictoc.py recipe=NAME")
