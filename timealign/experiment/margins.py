"""Does the margin matter? `make experiment-margins` (`python -m timealign.experiment.margins`), issue 26.

TicToc's offset-DPO gives each pair the margin delta = |S - 1.5| from the annotators' mean score S (App. D.2). On
data with one label and a constant margin per pair (`make experiment`) the margin cannot matter; here it can. Every
synthetic trajectory and gap is judged by a simulated annotator panel (`timealign.data.synthetic.annotators`: the
survey's four answers, S their mean), so near the time rule's threshold S drifts toward 1.5 and the majority may
side against the rule. The data is written in the annotated layout and read back by the real loader
(data.source=annotated), so data prep, training and evaluation are the ones users run.

Design (recipe `experiment-dpo` on the time-blind tiny agent, one retrieval round, half the train tools' sensitivity
swapped, label-balanced train split):
- data variants: `confident` trains on the pairs the paper's retention rule keeps (S outside [0.5, 2.5]);
  `with_ambiguous` trains on the same trajectories with the ambiguous pairs kept as well (exact ties dropped);
- arms: dpo.margin_mode plain (plain DPO), offset (the paper's formula), log_offset (ODPO's log1p), weight (the
  paper's prose: the pair's loss times delta);
- seeds: each seed draws its own train trajectories, annotators and training order; the held-out test set (7
  held-out scenarios, S outside [0.5, 2.5], its own seed) is the same for every run, so any two runs pair up.
Scored by the evaluator (`timealign.eval.runner.evaluate`, NAR with its bootstrap interval); differences between
arms are paired bootstraps on the same held-out samples (`timealign.eval.bootstrap.paired_differences`): per seed,
and pooled over the seeds (units are (seed, sample); this treats the seeds as fixed, so the spread across seeds is
reported beside it).

Writes `<out>/summary.json`, `<out>/report.md`, `<out>/margins.png`, the data files under `<out>/data/`, every run's
evaluator report under `<out>/eval/` and the models under `<out>/models/`.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from timealign.config import RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.eval.bootstrap import fmt_interval
from timealign.experiment.spec import DPO_RECIPE, comma_choices, comma_seeds

logger = logging.getLogger("timealign.experiment.margins")

MODES = ("plain", "offset", "log_offset", "weight")
BASELINE_MODE = "plain"
# data variant -> where the ambiguous (0.5 <= S <= 2.5) records stay (timealign.data.synthetic.annotators.retain)
VARIANTS = {"confident": "none", "with_ambiguous": "train"}
TEST_SEED = 10_000  # the held-out set's seed: one test set for every run
MODE_COLORS = {"plain": "#7f7f7f", "offset": "#1f77b4", "log_offset": "#2ca02c", "weight": "#d62728"}


@dataclass
class MarginsOptions:
    out: str = opt("results/margins", "output folder: summary.json, report.md, margins.png, data/, eval/, models/")
    seeds: str = opt(
        "0,1,2",
        "comma list of seeds; each draws its own train trajectories, annotator answers and "
        "training order (the held-out set is the same for all)",
    )
    modes: str = opt(
        ",".join(MODES),
        "comma list of dpo.margin_mode arms: plain | offset | log_offset | weight; "
        "plain is the baseline every other arm is compared with",
    )
    variants: str = opt(
        ",".join(VARIANTS),
        "comma list of training data variants: confident (S outside [0.5, 2.5], "
        "the paper's retention rule) | with_ambiguous (the ambiguous pairs too)",
    )
    train_trajectories: int = opt(
        240, "train-split trajectories per seed (3 gaps each, before retention and label balancing)"
    )
    test_trajectories: int = opt(160, "held-out trajectories (3 gaps each; the confident ones are scored)")
    annotators: int = opt(5, "simulated annotators per sample (the paper: at least five)")
    annotator_noise: float = opt(
        1.5, "each annotator's judgment noise in units of ln(gap / threshold) (timealign/data/synthetic/annotators.py)"
    )
    scenario_disagreement: float = opt(0.5, "spread of the annotator noise across scenarios (0: all alike)")
    epochs: float = opt(
        5.0,
        "training epochs per run (training.num_train_epochs; recipe experiment-dpo trains 3, after which the held-out "
        "NAR of offset-DPO has flipped (about 125-165 steps of 8 pairs) but plain DPO's, with its smaller gradient "
        "at the start, may not have: 5 lets every arm reach its plateau, and the curve shows when each got there)",
    )
    curve_every: int = opt(
        25,
        "score held-out pairs (curve_samples of them) every N optimizer steps while training (live_eval.every_steps, "
        "the evaluator's "
        "code on the model in memory; also before the first step): each arm's NAR curve, so a difference in speed is "
        "told from a difference in where an arm ends; 0: off",
    )
    curve_samples: int = opt(
        160,
        "held-out pairs the curve scores (live_eval.max_samples: a seeded sample stratified by label, the same rows "
        "at "
        "every point and in every run); at or above the held-out set's size the curve's last point is the final "
        "evaluation itself",
    )
    max_steps: int = opt(
        -1, "cap on optimizer steps per run (training.max_steps; -1: the epochs decide); the CI test runs a few"
    )
    batch_size: int = opt(8, "pairs per optimizer step (training.per_device_train_batch_size, one process)")
    base: str = opt("tiny-agent-blind", "model.name_or_path of every arm (the CI test uses the random `tiny`)")
    resamples: int = opt(1000, "bootstrap resamples for the intervals and the paired differences")


COMMAND = Command(
    prog="python -m timealign.experiment.margins",
    summary="Does the margin matter? Offset-DPO's margin modes (none, offset, log_offset, weight) x seeds, trained "
    "on simulated-annotator data with and without the ambiguous pairs, scored on held-out scenarios with "
    "paired bootstrap differences; CPU. Writes summary.json, report.md and margins.png.",
    options=MarginsOptions,
    recipe="none",
)


# ------------------------------------------------------------------------------------------------------- data


def write_data(path: Path, variant: str, seed: int, opts: MarginsOptions) -> dict:
    """The annotated JSONL of one (variant, seed): its train trajectories and the shared held-out set, retained by
    the variant's rule; returns the counts."""
    from timealign.data.records import write_jsonl
    from timealign.data.synthetic.annotators import AnnotatorPanel, is_ambiguous, retain
    from timealign.data.synthetic.generator import generate_annotated

    def panel(panel_seed: int) -> AnnotatorPanel:
        return AnnotatorPanel(
            count=opts.annotators, noise=opts.annotator_noise, disagreement=opts.scenario_disagreement, seed=panel_seed
        )

    # The train split as the experiment recipe generates it: one round, half the tools' sensitivity swapped.
    train = generate_annotated(
        opts.train_trajectories, seed, split="train", max_rounds=1, sensitivity_swap=0.5, annotators=panel(seed)
    )
    test = generate_annotated(
        opts.test_trajectories, TEST_SEED, split="test", max_rounds=1, annotators=panel(TEST_SEED)
    )
    kept, counts = retain(train + test, VARIANTS[variant])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(kept, path)
    train_scenarios = {r["scenario"] for r in train}
    kept_train = [r for r in kept if r["scenario"] in train_scenarios]
    return {
        **counts,
        "train_records": len(kept_train),
        "test_records": len(kept) - len(kept_train),
        "train_ambiguous": sum(is_ambiguous(r["score"]) for r in kept_train),
        "generated_train_ambiguous": sum(is_ambiguous(r["score"]) for r in train),
    }


# --------------------------------------------------------------------------------------------------- analysis


def stacked_units(reports: dict[int, dict]):
    """One SampleUnits of several seeds' reports on the same held-out set: unit ids prefixed by the seed, so a
    paired bootstrap of two arms resamples (seed, sample) units and its NAR is the mean of the seeds' NARs."""
    from timealign.eval.bootstrap import suite_units
    from timealign.suites.units import SampleUnits

    parts = [(seed, suite_units(reports[seed], "tictoc")) for seed in sorted(reports)]
    first = parts[0][1]
    ids = tuple(f"seed{seed}/{i}" for seed, units in parts for i in units.ids)
    strata = tuple(s for _, units in parts for s in units.strata)
    counts = {
        k: np.concatenate([np.asarray(units.counts[k], dtype=float) for _, units in parts]) for k in first.counts
    }
    return SampleUnits(first.unit, ids, strata, counts, first.metrics, first.stratified_by, first.notes)


def difference_row(a: dict[int, dict], b: dict[int, dict], resamples: int) -> dict:
    """NAR(a) - NAR(b), paired on the same held-out samples: pooled over the seeds and per seed."""
    from timealign.eval.bootstrap import paired_differences, suite_units

    def nar_only(result: dict) -> dict:
        row = result["metrics"]["nar"]
        return {"difference": row["difference"], "interval": row["interval"], "outside_noise": row["outside_noise"]}

    pooled = paired_differences(stacked_units(b), stacked_units(a), resamples=resamples)
    by_seed = {
        str(seed): nar_only(
            paired_differences(suite_units(b[seed], "tictoc"), suite_units(a[seed], "tictoc"), resamples=resamples)
        )
        for seed in sorted(a)
    }
    diffs = [r["difference"] for r in by_seed.values() if r["difference"] is not None]
    return {
        **nar_only(pooled),
        "units": pooled["units"],
        "by_seed": by_seed,
        "seeds_positive": sum(d > 0 for d in diffs),
        "seeds_negative": sum(d < 0 for d in diffs),
    }


def nar_curve(model_dir: Path) -> dict[int, float]:
    """step -> held-out NAR while training (the run's live-eval points)."""
    from timealign.experiment.analysis import live_curve

    return {int(p["step"]): p["nar"] for p in live_curve(model_dir) if p.get("nar") is not None}


def curve_row(by_seed: dict[int, dict[int, float]]) -> dict:
    """An arm's curves: per step (scored in every seed) the mean NAR over the seeds, min and max, and per seed the
    first step at which NAR reached 0.75 (None: never)."""
    steps = sorted(set.intersection(*(set(c) for c in by_seed.values()))) if by_seed else []
    return {
        "steps": steps,
        "nar_mean": [statistics.fmean(by_seed[s][k] for s in by_seed) for k in steps],
        "nar_min": [min(by_seed[s][k] for s in by_seed) for k in steps],
        "nar_max": [max(by_seed[s][k] for s in by_seed) for k in steps],
        "first_step_at_075": {
            str(s): next((k for k in sorted(c) if c[k] >= CURVE_LEVEL), None) for s, c in sorted(by_seed.items())
        },
    }


CURVE_LEVEL = 0.75  # the "has learned the gap rule" line of the curves (make demo's bar)


def arm_row(reports: dict[int, dict], resamples: int) -> dict:
    """An arm's NAR per seed (with the evaluator's interval), their mean with a pooled interval, and the spread."""
    from timealign.eval.bootstrap import bootstrap_intervals

    nars = {str(seed): reports[seed]["overall"]["nar"] for seed in sorted(reports)}
    values = list(nars.values())
    pooled = bootstrap_intervals(stacked_units(reports), resamples=resamples)["metrics"]["nar"]
    return {
        "nar_by_seed": nars,
        "interval_by_seed": {
            str(s): ((reports[s].get("intervals") or {}).get("metrics") or {}).get("nar") for s in sorted(reports)
        },
        "nar_mean": statistics.fmean(values),
        "nar_mean_interval": pooled,
        "seed_sd": statistics.stdev(values) if len(values) > 1 else None,
        "seed_min": min(values),
        "seed_max": max(values),
        "attempt_rate_prefer_tool": statistics.fmean(
            r["overall"]["attempt_rate_prefer_tool"] for r in reports.values()
        ),
        "attempt_rate_prefer_no_tool": statistics.fmean(
            r["overall"]["attempt_rate_prefer_no_tool"] for r in reports.values()
        ),
    }


# ----------------------------------------------------------------------------------------------------- runner


@dataclass
class MarginsExperiment:
    out: Path
    opts: MarginsOptions
    seeds: tuple[int, ...]
    modes: tuple[str, ...]
    variants: tuple[str, ...]

    def _recipe(self, variant: str, mode: str, seed: int):
        from timealign.config import load_recipe

        o = self.opts
        overrides = {
            "model.name_or_path": o.base,
            "data.source": "annotated",
            "data.path": str(self.out / "data" / f"{variant}-seed{seed}.jsonl"),
            "data.prepared_dir": str(self.out / "data" / "prepared" / f"{variant}-seed{seed}"),
            "data.seed": str(seed),
            "training.seed": str(seed),
            "training.num_train_epochs": str(o.epochs),
            "training.max_steps": str(o.max_steps),
            "training.per_device_train_batch_size": str(o.batch_size),
            "training.logging_steps": "1",
            "eval.bootstrap": str(o.resamples),
            "live_eval.every_steps": str(o.curve_every),
            "live_eval.max_samples": str(o.curve_samples),
            "output_dir": str(self.out / "models" / f"{variant}-{mode}-seed{seed}"),
        }
        return load_recipe(DPO_RECIPE, {**overrides, "dpo.margin_mode": mode}, task="dpo")

    def run(self) -> dict:
        from timealign.eval.runner import evaluate
        from timealign.experiment.analysis import machine_info, train_summary
        from timealign.train import dpo

        start = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        seconds: dict[str, float] = {}
        data = {
            v: {str(s): write_data(self.out / "data" / f"{v}-seed{s}.jsonl", v, s, self.opts) for s in self.seeds}
            for v in self.variants
        }
        for v in self.variants:  # every recipe loads (and refuses bad input) before the first training starts
            for m in self.modes:
                for s in self.seeds:
                    self._recipe(v, m, s)
        reports: dict[str, dict[str, dict[int, dict]]] = {v: {m: {} for m in self.modes} for v in self.variants}
        runs: dict[str, dict] = {}
        for s in self.seeds:  # seed-major: a cut-short run still has every arm for its first seeds
            for v in self.variants:
                for m in self.modes:
                    tag = f"{v}-{m}-seed{s}"
                    recipe = self._recipe(v, m, s)
                    t0 = time.perf_counter()
                    checkpoint = dpo.run(recipe)
                    t1 = time.perf_counter()
                    report = evaluate(recipe, str(checkpoint), ["tictoc"], self.out / "eval" / tag)["tictoc"]
                    seconds[tag] = round(time.perf_counter() - t0, 1)
                    reports[v][m][s] = report
                    runs[tag] = {
                        "variant": v,
                        "mode": m,
                        "seed": s,
                        "nar": report["overall"]["nar"],
                        "n": report["overall"]["n"],
                        "train": train_summary(Path(checkpoint)),
                        "curve": nar_curve(Path(checkpoint)),
                        "train_seconds": round(t1 - t0, 1),
                        "eval_seconds": round(time.perf_counter() - t1, 1),
                    }
                    logger.info("%s: NAR %.3f (%.0f s)", tag, report["overall"]["nar"], seconds[tag])
        r = self.opts.resamples
        arms = {v: {m: arm_row(reports[v][m], r) for m in self.modes} for v in self.variants}
        vs_baseline = {
            v: {
                m: difference_row(reports[v][m], reports[v][BASELINE_MODE], r)
                for m in self.modes
                if m != BASELINE_MODE
            }
            for v in self.variants
            if BASELINE_MODE in self.modes
        }
        ambiguous_effect = (
            {m: difference_row(reports["with_ambiguous"][m], reports["confident"][m], r) for m in self.modes}
            if set(VARIANTS) <= set(self.variants)
            else {}
        )
        curves = {
            v: {m: curve_row({s: runs[f"{v}-{m}-seed{s}"]["curve"] for s in self.seeds}) for m in self.modes}
            for v in self.variants
        }
        first = next(iter(next(iter(reports.values())).values()))[self.seeds[0]]
        seconds["total"] = round(time.perf_counter() - start, 1)
        summary: dict[str, Any] = {
            "settings": {
                "seeds": list(self.seeds),
                "modes": list(self.modes),
                "variants": list(self.variants),
                "options": {k: getattr(self.opts, k) for k in self.opts.__dataclass_fields__},
                "recipe": DPO_RECIPE,
                "test_seed": TEST_SEED,
                "baseline_mode": BASELINE_MODE,
                "machine": machine_info(),
            },
            "test_pairs": first["overall"]["n"],
            "test_labels": _labels(first),
            "data": data,
            "arms": arms,
            "vs_baseline": vs_baseline,
            "ambiguous_effect": ambiguous_effect,
            "curves": curves,
            "runs": runs,
            "seconds": seconds,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        write_plot(summary, self.out / "margins.png")
        (self.out / "report.md").write_text(markdown_report(summary))
        return summary


def _labels(report: dict) -> dict:
    from collections import Counter

    return dict(Counter(s["label"] for s in report.get("samples") or []))


# ----------------------------------------------------------------------------------------------------- output


def markdown_report(summary: dict) -> str:
    s = summary["settings"]
    lines = [
        "# Does the margin matter? (`make experiment-margins`)",
        "",
        f"Recipe `{s['recipe']}`, base `{s['options']['base']}`; seeds {s['seeds']}; {summary['test_pairs']} "
        f"held-out pairs (S outside [0.5, 2.5], labels {summary['test_labels']}), the same for every run.",
        "",
        "## Data per variant and seed",
        "",
        "| variant | seed | train records | of them ambiguous | ambiguous dropped | ties dropped |",
        "|---|---|---|---|---|---|",
    ]
    for v, by_seed in summary["data"].items():
        for seed, c in by_seed.items():
            lines.append(
                f"| {v} | {seed} | {c['train_records']} | {c['train_ambiguous']} | {c['ambiguous_dropped']} "
                f"| {c['ties_dropped']} |"
            )
    lines += [
        "",
        "## Held-out NAR per arm",
        "",
        "| variant | margin_mode | NAR per seed | mean [95% CI] | seed sd | attempt rate Tool / noTool |",
        "|---|---|---|---|---|---|",
    ]
    for v, by_mode in summary["arms"].items():
        for m, a in by_mode.items():
            per_seed = ", ".join(f"{x:.3f}" for x in a["nar_by_seed"].values())
            sd = "n/a" if a["seed_sd"] is None else f"{a['seed_sd']:.3f}"
            lines.append(
                f"| {v} | {m} | {per_seed} | {a['nar_mean']:.3f} {fmt_interval(a['nar_mean_interval'])} | {sd} | "
                f"{a['attempt_rate_prefer_tool']:.3f} / {a['attempt_rate_prefer_no_tool']:.3f} |"
            )

    def diff_table(title: str, rows: dict, label) -> None:
        nonlocal lines
        lines += [
            "",
            title,
            "",
            "| comparison | NAR difference (pooled) [95% CI] | outside noise | per seed | seeds +/- |",
            "|---|---|---|---|---|",
        ]
        for key, d in rows:
            per_seed = ", ".join(
                f"{x['difference']:+.3f} {fmt_interval(x['interval'])}" for x in d["by_seed"].values()
            )
            lines.append(
                f"| {label(key)} | {d['difference']:+.3f} {fmt_interval(d['interval'])} | {d['outside_noise']} | "
                f"{per_seed} | {d['seeds_positive']}/{d['seeds_negative']} |"
            )

    for v, rows in summary["vs_baseline"].items():
        diff_table(
            f"## Paired differences vs plain DPO (margin_mode plain), {v}", rows.items(), lambda m: f"{m} - plain"
        )
    curves = summary.get("curves") or {}
    if any(c["steps"] for by in curves.values() for c in by.values()):
        lines += [
            "",
            "## Learning curves: held-out NAR while training (mean over seeds [min, max])",
            "",
        ]
        for v, by_mode in curves.items():
            steps = next(iter(by_mode.values()))["steps"]
            shown = [k for i, k in enumerate(steps) if i % max(1, len(steps) // 8) == 0 or k == steps[-1]]
            lines += [
                f"{v}:",
                "",
                "| margin_mode | " + " | ".join(f"step {k}" for k in shown) + " | "
                f"first step at NAR >= {CURVE_LEVEL} per seed |",
                "|---" * (len(shown) + 2) + "|",
            ]
            for m, c in by_mode.items():
                at = {k: i for i, k in enumerate(c["steps"])}
                cells = [
                    f"{c['nar_mean'][at[k]]:.3f} [{c['nar_min'][at[k]]:.2f}, {c['nar_max'][at[k]]:.2f}]" for k in shown
                ]
                reached = ", ".join("never" if x is None else str(x) for x in c["first_step_at_075"].values())
                lines.append(f"| {m} | " + " | ".join(cells) + f" | {reached} |")
            lines.append("")
    if summary["ambiguous_effect"]:
        diff_table(
            "## Adding the ambiguous pairs (with_ambiguous - confident), per margin_mode",
            summary["ambiguous_effect"].items(),
            lambda m: m,
        )
    lines += [
        "",
        "Pooled: a paired bootstrap over (seed, held-out pair) units, resampled within each label; it "
        "treats the seeds as fixed, so read it with the per-seed column and the seed sd.",
        "",
        "![NAR per arm](margins.png)",
        "",
        f"Total {summary['seconds']['total']:.0f} s.",
    ]
    return "\n".join(lines) + "\n"


def write_plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(summary["arms"])
    modes = summary["settings"]["modes"]
    curves = summary.get("curves") or {}
    with_curves = any(c["steps"] for by in curves.values() for c in by.values())
    fig, axes = plt.subplots(1, 3 if with_curves else 2, figsize=(16.5 if with_curves else 11, 4.2))
    ax = axes[0]
    width = 0.8 / len(modes)
    for j, m in enumerate(modes):
        for i, v in enumerate(variants):
            a = summary["arms"][v][m]
            x = i + (j - (len(modes) - 1) / 2) * width
            ci = a["nar_mean_interval"]
            err = None if not ci else [[a["nar_mean"] - ci[0]], [ci[1] - a["nar_mean"]]]
            ax.bar(
                x,
                a["nar_mean"],
                width * 0.9,
                yerr=err,
                capsize=3,
                color=MODE_COLORS.get(m),
                label=m if i == 0 else None,
            )
            ax.scatter([x] * len(a["nar_by_seed"]), list(a["nar_by_seed"].values()), s=10, color="black", zorder=3)
    ax.set_xticks(range(len(variants)), variants)
    ax.set_ylim(0.4, 1.0)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_ylabel("held-out NAR (mean over seeds, 95% CI; dots: seeds)")
    ax.legend(title="margin_mode", fontsize=8)
    ax = axes[1]
    rows = [(f"{v}\n{m} - plain", d) for v, by in summary["vs_baseline"].items() for m, d in by.items()]
    rows += [(f"ambiguous added\n{m}", d) for m, d in summary["ambiguous_effect"].items()]
    for k, (label, d) in enumerate(rows):
        ci = d["interval"]
        if ci:
            ax.plot(ci, [k, k], color="black")
        ax.scatter([d["difference"]], [k], color="black", zorder=3)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.set_xlabel("paired NAR difference (pooled over seeds, 95% CI)")
    if with_curves:
        ax = axes[2]
        styles = {v: ls for v, ls in zip(curves, ("-", "--", ":"))}
        for v, by_mode in curves.items():
            for m, c in by_mode.items():
                ax.plot(c["steps"], c["nar_mean"], ls=styles[v], color=MODE_COLORS.get(m), label=f"{m} ({v})")
        ax.axhline(CURVE_LEVEL, color="grey", lw=0.8, ls=":")
        ax.set_ylim(0.4, 1.0)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("held-out NAR while training (mean over seeds)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(invocation: Invocation) -> int:
    o = invocation.options
    seeds = comma_seeds(o.seeds)
    modes = comma_choices(o.modes, MODES, "modes")
    variants = comma_choices(o.variants, tuple(VARIANTS), "variants")
    for name in ("train_trajectories", "test_trajectories", "annotators", "resamples", "batch_size"):
        if getattr(o, name) < 1:
            raise RecipeError(f"{name} must be >= 1, got {getattr(o, name)}")
    if o.annotator_noise < 0 or o.scenario_disagreement < 0:
        raise RecipeError("annotator_noise and scenario_disagreement must be >= 0")
    summary = MarginsExperiment(Path(o.out), o, seeds, modes, variants).run()
    for v, by_mode in summary["arms"].items():
        for m, a in by_mode.items():
            print(
                f"{v:15s} {m:11s} NAR {a['nar_mean']:.3f} {fmt_interval(a['nar_mean_interval'])} seeds "
                + ", ".join(f"{x:.3f}" for x in a["nar_by_seed"].values())
            )
    for v, rows in summary["vs_baseline"].items():
        for m, d in rows.items():
            print(f"{v:15s} {m} - plain: {d['difference']:+.3f} {fmt_interval(d['interval'])}")
    print(f"wrote {Path(o.out) / 'summary.json'}, report.md and margins.png ({summary['seconds']['total']:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, run)


if __name__ == "__main__":
    import sys

    sys.exit(main())
