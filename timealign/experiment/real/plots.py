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
    fig, axes = plt.subplots(1, 2 if summary["curves"] else 1, figsize=(13 if summary["curves"] else 7, 4.4))
    axes = axes if summary["curves"] else [axes]
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
    ax.axhline(0.5, color="grey", ls=":", lw=0.8)
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out v1 test split (95% CI)")
    ax.set_title(f"NAR (dark) and tool-call rates per label, n={summary['test_samples']}")
    ax.legend(fontsize=7, loc="upper left")
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
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
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
