"""Does the pipeline teach time? `make experiment` (`python -m timealign.experiment`).

Two controlled experiments on CPU, with the embedded tiny model and synthetic data, each scored on held-out data by
the same evaluator users run on real checkpoints (`timealign.eval.run.evaluate`):

1. Offset-DPO and the tool-call decision (TicToc, recipe `experiment-dpo`). The base is `tiny-agent-blind`: the
   random tiny model after a warm-up that teaches both actions (call the tool again, answer directly) with a coin
   flip that ignores time. Offset-DPO then trains on the 7 train-split scenarios and is scored (normalized alignment
   rate, NAR) on the 7 held-out scenarios. Each synthetic tool states how often its data changes (the only way a
   model without world knowledge can tell a held-out scenario's sensitivity), the reply carries the elapsed-time
   badge (`data.elapsed`), and half the train tools are given another sensitivity
   (`data.synthetic_sensitivity_swap`) so the scenario itself stops predicting it. Arms:
     offset         delta = |S - 1.5|, timestamps on (the method)
     no_timestamps  the same, trained and evaluated without timestamps: the control. It sees everything but time,
                    so anything it learns beyond chance is a shortcut; the train split is label-balanced per scenario
                    (`data.balance_train_labels`), so no label prior can help it either
     delta0         plain DPO (offset_scale = 0) on the same pairs: the offset's ablation
2. TIMER SFT and response timing (TimelyChat, recipe `experiment-timer`): the random tiny model, SFT on synthetic
   dialogs, scored on held-out synthetic dialogs (delay F1 and FPR with delayed = positive class, RMSLE in minutes).
   Arms: timer (lambda = 1, special tokens), lambda0 (L_time switched off), no_special_tokens (plain-text markers):
   the TIMER paper's Table 5 ablations.

Writes `<out>/summary.json` (the numbers), `<out>/report.md` (tables, targets, plots), `<out>/nar.png`,
`<out>/timing.png`, and every arm's evaluator report under `<out>/eval/`. Models go to `<out>/models/`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("timealign.experiment")

DPO_RECIPE = "experiment-dpo"
TIMER_RECIPE = "experiment-timer"
# The targets (never tuned here: a miss is reported with its cause, not hidden by moving the bar).
TARGETS = {"nar_after": 0.90, "timer_f1_after": 0.80}
# Held-out synthetic dialogs (timealign.data.synthetic_dialogs, split "heldout"), every turn scored.
TIMELYCHAT_OPTIONS = {"n": "60", "timing_turns": "all", "response_max_new_tokens": "24"}
# "Far lower" for the no-timestamp control: at most this NAR (chance is 0.5).
CONTROL_MAX_NAR = 0.65


@dataclass
class Arm:
    """One training run of an experiment: recipe overrides on top of the experiment's recipe."""

    name: str
    overrides: dict[str, str]
    description: str


DPO_ARMS = (
    Arm("offset", {}, "offset-DPO, delta = |S - 1.5|, with timestamps"),
    Arm("no_timestamps", {"data.timestamps": "false"}, "offset-DPO trained and evaluated without timestamps"),
    Arm("delta0", {"data.offset_scale": "0"}, "plain DPO (delta = 0), with timestamps"),
)
TIMER_ARMS = (
    Arm("timer", {}, "TIMER SFT, lambda = 1, special tokens"),
    Arm("lambda0", {"timer.lambda_time": "0"}, "lambda = 0 (no loss on the interval tokens)"),
    Arm("no_special_tokens", {"timer.special_tokens": "false"}, "plain-text markers instead of special tokens"),
)


@dataclass
class Experiment:
    out: Path
    seed: int = 0
    parts: tuple[str, ...] = ("dpo", "timer")
    ablations: bool = True
    timings: dict[str, float] = field(default_factory=dict)

    # -- helpers ----------------------------------------------------------------------------------------------
    def _recipe(self, name: str, task: str, overrides: dict[str, str]):
        from timealign.config import load_recipe

        merged = {"data.seed": str(self.seed), "training.seed": str(self.seed), **overrides}
        return load_recipe(name, merged, task=task)

    def _timed(self, key: str, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.timings[key] = round(time.perf_counter() - start, 1)
            logger.info("%s: %.1f s", key, self.timings[key])

    def _evaluate(self, recipe, checkpoint: str, suite: str, tag: str, **kwargs) -> dict:
        from timealign.eval.run import evaluate

        return evaluate(recipe, checkpoint, [suite], self.out / "eval" / tag, **kwargs)[suite]

    # -- 1. offset-DPO ----------------------------------------------------------------------------------------
    def run_dpo(self) -> dict:
        from timealign.data.prepare import load_prepared, prepare
        from timealign.tiny import resolve_model_path
        from timealign.train import dpo

        data_dir = self.out / "data" / "tictoc"
        common = {"data.prepared_dir": str(data_dir)}
        recipe = self._recipe(DPO_RECIPE, "dpo", common)
        manifest = self._timed("dpo/data_prep", prepare, recipe.data, data_dir)
        base = self._timed("dpo/base_model", resolve_model_path, recipe.model.name_or_path)
        before = {
            "timestamps": self._timed("dpo/eval_base", self._evaluate, recipe, base, "tictoc", "dpo-base"),
            "no_timestamps": self._timed("dpo/eval_base_no_timestamps", self._evaluate, recipe, base, "tictoc",
                                         "dpo-base-no-timestamps", timestamps=False),
        }
        test_rows = load_prepared(data_dir)[recipe.data.eval_split].to_list()
        arms = {}
        for arm in DPO_ARMS if self.ablations else DPO_ARMS[:2]:
            arm_recipe = self._recipe(DPO_RECIPE, "dpo", {**common, **arm.overrides,
                                                          "output_dir": str(self.out / "models" / f"dpo-{arm.name}")})
            checkpoint = self._timed(f"dpo/train_{arm.name}", dpo.run, arm_recipe)
            report = self._timed(f"dpo/eval_{arm.name}", self._evaluate, arm_recipe, str(checkpoint), "tictoc",
                                 f"dpo-{arm.name}")
            arms[arm.name] = {"description": arm.description, "train": _train_summary(Path(checkpoint)),
                              **_tictoc_numbers(report), "by_cell": nar_by_cell(test_rows, report["samples"])}
        result = {
            "nar_before": before["timestamps"]["overall"]["nar"],
            "nar_before_no_timestamps": before["no_timestamps"]["overall"]["nar"],
            "nar_after": arms["offset"]["nar"],
            "nar_after_no_timestamps": arms["no_timestamps"]["nar"] if "no_timestamps" in arms else None,
            "base": {"checkpoint": recipe.model.name_or_path, "timestamps": _tictoc_numbers(before["timestamps"]),
                     "no_timestamps": _tictoc_numbers(before["no_timestamps"]),
                     "by_cell": nar_by_cell(test_rows, before["timestamps"]["samples"])},
            "best_scenario_blind_threshold": best_blind_threshold(test_rows),
            "arms": arms,
            "data": {"train_pairs": manifest["splits"]["train"]["pairs"],
                     "test_pairs": manifest["splits"]["test"]["pairs"],
                     "train_scenarios": manifest["splits"]["train"]["scenarios"],
                     "test_scenarios": manifest["splits"]["test"]["scenarios"],
                     "test_labels": manifest["splits"]["test"]["by_label"],
                     "balance_dropped": manifest.get("balance_dropped", 0)},
        }
        if "delta0" in arms:
            result["nar_after_delta0"] = arms["delta0"]["nar"]
        return result

    # -- 2. TIMER SFT -----------------------------------------------------------------------------------------
    def run_timer(self) -> dict:
        from timealign.train import sft

        arms, befores = {}, {}
        for arm in TIMER_ARMS if self.ablations else TIMER_ARMS[:1]:
            arm_recipe = self._recipe(TIMER_RECIPE, "sft", {
                **arm.overrides, "output_dir": str(self.out / "models" / f"timer-{arm.name}"),
                "data.prepared_dir": str(self.out / "data" / "timelychat")})
            suite_opts = {"timelychat": dict(TIMELYCHAT_OPTIONS)}
            base = self._timed(f"timer/base_{arm.name}", save_timer_base, arm_recipe,
                               self.out / "models" / f"timer-base-{arm.name}")
            befores[arm.name] = _timing_numbers(self._timed(
                f"timer/eval_base_{arm.name}", self._evaluate, arm_recipe, str(base), "timelychat",
                f"timer-base-{arm.name}", suite_options=suite_opts))
            checkpoint = self._timed(f"timer/train_{arm.name}", sft.run, arm_recipe)
            report = self._timed(f"timer/eval_{arm.name}", self._evaluate, arm_recipe, str(checkpoint), "timelychat",
                                 f"timer-{arm.name}", suite_options=suite_opts)
            arms[arm.name] = {"description": arm.description, "before": befores[arm.name],
                              "train": _train_summary(Path(checkpoint)), **_timing_numbers(report)}
        main = arms["timer"]
        return {
            "f1_before": main["before"]["f1"], "f1_after": main["f1"],
            "fpr_before": main["before"]["fpr"], "fpr_after": main["fpr"],
            "rmsle_before": main["before"]["rmsle"], "rmsle_after": main["rmsle"],
            "rmsle_target_before": main["before"]["rmsle_target"], "rmsle_target_after": main["rmsle_target"],
            "arms": arms,
        }

    # -- all --------------------------------------------------------------------------------------------------
    def run(self) -> dict:
        start = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        summary: dict[str, Any] = {}
        if "dpo" in self.parts:
            summary["dpo"] = self.run_dpo()
        if "timer" in self.parts:
            summary["timer"] = self.run_timer()
        summary["targets"] = check_targets(summary)
        summary["settings"] = {"seed": self.seed, "parts": list(self.parts), "ablations": self.ablations,
                               "recipes": {"dpo": DPO_RECIPE, "timer": TIMER_RECIPE}, "targets": TARGETS,
                               "control_max_nar": CONTROL_MAX_NAR, "machine": _machine()}
        self.timings["total"] = round(time.perf_counter() - start, 1)
        summary["seconds"] = dict(self.timings)
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        write_plots(summary, self.out)
        (self.out / "report.md").write_text(markdown_report(summary, self.out))
        logger.info("wrote %s and %s", self.out / "summary.json", self.out / "report.md")
        return summary


def save_timer_base(recipe, out_dir: Path) -> Path:
    """The TIMER run's starting point as a checkpoint: the base model with the TIMER tokens added exactly as training
    adds them (new rows at the mean embedding), plus the recipe, so "before" is scored in the arm's own format."""
    import yaml

    from timealign.train.resume import CHECKPOINT_RECIPE
    from timealign.train.sft import build_model_and_tokenizer

    model, tokenizer, _ = build_model_and_tokenizer(recipe)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    return out_dir


def _final_gap_seconds(row: dict) -> float:
    """The gap the labels are defined on: final question time minus the message before it."""
    from timealign.rendering import parse_time

    messages = row["prompt"]
    return (parse_time(messages[-1]["time"]) - parse_time(messages[-2]["time"])).total_seconds()


def best_blind_threshold(rows: list[dict]) -> dict:
    """The best NAR any single gap threshold reaches on these rows ("call iff gap > T", the same T for every
    scenario), found by trying every cut between observed gaps. A model above it uses the scenario, not just the
    gap; the sensitivity-specific thresholds of the data reach NAR 1."""
    from timealign.eval.metrics import summarize

    gaps = [_final_gap_seconds(r) for r in rows]
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
    from timealign.eval.metrics import LEVEL_NAMES

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


def _tictoc_numbers(report: dict) -> dict:
    o = report["overall"]
    return {"nar": o["nar"], "attempt_rate_prefer_tool": o["attempt_rate_prefer_tool"],
            "attempt_rate_prefer_no_tool": o["attempt_rate_prefer_no_tool"], "n": o["n"],
            "by_sensitivity": {k: v["nar"] for k, v in report["by_sensitivity"].items()},
            "by_elapse_level": {k: {"n": v["n"], "nar": v["nar"], "attempt_rate_prefer_tool":
                                    v["attempt_rate_prefer_tool"], "attempt_rate_prefer_no_tool":
                                    v["attempt_rate_prefer_no_tool"]} for k, v in report["by_elapse_level"].items()}}


def _timing_numbers(report: dict) -> dict:
    t, o = report["timing"], report["overall"]
    return {"f1": t["f1"], "fpr": t["fpr"], "precision": t["precision"], "recall": t["recall"], "rmsle": t["rmsle"],
            "rmsle_target": t["rmsle_target"], "unparsed": t["unparsed"], "cases": t["cases"],
            "bleu2": o.get("bleu2"), "rouge_l": o.get("rouge_l")}


def _train_summary(checkpoint: Path) -> dict:
    """The last logged training metrics of a run (the log history `train_and_save` writes beside the model)."""
    from timealign.train.resume import TRAIN_LOG

    history = json.loads((checkpoint / TRAIN_LOG).read_text())
    logs = [h for h in history if "loss" in h]
    keep = ("loss", "rewards/accuracies", "rewards/margins", "loss_time", "loss_response", "epoch")
    return {"steps": history[-1].get("step"), **({k: logs[-1][k] for k in keep if k in logs[-1]} if logs else {})}


def check_targets(summary: dict) -> dict:
    out = {}
    if "dpo" in summary:
        d = summary["dpo"]
        out["nar_after"] = {"target": f">= {TARGETS['nar_after']}", "value": d["nar_after"],
                            "met": d["nar_after"] is not None and d["nar_after"] >= TARGETS["nar_after"]}
        control = d["nar_after_no_timestamps"]
        out["no_timestamp_control"] = {"target": f"<= {CONTROL_MAX_NAR} (far below the timestamped model)",
                                       "value": control, "met": control is not None and control <= CONTROL_MAX_NAR}
    if "timer" in summary:
        f1 = summary["timer"]["f1_after"]
        out["timer_f1_after"] = {"target": f">= {TARGETS['timer_f1_after']}", "value": f1,
                                 "met": f1 is not None and f1 >= TARGETS["timer_f1_after"]}
    return out


def _machine() -> dict:
    import os

    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "platform": platform.platform()}


# ------------------------------------------------------------------------------------------------ report


def _fmt(v, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell ("|S - 1.5|" would split the row)."""
    return text.replace("|", "\\|")


def write_plots(summary: dict, out: Path) -> list[Path]:
    """nar.png (NAR per DPO arm, before/after) and timing.png (F1, FPR, RMSLE per TIMER arm, before/after)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    written = []
    if "dpo" in summary:
        d = summary["dpo"]
        labels = ["base\n(timestamps)", "base\n(no timestamps)"] + [f"{name}" for name in d["arms"]]
        values = [d["nar_before"], d["nar_before_no_timestamps"]] + [a["nar"] for a in d["arms"].values()]
        fig = Figure(figsize=(7, 3.6))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        bars = ax.bar(labels, [v or 0 for v in values], color=["#999999", "#bbbbbb"] + ["#1f77b4"] * len(d["arms"]))
        ax.bar_label(bars, labels=[_fmt(v) for v in values], fontsize=8)
        ax.axhline(0.5, color="k", lw=0.8, ls=":", label="chance")
        ax.axhline(TARGETS["nar_after"], color="g", lw=0.8, ls="--", label="target")
        ax.axhline(d["best_scenario_blind_threshold"]["nar"], color="r", lw=0.8, ls="-.",
                   label="best single threshold")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("NAR (held-out scenarios)")
        ax.set_title("Offset-DPO on the tiny agent: tool-call alignment")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(out / "nar.png", dpi=110)
        written.append(out / "nar.png")
    if "timer" in summary:
        arms = summary["timer"]["arms"]
        fig = Figure(figsize=(9, 3.4))
        FigureCanvasAgg(fig)
        for k, (metric, title) in enumerate((("f1", "delay F1"), ("fpr", "FPR"), ("rmsle", "RMSLE (minutes)"))):
            ax = fig.add_subplot(1, 3, k + 1)
            names = list(arms)
            xs = range(len(names))
            before = [arms[n]["before"][metric] or 0 for n in names]
            after = [arms[n][metric] or 0 for n in names]
            ax.bar([x - 0.2 for x in xs], before, 0.4, label="before", color="#bbbbbb")
            ax.bar([x + 0.2 for x in xs], after, 0.4, label="after", color="#1f77b4")
            ax.set_xticks(list(xs), [n.replace("_", "\n") for n in names], fontsize=7)
            ax.set_title(title, fontsize=9)
            if metric == "rmsle":
                ax.set_ylim(bottom=0)
            else:
                ax.set_ylim(0, 1.05)  # rates: a flat zero would otherwise get a +-0.05 axis
            if k == 0:
                ax.axhline(TARGETS["timer_f1_after"], color="g", lw=0.8, ls="--")
                ax.legend(fontsize=7)
        fig.suptitle("TIMER SFT on the tiny model: response timing (held-out dialogs)", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "timing.png", dpi=110)
        written.append(out / "timing.png")
    return written


def markdown_report(summary: dict, out: Path) -> str:
    lines = ["# Does the pipeline teach time? (`make experiment`)", ""]
    targets = summary.get("targets", {})
    if targets:
        lines += ["| target | value | met |", "|---|---|---|"]
        for name, t in targets.items():
            lines.append(f"| {name}: {t['target']} | {_fmt(t['value'])} | {'yes' if t['met'] else '**no**'} |")
        lines.append("")
    if "dpo" in summary:
        d = summary["dpo"]
        data = d["data"]
        lines += [
            "## Offset-DPO: the tool-call decision (TicToc NAR, held-out scenarios)", "",
            f"Recipe `{DPO_RECIPE}`; base `{d['base']['checkpoint']}`; {data['train_pairs']} train pairs "
            f"({data['train_scenarios']} scenarios, label-balanced: {data['balance_dropped']} dropped), "
            f"{data['test_pairs']} test pairs ({data['test_scenarios']} held-out scenarios, labels "
            f"{data['test_labels']}).", "",
            "| model | NAR | attempt rate, prefer-Tool | attempt rate, prefer-noTool | NAR high / medium / low |",
            "|---|---|---|---|---|",
        ]
        rows = [("base, timestamps", d["base"]["timestamps"]), ("base, no timestamps", d["base"]["no_timestamps"])]
        rows += [(f"{name}: {_cell(a['description'])}", a) for name, a in d["arms"].items()]
        for label, m in rows:
            sens = m["by_sensitivity"]
            lines.append(f"| {label} | {_fmt(m['nar'])} | {_fmt(m['attempt_rate_prefer_tool'])} | "
                         f"{_fmt(m['attempt_rate_prefer_no_tool'])} | "
                         f"{' / '.join(_fmt(sens.get(s)) for s in ('high', 'medium', 'low'))} |")
        blind = d["best_scenario_blind_threshold"]
        lines += ["", f"Reference: the best single gap threshold for all scenarios (call iff gap > "
                  f"{blind['threshold_seconds']:.0f} s) reaches NAR {_fmt(blind['nar'])} on this test split; above it, "
                  "a model uses the scenario's sensitivity as well as the gap.", "",
                  "Attempt rate per held-out cell (sensitivity / elapse level; gold = share of prefer-Tool):", ""]
        cell_sources = [("base", d["base"].get("by_cell", {}))] + [(n, a.get("by_cell", {})) for n, a in d["arms"].items()]
        keys = list(cell_sources[0][1])
        if keys:
            lines += ["| cell | gold | " + " | ".join(n for n, _ in cell_sources) + " |",
                      "|---|---|" + "---|" * len(cell_sources)]
            for key in keys:
                gold = cell_sources[0][1][key]["gold_tool_rate"]
                lines.append(f"| {key} | {_fmt(gold, 2)} | " + " | ".join(
                    _fmt(cells.get(key, {}).get("attempt_rate"), 2) for _, cells in cell_sources) + " |")
        lines += ["", "![NAR per arm](nar.png)", ""]
    if "timer" in summary:
        lines += ["## TIMER SFT: when to respond (TimelyChat timing, held-out dialogs)", "",
                  f"Recipe `{TIMER_RECIPE}`; every turn scored (context turns: gold 0 minutes; delayed = positive).",
                  "", "| arm | F1 before -> after | FPR before -> after | RMSLE before -> after | "
                  "RMSLE target turn after | BLEU-2 after | ROUGE-L after |", "|---|---|---|---|---|---|---|"]
        for name, a in summary["timer"]["arms"].items():
            b = a["before"]
            lines.append(f"| {name}: {_cell(a['description'])} | {_fmt(b['f1'])} -> {_fmt(a['f1'])} | {_fmt(b['fpr'])} -> "
                         f"{_fmt(a['fpr'])} | {_fmt(b['rmsle'])} -> {_fmt(a['rmsle'])} | {_fmt(a['rmsle_target'])} "
                         f"| {_fmt(a['bleu2'], 2)} | {_fmt(a['rouge_l'], 2)} |")
        lines += ["", "![timing per arm](timing.png)", ""]
    secs = summary.get("seconds", {})
    if secs:
        lines += ["## Time", "", f"Total {secs.get('total', 0):.0f} s on {summary['settings']['machine']['cpus']} "
                  f"CPUs.", "", "| stage | seconds |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in secs.items() if k != "total"]
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m timealign.experiment",
        description="Tiny-model experiments that show (or refute) that offset-DPO teaches the tool-call decision to "
                    "follow elapsed time and TIMER SFT teaches response delays; CPU, about 15 minutes.",
        epilog="Writes OUT/summary.json, OUT/report.md and OUT/*.png. Recipes: recipes/experiment-dpo.yaml and "
               "recipes/experiment-timer.yaml.")
    parser.add_argument("--out", default="results/experiment", help="output folder (default: results/experiment)")
    parser.add_argument("--seed", type=int, default=0, help="data and training seed (default 0)")
    parser.add_argument("--parts", default="dpo,timer", help="comma list of dpo, timer (default: both)")
    parser.add_argument("--no-ablations", action="store_true",
                        help="skip delta = 0, lambda = 0 and no-special-tokens (method and control arms only)")
    args = parser.parse_args(argv)
    parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    unknown = sorted(set(parts) - {"dpo", "timer"})
    if unknown or not parts:
        parser.error(f"--parts takes dpo and/or timer, got {args.parts!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summary = Experiment(Path(args.out), seed=args.seed, parts=parts, ablations=not args.no_ablations).run()
    print(json.dumps({k: {m: v for m, v in summary[k].items() if not isinstance(v, dict)}
                      for k in ("dpo", "timer") if k in summary}, indent=1))
    for name, t in summary["targets"].items():
        print(f"target {name}: {t['target']}: {_fmt(t['value'])} -> {'met' if t['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
