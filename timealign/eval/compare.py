"""Side-by-side comparison of evaluation reports (base vs trained): deltas, whether each delta is outside the noise
(a paired bootstrap over the samples both runs scored), and an optional NAR bar chart with 95% error bars.

    python eval/compare.py before=BEFORE.json after=AFTER.json [png=nar.png] [out=compare/]
    python eval/compare.py before=results/base after=results/trained suite=timepuzzles
    python eval/compare.py before=A0.json,B0.json after=A1.json,B1.json labels=llama3b,qwen3-8b png=nar.png

A report is a suite's JSON file or an eval output folder (its `latest` run; `suite=` picks the suite, default
tictoc). Each before/after pair is one model or run. The paired bootstrap (`timealign.eval.bootstrap.
paired_differences`) matches the two reports' samples by id and refuses reports that scored different sample sets;
a difference is "outside noise" when its interval excludes 0. `png=` draws the TicToc paper's Fig. 7: NAR before and
after DPO per model, grouped bars with each report's bootstrap interval as error bars and the chance level (50%).
`out=` also writes compare.json and compare.md there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.data.identity import same_data
from timealign.eval.bootstrap import (
    SEED,
    UNIT_SUITES,
    SampleSetMismatch,
    fmt_interval,
    paired_differences,
    suite_units,
    verdict,
)
from timealign.eval.runs import report_path

ROWS = (
    ("NAR", "nar"),
    ("attempt rate, prefer-Tool", "attempt_rate_prefer_tool"),
    ("attempt rate, prefer-noTool", "attempt_rate_prefer_no_tool"),
    ("tool calls", "tool_calls"),
    ("samples", "n"),
)


def _fmt(v) -> str:
    return "n/a" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def _with_interval(report: dict, key: str) -> str:
    """The value, with the report's own bootstrap interval when it has one."""
    value = report["overall"].get(key)
    interval = ((report.get("intervals") or {}).get("metrics") or {}).get(key)
    return _fmt(value) + (f" {fmt_interval(interval)}" if interval is not None and value is not None else "")


def suite_of(report: dict, default: str = "tictoc") -> str:
    return report.get("suite") or default


def compare_table(before: dict, after: dict, names=("before", "after"), paired: dict | None = None) -> str:
    """Markdown: each metric before and after (with its own interval), the delta, the paired interval of the delta
    and whether it is outside the noise; TicToc adds the tool calls by label."""
    suite = suite_of(after, suite_of(before))
    b, a = before["overall"], after["overall"]
    if suite == "tictoc":
        rows = ROWS
    else:
        keys = list((paired or {}).get("metrics") or ((after.get("intervals") or {}).get("metrics") or {}))
        rows = tuple((k, k) for k in keys or [k for k, v in a.items() if isinstance(v, (int, float))])
    level = f"{100 * paired['confidence']:g}% " if paired else ""
    lines = [
        f"| metric | {names[0]} | {names[1]} | delta | {level}interval of delta (paired) | noise |",
        "|---|---|---|---|---|---|",
    ]
    for label, key in rows:
        bv, av = b.get(key), a.get(key)
        delta = av - bv if isinstance(av, (int, float)) and isinstance(bv, (int, float)) else None
        sign = "+" if isinstance(delta, (int, float)) and delta > 0 else ""
        row = ((paired or {}).get("metrics") or {}).get(key)
        interval, noise = (fmt_interval(row["interval"]), verdict(row)) if row else ("", "")
        lines.append(
            f"| {label} | {_with_interval(before, key)} | {_with_interval(after, key)} | {sign}{_fmt(delta)} | "
            f"{interval} | {noise} |"
        )
    if suite == "tictoc":
        lines += [
            "",
            f"| tool calls by label | {names[0]} | {names[1]} |",
            "|---|---|---|",
            f"| prefer-Tool (want a call) | {b['tp']}/{b['tp'] + b['fn']} | {a['tp']}/{a['tp'] + a['fn']} |",
            f"| prefer-noTool (want none) | {b['fp']}/{b['tn'] + b['fp']} | {a['fp']}/{a['tn'] + a['fp']} |",
        ]
    return "\n".join(lines)


def paired_comparison(
    before: dict, after: dict, *, resamples: int = 1000, confidence: float = 0.95, seed: int = SEED
) -> tuple[dict | None, str]:
    """(paired_differences of the two reports, a line saying how) or (None, why not): reports without per-sample
    records cannot be paired. Raises SampleSetMismatch when they scored different sample sets, and RecipeError when
    they are reports of different suites."""
    suite_b, suite_a = suite_of(before), suite_of(after)
    if suite_b != suite_a:
        raise RecipeError(f"before is a {suite_b} report and after a {suite_a} report: compare reports of one suite")
    if resamples <= 0:
        return None, "paired bootstrap off (resamples=0)"
    if not before.get("samples") or not after.get("samples"):
        return None, "no paired bootstrap: a report has no per-sample records"
    units_b, units_a = suite_units(before, suite_b), suite_units(after, suite_a)
    if units_b is None or units_a is None:
        return None, f"no paired bootstrap: the {suite_b} report has no resampling units"
    result = paired_differences(units_b, units_a, resamples=resamples, confidence=confidence, seed=seed)
    strata = f", resampled within each {result['stratified_by']}" if result["stratified_by"] else ""
    how = (
        f"paired bootstrap: {result['resamples']} resamples of the {result['units']} {result['unit']}s both runs "
        f"scored (matched by id{strata}), {result['method']} interval, seed {result['seed']}; a delta is outside "
        "noise when its interval excludes 0"
    )
    notes = "".join(f"\n- {note}" for note in result["notes"])
    return result, how + notes


def data_line(before: dict, after: dict) -> str:
    """Which data each report scored (its `data` block, `timealign.data.identity`), and a warning when the two
    differ: their deltas then mix a model change with a data change."""
    b, a = before.get("data") or {}, after.get("data") or {}
    unknown = "unknown (the report names no data)"
    line = f"data: {b.get('label', unknown)} -> {a.get('label', unknown)}"
    if b and a and not same_data(b, a):
        line += " (DIFFERENT DATA: the deltas mix the model change with a data change)"
    return line


def run_label(before: dict, after: dict) -> str:
    """A short name for one before/after pair: the trained checkpoint's folder name."""
    for report in (after, before):
        checkpoint = report.get("checkpoint")
        if checkpoint:
            return Path(str(checkpoint).rstrip("/")).name or str(checkpoint)
    return "run"


# The panels of the comparison chart: NAR (the headline) and the two attempt rates it averages (TicToc Fig. 7 shows
# NAR; a user judging a checkpoint also needs to see which label moved).
CHART_METRICS = (
    ("nar", "NAR (%)", True),
    ("attempt_rate_prefer_tool", "attempt rate, prefer-Tool (%)\n(want 100)", False),
    ("attempt_rate_prefer_no_tool", "attempt rate, prefer-noTool (%)\n(want 0)", False),
)


def nar_chart(
    pairs: list[tuple[str, dict, dict]],
    path: str | Path,
    names=("before", "after"),
    title: str = "TicToc before and after offset-DPO",
    paired: list[dict | None] | None = None,
) -> Path:
    """Grouped bars, one panel per metric (NAR with its 50% chance line, then the attempt rates on prefer-Tool and
    prefer-noTool pairs): one group per (label, before, after), in %, each report's bootstrap interval as an error bar;
    a `*` over a pair whose paired difference is outside the noise. PNG."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display, no pyplot global state
        from matplotlib.figure import Figure
    except ImportError:
        raise SystemExit("--png needs matplotlib: pip install matplotlib (or pip install -e '.[dev]')") from None

    def metric(report, key):
        value = report["overall"].get(key)
        interval = ((report.get("intervals") or {}).get("metrics") or {}).get(key)
        return (None if value is None else 100 * value), (None if interval is None else [100 * x for x in interval])

    labels = [p[0] for p in pairs]
    width = 0.38
    fig = Figure(figsize=(max(9.0, 3.2 * len(CHART_METRICS) * max(1.0, 0.45 * len(pairs))), 4.6), dpi=120)
    FigureCanvasAgg(fig)
    colors = ("#9aa5b1", "#2f6db5")
    any_bars = False
    for panel, (key, ylabel, chance) in enumerate(CHART_METRICS):
        ax = fig.add_subplot(1, len(CHART_METRICS), panel + 1)
        values = [[metric(r, key) for r in p[1:]] for p in pairs]
        for k, (name, color) in enumerate(zip(names, colors)):
            xs = [i + (k - 0.5) * width for i in range(len(pairs))]
            heights = [v[k][0] if v[k][0] is not None else 0.0 for v in values]
            bars = ax.bar(xs, heights, width, label=name, color=color, edgecolor="black", linewidth=0.6)
            for x, bar, v in zip(xs, bars, values):
                value, interval = v[k]
                top = bar.get_height()
                if value is not None and interval is not None:
                    ax.errorbar(
                        [x],
                        [value],
                        yerr=[[value - interval[0]], [interval[1] - value]],
                        fmt="none",
                        ecolor="black",
                        elinewidth=0.9,
                        capsize=3,
                    )
                    top, any_bars = max(top, interval[1]), True
                ax.annotate(
                    "n/a" if value is None else f"{value:.1f}",
                    (x, top),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        for i, result in enumerate(paired or []):
            row = ((result or {}).get("metrics") or {}).get(key)
            if row and row["outside_noise"]:
                tops = [max(v[0] or 0, (v[1] or [0, 0])[1]) for v in values[i]]
                ax.annotate("*", (i, max(tops)), xytext=(0, 12), textcoords="offset points", ha="center", fontsize=12)
        if chance:
            ax.axhline(50, color="#c0392b", linestyle="--", linewidth=1, label="chance (50%)")
        ax.set_xticks(range(len(pairs)))
        ax.set_xticklabels(
            labels, rotation=15 if len(pairs) > 2 else 0, ha="right" if len(pairs) > 2 else "center", fontsize=8
        )
        ax.set_ylim(0, 118)  # room for the value labels and stars above 100%
        ax.set_yticks(range(0, 101, 20))
        ax.set_ylabel(ylabel, fontsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    handles, names_ = [], []
    for ax in fig.axes:  # one legend for the figure: before, after, chance
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names_:
                handles.append(h)
                names_.append(n)
    fig.legend(handles, names_, loc="upper right", fontsize=8, frameon=False, ncol=len(names_))
    fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    if any_bars or paired:
        fig.text(
            0.01,
            0.015,
            "error bars: each run's bootstrap interval; *: paired difference outside noise",
            fontsize=7,
            color="#555555",
            ha="left",
            va="bottom",
        )
    fig.tight_layout(rect=(0, 0.05, 1, 0.93))  # the footnote below and the legend above stay inside the figure
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


@dataclass
class CompareOptions:
    before: str = opt(
        "",
        "comma list of reports before training: a suite's JSON (<out>/tictoc.json written by "
        "eval/run.py, or <out>/runs/NNN/tictoc.json) or an eval output folder (its latest run)",
    )
    after: str = opt("", "comma list of reports after training, one per `before` report, in the same order")
    suite: str = opt("tictoc", "the suite whose report is read from a folder given to before= / after=")
    labels: str | None = opt(None, "comma list of names, one per pair (default: the trained checkpoint's folder)")
    png: str | None = opt(
        None,
        "also draw NAR before/after per pair as grouped bars with error bars (the TicToc "
        "paper's Fig. 7; tictoc reports)",
    )
    out: str | None = opt(None, "also write compare.json (every number, the paired intervals) and compare.md here")
    resamples: int = opt(1000, "paired bootstrap resamples (0: no paired intervals)")
    confidence: float = opt(0.95, "level of the paired intervals")
    seed: int = opt(SEED, "seed of the paired bootstrap (the same reports and seed give the same intervals)")


COMMAND = Command(
    prog="python eval/compare.py",
    summary=__doc__.split("\n\n")[0],
    options=CompareOptions,
    recipe="none",
    examples="\n".join(line for line in __doc__.splitlines() if "compare.py" in line),
)


def _files(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def run(invocation: Invocation) -> int:
    opts = invocation.options
    before, after = _files(opts.before), _files(opts.after)
    if not before or len(before) != len(after):
        raise RecipeError(
            f"before= and after= need the same number of reports (got {len(before)} and {len(after)}); see --help"
        )
    if not 0 < opts.confidence < 1:
        raise RecipeError(f"confidence= must be in (0, 1), got {opts.confidence}")
    if opts.resamples < 0:
        raise RecipeError(f"resamples= must be >= 0, got {opts.resamples}")
    try:
        paths = [(report_path(b, opts.suite), report_path(a, opts.suite)) for b, a in zip(before, after)]
    except FileNotFoundError as err:
        raise RecipeError(str(err)) from None
    reports = [(json.loads(b.read_text()), json.loads(a.read_text())) for b, a in paths]
    for (b_path, a_path), (b, a) in zip(paths, reports):
        for path, report in ((b_path, b), (a_path, a)):
            # Reports written by evaluate_tictoc() alone carry no suite name: the file name, else TicToc.
            report.setdefault("suite", path.stem if path.stem in UNIT_SUITES else "tictoc")
    pairs = [(run_label(b, a), b, a) for b, a in reports]
    if opts.labels:
        labels = opts.labels.split(",")
        if len(labels) != len(pairs):
            raise RecipeError(f"labels= has {len(labels)} names for {len(pairs)} before/after pairs")
        pairs = [(name, b, a) for name, (_, b, a) in zip(labels, pairs)]
    if opts.png and any(suite_of(b) != "tictoc" for _, b, _ in pairs):
        raise RecipeError("png= draws TicToc NAR: give tictoc reports (or leave png= out)")
    sections, records, paired_all = [], [], []
    for i, ((label, before_report, after_report), (b_path, a_path)) in enumerate(zip(pairs, paths)):
        try:
            paired, how = paired_comparison(
                before_report, after_report, resamples=opts.resamples, confidence=opts.confidence, seed=opts.seed
            )
        except SampleSetMismatch as err:
            raise SampleSetMismatch(f"{b_path} vs {a_path}: {err}") from None
        paired_all.append(paired)
        suite = suite_of(before_report)
        head = f" [{label}]" if len(pairs) > 1 else ""
        title = ("TicToc held-out tool-call decisions" if suite == "tictoc" else suite) + head
        sections.append(
            f"{title}: {before_report.get('checkpoint')} -> {after_report.get('checkpoint')}\n"
            f"{data_line(before_report, after_report)}\n\n"
            f"{compare_table(before_report, after_report, paired=paired)}\n\n{how}"
        )
        records.append(
            {
                "label": label,
                "suite": suite,
                "before": {
                    "report": str(b_path),
                    "checkpoint": before_report.get("checkpoint"),
                    "run": before_report.get("run"),
                    "data": before_report.get("data"),
                    "overall": before_report["overall"],
                    "intervals": before_report.get("intervals"),
                },
                "after": {
                    "report": str(a_path),
                    "checkpoint": after_report.get("checkpoint"),
                    "run": after_report.get("run"),
                    "data": after_report.get("data"),
                    "overall": after_report["overall"],
                    "intervals": after_report.get("intervals"),
                },
                "paired": paired,
                "paired_note": how,
            }
        )
    text = "\n\n".join(sections)
    print(text)
    if opts.png:
        print(f"\nwrote {nar_chart(pairs, opts.png, paired=paired_all)}")
    if opts.out:
        out = Path(opts.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(json.dumps({"pairs": records}, indent=1))
        (out / "compare.md").write_text(text + "\n")
        print(f"wrote {out / 'compare.json'} and {out / 'compare.md'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, run, errors={SampleSetMismatch: 1})


if __name__ == "__main__":  # python -m timealign.eval.compare
    raise SystemExit(main())
