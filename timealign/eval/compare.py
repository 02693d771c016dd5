"""Side-by-side comparison of evaluation reports (base vs trained), with deltas and an optional NAR bar chart.

    python eval/compare.py before=BEFORE.json after=AFTER.json [png=nar.png]
    python eval/compare.py before=A0.json,B0.json after=A1.json,B1.json labels=llama3b,qwen3-8b png=nar.png

Each before/after pair is one model or run; `png=` draws the TicToc paper's Fig. 7: NAR before and after DPO per
model, as grouped bars with the chance level (50%) marked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt

ROWS = (("NAR", "nar"), ("attempt rate, prefer-Tool", "attempt_rate_prefer_tool"),
        ("attempt rate, prefer-noTool", "attempt_rate_prefer_no_tool"), ("tool calls", "tool_calls"),
        ("samples", "n"))
def compare_table(before: dict, after: dict, names=("before", "after")) -> str:
    b, a = before["overall"], after["overall"]

    def fmt(v):
        return "n/a" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    lines = [f"| metric | {names[0]} | {names[1]} | delta |", "|---|---|---|---|"]
    for label, key in ROWS:
        delta = a[key] - b[key] if a[key] is not None and b[key] is not None else None
        sign = "+" if isinstance(delta, (int, float)) and delta > 0 else ""
        lines.append(f"| {label} | {fmt(b[key])} | {fmt(a[key])} | {sign}{fmt(delta)} |")
    lines += ["", f"| tool calls by label | {names[0]} | {names[1]} |", "|---|---|---|",
              f"| prefer-Tool (want a call) | {b['tp']}/{b['tp'] + b['fn']} | {a['tp']}/{a['tp'] + a['fn']} |",
              f"| prefer-noTool (want none) | {b['fp']}/{b['tn'] + b['fp']} | {a['fp']}/{a['tn'] + a['fp']} |"]
    return "\n".join(lines)


def run_label(before: dict, after: dict) -> str:
    """A short name for one before/after pair: the trained checkpoint's folder name."""
    for report in (after, before):
        checkpoint = report.get("checkpoint")
        if checkpoint:
            return Path(str(checkpoint).rstrip("/")).name or str(checkpoint)
    return "run"


def nar_chart(pairs: list[tuple[str, dict, dict]], path: str | Path, names=("before", "after"),
              title: str = "TicToc NAR before and after offset-DPO") -> Path:
    """Grouped bars (Fig. 7 style): one group per (label, before, after), NAR in %, 50% chance line; writes a PNG."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display, no pyplot global state
        from matplotlib.figure import Figure
    except ImportError:
        raise SystemExit("--png needs matplotlib: pip install matplotlib (or pip install -e '.[dev]')") from None

    labels = [p[0] for p in pairs]
    values = [[(100 * r["overall"]["nar"]) if r["overall"].get("nar") is not None else None for r in p[1:]]
              for p in pairs]
    width = 0.38
    fig = Figure(figsize=(max(4.5, 1.6 * len(pairs) + 2), 4.2), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(111)
    colors = ("#9aa5b1", "#2f6db5")
    for k, (name, color) in enumerate(zip(names, colors)):
        xs = [i + (k - 0.5) * width for i in range(len(pairs))]
        heights = [v[k] if v[k] is not None else 0.0 for v in values]
        bars = ax.bar(xs, heights, width, label=name, color=color, edgecolor="black", linewidth=0.6)
        for bar, v in zip(bars, values):
            shown = "n/a" if v[k] is None else f"{v[k]:.1f}"
            ax.annotate(shown, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax.axhline(50, color="#c0392b", linestyle="--", linewidth=1, label="chance (50%)")
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels(labels, rotation=15 if len(pairs) > 3 else 0, ha="right" if len(pairs) > 3 else "center")
    ax.set_ylim(0, 112)  # room for the legend above 100%
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("normalized alignment rate (%)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8, frameon=False, ncol=3)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


@dataclass
class CompareOptions:
    before: str = opt("", "comma list of reports (<out>/tictoc.json written by eval/run.py) before training")
    after: str = opt("", "comma list of reports after training, one per `before` report, in the same order")
    labels: str | None = opt(None, "comma list of names, one per pair (default: the trained checkpoint's folder)")
    png: str | None = opt(None, "also draw NAR before/after per pair as grouped bars (the TicToc paper's Fig. 7)")


COMMAND = Command(prog="python eval/compare.py", summary=__doc__.split("\n\n")[0], options=CompareOptions,
                  recipe="none", examples="\n".join(line for line in __doc__.splitlines() if "compare.py" in line))


def _files(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def run(invocation: Invocation) -> int:
    opts = invocation.options
    before, after = _files(opts.before), _files(opts.after)
    if not before or len(before) != len(after):
        raise RecipeError(f"before= and after= need the same number of reports (got {len(before)} and "
                          f"{len(after)}); see --help")
    reports = [(json.loads(Path(b).read_text()), json.loads(Path(a).read_text())) for b, a in zip(before, after)]
    pairs = [(run_label(b, a), b, a) for b, a in reports]
    if opts.labels:
        labels = opts.labels.split(",")
        if len(labels) != len(pairs):
            raise RecipeError(f"labels= has {len(labels)} names for {len(pairs)} before/after pairs")
        pairs = [(name, b, a) for name, (_, b, a) in zip(labels, pairs)]
    for i, (label, before_report, after_report) in enumerate(pairs):
        if i:
            print()
        head = f" [{label}]" if len(pairs) > 1 else ""
        print(f"TicToc held-out tool-call decisions{head}: {before_report.get('checkpoint')} -> "
              f"{after_report.get('checkpoint')}\n")
        print(compare_table(before_report, after_report))
    if opts.png:
        print(f"\nwrote {nar_chart(pairs, opts.png)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, run)
