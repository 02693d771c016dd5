"""real.png: NAR and attempt rates per arm with the learning curves, or with several seeds every seed's NAR and paired
differences."""

from __future__ import annotations

from pathlib import Path

from timealign.experiment.real.arms import ARMS


def write_plot(summary: dict, path: Path) -> None:
    seeds = summary.get("across_seeds") and any(len(a["seeds"]) > 1 for a in summary["across_seeds"]["arms"].values())
    if seeds:
        return write_seeds_plot(summary, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(summary["arms"])
    panels = 1 + bool(summary["curves"]) + bool(cell_keys(summary))
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.4), squeeze=False)
    axes = list(axes[0])
    ax = axes[0]
    metrics = (("nar", "NAR"), ("attempt_rate_prefer_tool", "calls, prefer-Tool"),
               ("attempt_rate_prefer_no_tool", "calls, prefer-noTool"))  # fmt: skip
    width = 0.8 / len(metrics)
    for i, arm in enumerate(arms):
        a = next(iter(summary["arms"][arm].values()))  # the first seed
        for j, (key, label) in enumerate(metrics):
            value = a[key] if a[key] is not None else float("nan")
            ci = a.get(f"{key}_interval")
            err = None if not ci or a[key] is None else [[value - ci[0]], [ci[1] - value]]
            style = {"alpha": (1.0, 0.55, 0.3)[j], "edgecolor": "black", "linewidth": 0.4}
            label = label if i == 0 else None
            ax.bar(i + (j - 1) * width, value, width * 0.9, yerr=err, capsize=2, color=ARMS[arm].color, label=label,
                   **style)  # fmt: skip
    if "clock" in summary["arms"]:
        clock = next(iter(summary["arms"]["clock"].values()))["nar"]
        ax.axhline(clock, color=ARMS["clock"].color, ls="--", lw=1, label=f"clock rule NAR {clock:.3f}")
    reference_line(ax, summary)
    ax.axhline(0.5, color="grey", ls=":", lw=0.8)
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out v1 test split (95% CI)")
    ax.set_title(f"NAR (dark) and tool-call rates per label, n={summary['test_samples']}")
    ax.legend(fontsize=7, loc="upper left")
    if cell_keys(summary):
        cells_panel(axes[-1], summary)
    if summary["curves"]:
        ax = axes[1]
        for key, points in summary["curves"].items():
            arm = key.rsplit("-seed", 1)[0]
            ax.plot([p["step"] for p in points], [p["nar"] for p in points], marker="o", color=ARMS[arm].color,
                    label=key)  # fmt: skip
        ax.axhline(0.5, color="grey", ls=":", lw=0.8)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"NAR, {summary['settings']['options']['curve_samples']} held-out samples")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_seeds_plot(summary: dict, path: Path) -> None:
    """Several seeds: NAR of every arm and seed with its interval (left), every seed's paired difference (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spread = summary["across_seeds"]
    panels = 3 if cell_keys(summary) else 2
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.6))
    left, right = axes[0], axes[1]
    if panels == 3:
        cells_panel(axes[2], summary)
    for i, (arm, by_seed) in enumerate(summary["arms"].items()):
        points = sorted(by_seed.items(), key=lambda kv: int(kv[0]))
        for j, (seed, a) in enumerate(points):
            x = i + (j - (len(points) - 1) / 2) * 0.18
            ci = a.get("nar_interval")
            err = None if not ci else [[a["nar"] - ci[0]], [ci[1] - a["nar"]]]
            left.errorbar(x, a["nar"], yerr=err, fmt="o", color=ARMS[arm].color, capsize=3, ms=5)
            left.annotate(f"s{seed}", (x, a["nar"]), textcoords="offset points", xytext=(4, -10), fontsize=6)
        mean = spread["arms"].get(arm, {}).get("mean")
        if mean is not None:
            left.hlines(mean, i - 0.35, i + 0.35, color=ARMS[arm].color, lw=1.5)
    if reference_line(left, summary):
        left.legend(fontsize=7, loc="upper left")
    left.axhline(0.5, color="grey", ls=":", lw=0.8)
    left.set_xticks(range(len(summary["arms"])), list(summary["arms"]))
    left.set_ylim(0.3, 1.0)
    left.set_ylabel(f"NAR, held-out v1 test split (n={summary['test_samples']}, 95% CI)")
    left.set_title("NAR per arm: one dot per seed, the bar is the mean")
    names = list(spread["differences"])
    for i, name in enumerate(names):
        c = spread["differences"][name]
        for j, (seed, v, ci) in enumerate(zip(c["seeds"], c["differences"], c["intervals"])):
            if v is None:
                continue
            x = i + (j - (len(c["seeds"]) - 1) / 2) * 0.18
            err = None if not ci else [[v - ci[0]], [ci[1] - v]]
            color = ARMS[name.split(" - ")[0]].color
            right.errorbar(x, v, yerr=err, fmt="s", color=color, capsize=3, ms=5)
            right.annotate(f"s{seed}", (x, v), textcoords="offset points", xytext=(4, -10), fontsize=6)
    right.axhline(0, color="black", lw=0.8)
    right.set_xlim(-0.6, len(names) - 0.4)
    right.set_xticks(range(len(names)), [n.replace(" - ", " -\n") for n in names], fontsize=8)
    right.set_ylabel("paired NAR difference (95% CI)")
    right.set_title("Paired differences on the same samples, per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


REFERENCE_COLOR = "#9467bd"


def first_with(summary: dict, key: str) -> dict | None:
    """The first arm and seed's `key` block (the rules are scored on every arm's samples alike), else None."""
    return next((a[key] for by_seed in summary["arms"].values() for a in by_seed.values() if a.get(key)), None)


def reference_line(ax, summary: dict) -> bool:
    """The volatility-aware reference's NAR as a dashed line (issue 49), where real.json has it."""
    reference = first_with(summary, "volatility_rule")
    if not reference or reference["nar"] is None:
        return False
    ax.axhline(reference["nar"], color=REFERENCE_COLOR, ls="--", lw=1,
               label=f"volatility-aware reference NAR {reference['nar']:.3f} (reads the class)")  # fmt: skip
    return True


def cell_keys(summary: dict) -> list[str]:
    """The sensitivity class x gap level cells real.json has, in the report's order ([] for older summaries)."""
    from timealign.experiment.real.markdown import cell_order

    keys = {k for by_seed in summary["arms"].values() for a in by_seed.values() for k in a.get("by_cell") or {}}
    return sorted(keys, key=cell_order)


def cells_panel(ax, summary: dict) -> None:
    """Per sensitivity class x gap level: the share of samples that prefer a call (grey bars) and the share each arm
    (first seed), the elapsed-time rule and the volatility-aware reference call."""
    keys = cell_keys(summary)
    x = range(len(keys))

    def shares(cells: dict, of: tuple[str, ...]) -> list[float]:
        return [sum(cells[k][c] for c in of) / cells[k]["n"] if k in cells and cells[k]["n"] else float("nan")
                for k in keys]  # fmt: skip

    gold = {}
    for by_seed in summary["arms"].values():
        for a in by_seed.values():
            gold = {**(a.get("by_cell") or {}), **gold}
    ax.bar(x, shares(gold, ("tp", "fn")), 0.8, color="#dddddd", edgecolor="grey", lw=0.4, label="prefer a call")
    marks = [(arm, next(iter(by_seed.values())).get("by_cell") or {}, ARMS[arm].color, "o")
             for arm, by_seed in summary["arms"].items() if arm != "clock"]  # fmt: skip
    for name, key, color, marker in (("clock rule", "clock_rule", ARMS["clock"].color, "x"),
                                     ("reference", "volatility_rule", REFERENCE_COLOR, "D")):  # fmt: skip
        block = first_with(summary, key)
        if block:
            marks.append((name, block.get("by_cell") or {}, color, marker))
    for i, (name, cells, color, marker) in enumerate(marks):
        offset = (i - (len(marks) - 1) / 2) * 0.8 / max(len(marks), 1)
        ax.plot([k + offset for k in x], shares(cells, ("tp", "fp")), marker, color=color, ms=5, label=name, ls="")
    ax.set_xticks(list(x), [k.replace("/", "\n") for k in keys], fontsize=7)
    ax.set_ylim(-0.03, 1.05)
    ax.set_ylabel("share of the cell's samples called")
    ax.set_title("Calls per sensitivity class x gap level (first seed)")
    ax.legend(fontsize=6, loc="best")
