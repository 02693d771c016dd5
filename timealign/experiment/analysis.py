"""Numbers from evaluator reports: NAR per cell, the best time-only threshold, targets, run facts."""

from __future__ import annotations

import itertools
import json
import platform
from pathlib import Path

from timealign.experiment.spec import CONTROL_MAX_NAR, TARGETS


def final_gap_seconds(row: dict) -> float:
    """The gap the labels are defined on: final question time minus the message before it."""
    from timealign.render.timefmt import parse_time

    messages = row["prompt"]
    return (parse_time(messages[-1]["time"]) - parse_time(messages[-2]["time"])).total_seconds()


def best_blind_threshold(rows: list[dict]) -> dict:
    """The best NAR any single gap threshold reaches on these rows ("call iff gap > T", the same T for every
    scenario), found by trying every cut between observed gaps. A model above it uses the scenario, not just the
    gap; the sensitivity-specific thresholds of the data reach NAR 1."""
    from timealign.suites.tictoc.metrics import summarize

    gaps = [final_gap_seconds(r) for r in rows]
    labels = [r["label"] for r in rows]
    cuts = sorted(set(gaps))
    candidates = [cuts[0] - 1.0] + [(a + b) / 2 for a, b in itertools.pairwise(cuts)] + [cuts[-1] + 1.0]
    best_nar, best_cut = -1.0, None
    for cut in candidates:
        nar = summarize(labels, [g > cut for g in gaps])["nar"]
        if nar is not None and nar > best_nar:
            best_nar, best_cut = nar, cut
    return {"nar": best_nar, "threshold_seconds": best_cut}


def nar_by_cell(rows: list[dict], samples: list[dict]) -> dict:
    """Attempt rate per (sensitivity, elapse level) cell, with the cell's gold label: where a model is right/wrong."""
    from timealign.suites.tictoc.metrics import LEVEL_NAMES

    cells: dict[str, dict] = {}
    for row, sample in zip(rows, samples, strict=True):
        if row["id"] != sample["id"] or row["elapse_level"] != sample["elapse_level"]:
            raise ValueError(f"evaluation samples are not in prepared-data order ({row['id']} vs {sample['id']})")
        if sample.get("tool_call") is None:
            continue
        key = f"{row['sensitivity']}/{LEVEL_NAMES[row['elapse_level']]}"
        cell = cells.setdefault(key, {"n": 0, "calls": 0, "prefer_tool": 0})
        cell["n"] += 1
        cell["calls"] += bool(sample["tool_call"])
        cell["prefer_tool"] += row["label"] == "prefer_tool"
    for cell in cells.values():
        cell["attempt_rate"] = cell["calls"] / cell["n"]
        cell["gold_tool_rate"] = cell["prefer_tool"] / cell["n"]
    return dict(sorted(cells.items()))


def bootstrap_intervals(report: dict) -> dict:
    """{metric: [low, high]} of a suite report's bootstrap block ({} when the report has none)."""
    return (report.get("intervals") or {}).get("metrics", {})


def tictoc_numbers(report: dict) -> dict:
    o = report["overall"]
    return {
        "intervals": bootstrap_intervals(report),
        "nar": o["nar"],
        "attempt_rate_prefer_tool": o["attempt_rate_prefer_tool"],
        "attempt_rate_prefer_no_tool": o["attempt_rate_prefer_no_tool"],
        "n": o["n"],
        "by_sensitivity": {k: v["nar"] for k, v in report["by_sensitivity"].items()},
        "by_elapse_level": {
            k: {
                "n": v["n"],
                "nar": v["nar"],
                "attempt_rate_prefer_tool": v["attempt_rate_prefer_tool"],
                "attempt_rate_prefer_no_tool": v["attempt_rate_prefer_no_tool"],
            }
            for k, v in report["by_elapse_level"].items()
        },
    }


def timing_numbers(report: dict) -> dict:
    t, o = report["timing"], report["overall"]
    return {
        "intervals": bootstrap_intervals(report),
        "f1": t["f1"],
        "fpr": t["fpr"],
        "precision": t["precision"],
        "recall": t["recall"],
        "rmsle": t["rmsle"],
        "rmsle_target": t["rmsle_target"],
        "unparsed": t["unparsed"],
        "cases": t["cases"],
        "delayed": t["delayed_gold"],
        "bleu2": o.get("bleu2"),
        "rouge_l": o.get("rouge_l"),
    }


def train_summary(checkpoint: Path) -> dict:
    """The last logged training metrics of a run (the log history `timealign.train.final_model` writes beside the
    model), and the Trainer's own `train_runtime` (seconds): the training's cost even when a rerun found the model
    already trained and measured only its own few seconds."""
    from timealign.config.tracking import TRAIN_LOG

    history = json.loads((checkpoint / TRAIN_LOG).read_text())
    logs = [h for h in history if "loss" in h]
    keep = ("loss", "rewards/accuracies", "rewards/margins", "loss_time", "loss_response", "epoch")
    runtime = {"train_runtime": history[-1]["train_runtime"]} if "train_runtime" in history[-1] else {}
    return {
        "steps": history[-1].get("step"),
        **({k: logs[-1][k] for k in keep if k in logs[-1]} if logs else {}),
        **runtime,
    }


def live_curve(checkpoint: Path) -> list[dict]:
    """The evaluation-while-training points of a run (`live_eval`, timealign.train.live_eval): one dict per
    evaluation, {"step": N, "nar": ..., ...} without the `eval_live/` prefix; [] when the run had none."""
    from timealign.config.tracking import TRAIN_LOG
    from timealign.train.live_eval import PREFIX

    history = json.loads((checkpoint / TRAIN_LOG).read_text())
    return [
        {"step": h["step"], **{k[len(PREFIX) :]: v for k, v in h.items() if k.startswith(PREFIX)}}
        for h in history
        if any(k.startswith(PREFIX) for k in h)
    ]


def check_targets(summary: dict) -> dict:
    out = {}
    if "dpo" in summary:
        d = summary["dpo"]
        out["nar_after"] = {
            "target": f">= {TARGETS['nar_after']}",
            "value": d["nar_after"],
            "met": d["nar_after"] is not None and d["nar_after"] >= TARGETS["nar_after"],
        }
        control = d["nar_after_no_timestamps"]
        out["no_timestamp_control"] = {
            "target": f"<= {CONTROL_MAX_NAR} (far below the timestamped model)",
            "value": control,
            "met": control is not None and control <= CONTROL_MAX_NAR,
        }
    if "timer" in summary:
        f1 = summary["timer"]["f1_after"]
        out["timer_f1_after"] = {
            "target": f">= {TARGETS['timer_f1_after']}",
            "value": f1,
            "met": f1 is not None and f1 >= TARGETS["timer_f1_after"],
        }
    return out


def machine_info() -> dict:
    import os

    import torch
    import transformers
    import trl

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,  # a result can depend on them (docs/experiment/real.md)
        "trl": trl.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "platform": platform.platform(),
    }
