"""TicToc metrics (paper Sec. 3): normalized alignment rate and attempt rates, with breakdowns."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import numpy as np

from timealign.render.tool_calls import PROTOCOLS, paper_visible_text
from timealign.suites.units import SampleUnits

PREFER_TOOL, PREFER_NO_TOOL = "prefer_tool", "prefer_no_tool"
LEVEL_NAMES = ("small", "medium", "large")
# What the authors' API handlers write for a failed request; their scorer drops any output holding it.
ERROR_MARK = "[ERROR]"


def paper_dropped(text: str, family: str) -> bool:
    """Whether the authors' scorer leaves this output out of the total (get_metric.py: `out == "" or "[ERROR]" in
    out`, on the output as their pipeline saw it). Under `paper` such an output is passed to `summarize` as empty."""
    visible = paper_visible_text(text, family)
    return visible == "" or ERROR_MARK in visible


def length_bucket(num_turns: int) -> str:
    """The paper's conversation-length buckets (Sec. 3.2): short <= 7, medium 8-12, long >= 13 turns."""
    return "short" if num_turns <= 7 else "medium" if num_turns <= 12 else "long"


def cell(label: str, called: bool) -> str:
    """TP: prefer-Tool and called; FN: prefer-Tool, no call; TN: prefer-noTool, no call; FP: prefer-noTool, called."""
    if label == PREFER_TOOL:
        return "tp" if called else "fn"
    if label == PREFER_NO_TOOL:
        return "fp" if called else "tn"
    raise ValueError(f"unknown label {label!r}")


def confusion(labels: Iterable[str], attempted: Iterable[bool]) -> dict[str, int]:
    """The confusion counts (`cell` of each sample)."""
    counts = {"tp": 0, "fn": 0, "tn": 0, "fp": 0}
    for label, called in zip(labels, attempted, strict=True):
        counts[cell(label, called)] += 1
    return counts


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def nar_from_counts(c: dict[str, int]) -> float | None:
    """NAR = 1/2 (TP/(TP+FN) + TN/(TN+FP)); None when a class is absent (the rate is undefined)."""
    tpr, tnr = _rate(c["tp"], c["tp"] + c["fn"]), _rate(c["tn"], c["tn"] + c["fp"])
    if tpr is None or tnr is None:
        return None
    return 0.5 * (tpr + tnr)


def summarize(
    labels: list[str], attempted: list[bool], empty: list[bool] | None = None, protocol: str = "timealign"
) -> dict:
    """Confusion counts, NAR and attempt rates; `empty_outputs` counts the empty outputs among them.

    Under `paper` an empty output is left out of every count, as the authors' scorer does (`get_metric.py` drops
    `out == ""` from the total); under `timealign` it stays in, scored as its detection says (no call). `n` is the
    number of samples the rates are over.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown evaluation protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    empty = empty if empty is not None else [False] * len(labels)
    if protocol == "paper":
        kept = [i for i, e in enumerate(empty) if not e]
        labels, attempted = [labels[i] for i in kept], [attempted[i] for i in kept]
    c = confusion(labels, attempted)
    return {
        "n": len(labels),
        **c,
        "nar": nar_from_counts(c),
        "attempt_rate_prefer_tool": _rate(c["tp"], c["tp"] + c["fn"]),
        "attempt_rate_prefer_no_tool": _rate(c["fp"], c["tn"] + c["fp"]),
        "tool_calls": c["tp"] + c["fp"],
        "empty_outputs": sum(empty),
    }


def tictoc_report(
    rows: list[dict], attempted: list[bool], empty: list[bool] | None = None, protocol: str = "timealign"
) -> dict:
    """Overall metrics plus breakdowns by sensitivity, elapse level, length bucket and sensitivity x elapse level
    (`by_sensitivity_and_level`, keys like "high/small").

    `empty` flags the empty outputs (default: none); `protocol` decides whether they count (see `summarize`).
    """
    empty = empty if empty is not None else [False] * len(rows)
    report = {"overall": summarize([r["label"] for r in rows], attempted, empty, protocol)}
    keys = {
        "by_sensitivity": lambda r: r["sensitivity"],
        "by_elapse_level": lambda r: LEVEL_NAMES[r["elapse_level"]],
        "by_length": lambda r: length_bucket(r["num_turns"]),
        # where a decision is right or wrong: what goes stale how fast, at which gap (issue 49)
        "by_sensitivity_and_level": lambda r: f"{r['sensitivity']}/{LEVEL_NAMES[r['elapse_level']]}",
    }
    for name, key in keys.items():
        groups: dict[str, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
        for row, called, is_empty in zip(rows, attempted, empty, strict=True):
            labels, calls, empties = groups[key(row)]
            labels.append(row["label"])
            calls.append(called)
            empties.append(is_empty)
        report[name] = {k: summarize(*v, protocol=protocol) for k, v in sorted(groups.items())}
    return report


# The overall metrics the bootstrap intervals cover (timealign.eval.bootstrap).
INTERVAL_METRICS = ("nar", "attempt_rate_prefer_tool", "attempt_rate_prefer_no_tool")


def is_counted(sample: dict, protocol: str) -> bool:
    """Whether a report's sample enters the rates: it has a decision, and (under `paper`) a non-empty output."""
    return (
        "error" not in sample
        and sample.get("tool_call") is not None
        and not (protocol == "paper" and sample.get("empty_output"))
    )


def tictoc_units(report: dict) -> SampleUnits:
    """The report's held-out pairs as bootstrap units, stratified by label.

    One unit per sample record (id and elapse level: a trajectory appears at several elapse levels); its counts are
    its confusion cell (tp, fn, tn or fp = 1). A sample the rates leave out (a failed generation; an empty output
    under the paper protocol, as `summarize` does) stays a unit with all cells 0: it is drawn like any other, so the
    number of scored samples varies across resamples as it would across draws of the test set. Units are resampled
    within their label: NAR is the mean of the two per-label rates and each label's count is fixed by the data set's
    construction, not drawn.
    """
    protocol = (report.get("settings") or {}).get("protocol", "timealign")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown evaluation protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    samples = report.get("samples") or []
    cells = {k: np.zeros(len(samples)) for k in ("tp", "fn", "tn", "fp")}
    ids, strata = [], []
    for i, s in enumerate(samples):
        ids.append(f"{s['id']}@{s['elapse_level']}")
        strata.append(s["label"])
        if is_counted(s, protocol):
            cells[cell(s["label"], bool(s["tool_call"]))][i] = 1
    metrics = {
        "nar": nar_from_counts,
        "attempt_rate_prefer_tool": lambda c: _rate(c["tp"], c["tp"] + c["fn"]),
        "attempt_rate_prefer_no_tool": lambda c: _rate(c["fp"], c["tn"] + c["fp"]),
    }
    return SampleUnits("held-out pair", tuple(ids), tuple(strata), cells, metrics, stratified_by="label")
