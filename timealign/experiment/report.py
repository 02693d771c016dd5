"""The experiments' report: report.md with its tables and the nar.png / timing.png plots."""

from __future__ import annotations

from pathlib import Path

from timealign.experiment.spec import DPO_RECIPE, TARGETS, TIMER_RECIPE


def fmt(v, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def table_cell(text: str) -> str:
    """Text safe inside a Markdown table cell ("|S - 1.5|" would split the row)."""
    return text.replace("|", "\\|")


# nar.png's arm names and colours: the treatment blue, the no-timestamp control orange, plain DPO green.
ARM_LABELS = {"offset": "offset-DPO", "no_timestamps": "control:\nno timestamps", "delta0": "plain DPO\n(delta = 0)"}
ARM_COLORS = {"offset": "#1f77b4", "no_timestamps": "#d98c3f", "delta0": "#2ca02c"}


def write_plots(summary: dict, out: Path) -> list[Path]:
    """nar.png (NAR per DPO arm, before/after) and timing.png (F1, FPR, RMSLE per TIMER arm, before/after)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    written = []
    if "dpo" in summary:
        d = summary["dpo"]
        labels = ["base\n(timestamps)", "base\n(no timestamps)"] + [ARM_LABELS.get(n, n) for n in d["arms"]]
        values = [d["nar_before"], d["nar_before_no_timestamps"]] + [a["nar"] for a in d["arms"].values()]
        # The control gets its own colour: it must not read as a second treatment bar.
        colors = ["#999999", "#bbbbbb"] + [ARM_COLORS.get(n, "#1f77b4") for n in d["arms"]]
        fig = Figure(figsize=(8.6, 3.6))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        bars = ax.bar(labels, [v or 0 for v in values], color=colors)
        ax.bar_label(bars, labels=[fmt(v) for v in values], fontsize=8)
        ax.axhline(0.5, color="k", lw=0.8, ls=":", label="chance")
        ax.axhline(TARGETS["nar_after"], color="g", lw=0.8, ls="--", label="target")
        ax.axhline(
            d["best_scenario_blind_threshold"]["nar"], color="r", lw=0.8, ls="-.", label="best single threshold"
        )
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("NAR (held-out scenarios)")
        ax.set_title("Offset-DPO on the tiny agent: tool-call alignment")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside, not on, a bar
        ax.tick_params(axis="x", labelsize=8)
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
            bars_before = ax.bar([x - 0.2 for x in xs], before, 0.4, label="before", color="#bbbbbb")
            bars_after = ax.bar([x + 0.2 for x in xs], after, 0.4, label="after", color="#1f77b4")
            # Values printed on every bar: a panel whose values are all 0 (FPR) then still says so.
            for group, raw in (
                (bars_before, [arms[n]["before"][metric] for n in names]),
                (bars_after, [arms[n][metric] for n in names]),
            ):
                ax.bar_label(group, labels=[fmt(v, 2) for v in raw], fontsize=6, padding=1)
            ax.set_xticks(list(xs), [n.replace("_", "\n") for n in names], fontsize=7)
            ax.set_title(title, fontsize=9)
            if metric == "rmsle":
                ax.set_ylim(0, 1.15 * max([*before, *after, 0.1]))  # headroom for the value labels
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


def markdown_report(summary: dict, out: Path, title: str = "Does the pipeline teach time? (`make experiment`)") -> str:
    lines = [f"# {title}", ""]
    targets = summary.get("targets", {})
    if targets:
        lines += ["| target | value | met |", "|---|---|---|"]
        for name, t in targets.items():
            lines.append(f"| {name}: {t['target']} | {fmt(t['value'])} | {'yes' if t['met'] else '**no**'} |")
        lines.append("")
    if "dpo" in summary:
        d = summary["dpo"]
        data = d["data"]
        lines += [
            "## Offset-DPO: the tool-call decision (TicToc NAR, held-out scenarios)",
            "",
            f"Recipe `{DPO_RECIPE}`; base `{d['base']['checkpoint']}`; {data['train_pairs']} train pairs "
            f"({data['train_scenarios']} scenarios, label-balanced: {data['balance_dropped']} dropped), "
            f"{data['test_pairs']} test pairs ({data['test_scenarios']} held-out scenarios, labels "
            f"{data['test_labels']}).",
            "",
            "| model | NAR | attempt rate, prefer-Tool | attempt rate, prefer-noTool | NAR high / medium / low |",
            "|---|---|---|---|---|",
        ]
        rows = [("base, timestamps", d["base"]["timestamps"]), ("base, no timestamps", d["base"]["no_timestamps"])]
        rows += [(f"{name}: {table_cell(a['description'])}", a) for name, a in d["arms"].items()]
        for label, m in rows:
            sens = m["by_sensitivity"]
            lines.append(
                f"| {label} | {fmt(m['nar'])} | {fmt(m['attempt_rate_prefer_tool'])} | "
                f"{fmt(m['attempt_rate_prefer_no_tool'])} | "
                f"{' / '.join(fmt(sens.get(s)) for s in ('high', 'medium', 'low'))} |"
            )
        blind = d["best_scenario_blind_threshold"]
        lines += [
            "",
            f"Reference: the best single gap threshold for all scenarios (call iff gap > "
            f"{blind['threshold_seconds']:.0f} s) reaches NAR {fmt(blind['nar'])} on this test split; above it, "
            "a model uses the scenario's sensitivity as well as the gap.",
            "",
            "Attempt rate per held-out cell (sensitivity / elapse level; gold = share of prefer-Tool):",
            "",
        ]
        cell_sources = [("base", d["base"].get("by_cell", {}))] + [
            (n, a.get("by_cell", {})) for n, a in d["arms"].items()
        ]
        keys = list(cell_sources[0][1])
        if keys:
            lines += [
                "| cell | gold | " + " | ".join(n for n, _ in cell_sources) + " |",
                "|---|---|" + "---|" * len(cell_sources),
            ]
            for key in keys:
                gold = cell_sources[0][1][key]["gold_tool_rate"]
                lines.append(
                    f"| {key} | {fmt(gold, 2)} | "
                    + " | ".join(fmt(cells.get(key, {}).get("attempt_rate"), 2) for _, cells in cell_sources)
                    + " |"
                )
        lines += ["", "![NAR per arm](nar.png)", ""]
    if "timer" in summary:
        lines += [
            "## TIMER SFT: when to respond (TimelyChat timing, held-out dialogs)",
            "",
            f"Recipe `{TIMER_RECIPE}`; every turn scored (context turns: gold 0 minutes; delayed = positive).",
            "",
            "| arm | F1 before -> after | FPR before -> after | RMSLE before -> after | "
            "RMSLE target turn after | BLEU-2 after | ROUGE-L after |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, a in summary["timer"]["arms"].items():
            b = a["before"]
            lines.append(
                f"| {name}: {table_cell(a['description'])} | {fmt(b['f1'])} -> {fmt(a['f1'])} | {fmt(b['fpr'])} -> "
                f"{fmt(a['fpr'])} | {fmt(b['rmsle'])} -> {fmt(a['rmsle'])} | {fmt(a['rmsle_target'])} "
                f"| {fmt(a['bleu2'], 2)} | {fmt(a['rouge_l'], 2)} |"
            )
        lines += ["", "![timing per arm](timing.png)", ""]
    secs = summary.get("seconds", {})
    if secs:
        lines += [
            "## Time",
            "",
            f"Total {secs.get('total', 0):.0f} s on {summary['settings']['machine']['cpus']} CPUs.",
            "",
            "| stage | seconds |",
            "|---|---|",
        ]
        lines += [f"| {k} | {v} |" for k, v in secs.items() if k != "total"]
        lines.append("")
    return "\n".join(lines)
