"""Bootstrap confidence intervals of the evaluation metrics, and paired before/after differences.

What is resampled. A report's units (`timealign.suites.units.SampleUnits`, built from the report's own per-sample
records by the suite: TicToc's held-out pairs, TimelyChat's dialogs, the reasoning suites' items) are drawn with
replacement, each stratum separately and keeping its size (TicToc: by label, since NAR is the mean of the two
per-label rates; the others: one stratum). A resample's metric is the suite's own metric of the counts summed over
the drawn units (a unit drawn k times counts k times), so the full set of units gives exactly the reported number.
`scipy.stats.bootstrap` draws the resamples (one data sample per stratum: that stratum's unit positions, strata in
sorted order; `rng=numpy.random.default_rng(seed)`) and takes the percentile interval (`method="percentile"`).
Every metric of a report is computed on the same resamples. The seed is fixed (`SEED`), so the same report gives the
same intervals every time.

JSON shape: `report["intervals"]`, one block per suite report::

    {"method": "percentile", "confidence": 0.95, "resamples": 1000, "seed": 0,
     "unit": "held-out pair", "units": 480, "stratified_by": "label",
     "metrics": {"nar": [0.49, 0.56], "attempt_rate_prefer_tool": [0.41, 0.52], ...},
     "notes": []}

`metrics[key]` is `[low, high]` around `overall[key]`, or null where there is no interval: the metric is undefined
(n/a) on the full set or on some resample (e.g. an FPR when a resample holds no instant case), or a stratum has
fewer than 2 units; `notes` says which and why. With `eval.bootstrap=0` the block is absent.

Paired differences (`paired_differences`, used by compare.py): the two runs' units are matched by id (refused when
the two runs scored different sample sets: `SampleSetMismatch`); each resample draws unit positions once and scores
both runs on the same drawn units, so the interval is that of `metric(after) - metric(before)` with the sample-to-
sample variation shared by both runs taken out. A difference is "outside noise" when its interval excludes 0.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from timealign.suites.units import SampleUnits

SEED = 0
METHOD = "percentile"
BATCH_CELLS = 4_000_000  # resamples x units held in memory at once (scipy's `batch`)


# The suites whose reports have bootstrap units (`suite_units`).
UNIT_SUITES = ("tictoc", "timelychat", "timepuzzles", "chronosense", "tcp")


class SampleSetMismatch(ValueError):
    """Two reports cannot be paired: they scored different sample sets (or a sample under different strata)."""


def suite_units(report: dict, suite: str | None = None) -> SampleUnits | None:
    """The report's bootstrap units, by its suite's builder; None for a suite or report without any (e.g.
    TimelyChat's dialog-level-only report). `suite` defaults to `report["suite"]`."""
    from timealign.suites.chronosense.score import chronosense_units
    from timealign.suites.tcp.score import tcp_units
    from timealign.suites.tictoc.metrics import tictoc_units
    from timealign.suites.timelychat.metrics import timelychat_units
    from timealign.suites.timepuzzles.score import timepuzzles_units

    builders: dict[str, Callable[[dict], SampleUnits | None]] = dict(
        zip(UNIT_SUITES, (tictoc_units, timelychat_units, timepuzzles_units, chronosense_units, tcp_units))
    )
    builder = builders.get(suite or report.get("suite") or "")
    return builder(report) if builder is not None else None


# ================================================================================================ the engine


def _strata(units: SampleUnits) -> tuple[list[str], list[np.ndarray]]:
    """Stratum names (sorted) and each one's unit positions (in report order)."""
    names = sorted(set(units.strata))
    strata = np.asarray(units.strata, dtype=object)
    return names, [np.flatnonzero(strata == name) for name in names]


def _weights(positions: np.ndarray, n: int) -> np.ndarray:
    """(batch, n) draw counts from (batch, draws) drawn unit positions."""
    batch = positions.shape[0]
    offsets = positions + (np.arange(batch) * n)[:, None]
    return np.bincount(offsets.ravel(), minlength=batch * n).reshape(batch, n).astype(float)


def _metric_rows(fns: list[Callable], names: list[str], sums: np.ndarray) -> np.ndarray:
    """(metrics, batch): each metric of each row of summed counts; NaN where the metric is undefined (None)."""
    out = np.full((len(fns), sums.shape[0]), np.nan)
    for r, row in enumerate(sums):
        values = dict(zip(names, row.tolist()))
        for j, fn in enumerate(fns):
            v = fn(values)
            if v is not None:
                out[j, r] = v
    return out


def _percentile_bootstrap(
    strata: list[np.ndarray],
    n_units: int,
    values_of: Callable[[np.ndarray], np.ndarray],
    n_metrics: int,
    *,
    resamples: int,
    confidence: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """scipy.stats.bootstrap over the strata's unit positions; `values_of(weights)` maps (batch, n_units) draw
    counts to (metrics, batch) values. Returns low, high (per metric) and the resamples with an undefined value."""
    from scipy.stats import DegenerateDataWarning, bootstrap

    def statistic(*resampled, axis=-1):
        drawn = np.concatenate([np.atleast_2d(r) for r in resampled], axis=-1)
        return values_of(_weights(drawn, n_units))

    with warnings.catch_warnings():
        # A metric undefined on some resample makes its bound NaN, which scipy reports with a BCa-worded warning;
        # the caller turns those NaN bounds into null intervals with a note instead.
        warnings.simplefilter("ignore", DegenerateDataWarning)
        res = bootstrap(
            tuple(strata),
            statistic,
            n_resamples=resamples,
            batch=max(1, min(resamples, BATCH_CELLS // max(n_units, 1))),
            vectorized=True,
            axis=-1,
            confidence_level=confidence,
            method=METHOD,
            rng=np.random.default_rng(seed),
        )
    dist = np.asarray(res.bootstrap_distribution).reshape(n_metrics, -1)
    low = np.asarray(res.confidence_interval.low).reshape(n_metrics)
    high = np.asarray(res.confidence_interval.high).reshape(n_metrics)
    return low, high, np.isnan(dist).sum(axis=1)


def _too_small(names: list[str], strata: list[np.ndarray], unit: str) -> str | None:
    if not any(len(pos) for pos in strata):
        return f"no intervals: no {unit}s to resample (nothing was scored)"
    small = [f"{name} ({len(pos)})" for name, pos in zip(names, strata) if len(pos) < 2]
    if small:
        where = "stratum " + ", ".join(small) if len(names) > 1 else f"{len(strata[0])} {unit}s"
        return f"no intervals: a bootstrap needs at least 2 {unit}s per stratum ({where})"
    return None


def _interval(
    low: float, high: float, point: float | None, undefined: int, key: str, notes: list[str]
) -> list[float] | None:
    if point is None:
        return None
    if undefined:
        notes.append(
            f"{key}: no interval, undefined in {undefined} resamples (e.g. no case of the class its "
            "denominator counts)"
        )
        return None
    return [float(low), float(high)]


def bootstrap_intervals(
    units: SampleUnits, *, resamples: int = 1000, confidence: float = 0.95, seed: int = SEED
) -> dict:
    """The `intervals` block (module docstring) of one report's metrics."""
    keys = list(units.metrics)
    names, matrix = units.columns()
    stratum_names, strata = _strata(units)
    block = {
        "method": METHOD,
        "confidence": confidence,
        "resamples": resamples,
        "seed": seed,
        "unit": units.unit,
        "units": len(units),
        "stratified_by": units.stratified_by,
        "metrics": {k: None for k in keys},
        "notes": list(units.notes),
    }
    problem = _too_small(stratum_names, strata, units.unit)
    if problem:
        block["notes"].append(problem)
        return block
    fns = [units.metrics[k] for k in keys]
    low, high, undefined = _percentile_bootstrap(
        strata,
        len(units),
        lambda w: _metric_rows(fns, names, w @ matrix),
        len(keys),
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )
    for j, key in enumerate(keys):
        block["metrics"][key] = _interval(low[j], high[j], units.value(key), int(undefined[j]), key, block["notes"])
    return block


def attach_intervals(
    report: dict, *, resamples: int, confidence: float, suite: str | None = None, seed: int = SEED
) -> dict | None:
    """Set `report["intervals"]` (module docstring) when `resamples` > 0 and the suite has units; returns it."""
    if resamples <= 0:
        return None
    units = suite_units(report, suite)
    if units is None:
        return None
    report["intervals"] = bootstrap_intervals(units, resamples=resamples, confidence=confidence, seed=seed)
    return report["intervals"]


# ============================================================================================ paired differences


def _align(before: SampleUnits, after: SampleUnits) -> SampleUnits:
    """`after`'s units in `before`'s order (matched by id); raises SampleSetMismatch when they differ."""
    for name, units in (("before", before), ("after", after)):
        dup = units.duplicate_ids()
        if dup:
            raise SampleSetMismatch(
                f"the {name} report lists {len(dup)} {units.unit} ids more than once (first: "
                f"{dup[0]}): its samples cannot be matched by id"
            )
    ids_before, ids_after = set(before.ids), set(after.ids)
    only_before = [i for i in before.ids if i not in ids_after]
    only_after = [i for i in after.ids if i not in ids_before]
    if only_before or only_after:
        raise SampleSetMismatch(
            f"the two runs scored different sample sets ({len(before)} {before.unit}s before, {len(after)} after; "
            f"{len(only_before)} only before{f', first: {only_before[0]}' if only_before else ''}; "
            f"{len(only_after)} only after{f', first: {only_after[0]}' if only_after else ''}): a paired comparison "
            "needs the same samples in both (the same data, eval.max_samples and suite options)"
        )
    where = {i: k for k, i in enumerate(after.ids)}
    order = [where[i] for i in before.ids]
    moved = [i for i, s, k in zip(before.ids, before.strata, order) if after.strata[k] != s]
    if moved:
        raise SampleSetMismatch(
            f"{len(moved)} {before.unit}s are in different {before.stratified_by} strata in the "
            f"two runs (first: {moved[0]}): the two runs scored different data"
        )
    return SampleUnits(
        after.unit,
        before.ids,
        before.strata,
        {k: np.asarray(v)[order] for k, v in after.counts.items()},
        after.metrics,
        after.stratified_by,
        after.notes,
    )


def paired_differences(
    before: SampleUnits, after: SampleUnits, *, resamples: int = 1000, confidence: float = 0.95, seed: int = SEED
) -> dict:
    """Paired bootstrap of `metric(after) - metric(before)` for every metric both reports have (module docstring).

    Returns {"method", "confidence", "resamples", "seed", "unit", "units", "stratified_by", "notes", "metrics":
    {key: {"before", "after", "difference", "interval": [low, high] | None, "outside_noise": bool | None}}}.
    Raises SampleSetMismatch when the two reports scored different sample sets.
    """
    after = _align(before, after)
    keys = [k for k in before.metrics if k in after.metrics]
    names_b, matrix_b = before.columns()
    names_a, matrix_a = after.columns()
    stratum_names, strata = _strata(before)
    result = {
        "method": METHOD,
        "confidence": confidence,
        "resamples": resamples,
        "seed": seed,
        "unit": before.unit,
        "units": len(before),
        "stratified_by": before.stratified_by,
        "notes": [],
        "metrics": {},
    }
    points = {k: (before.value(k), after.value(k)) for k in keys}
    for key, (b, a) in points.items():
        result["metrics"][key] = {
            "before": b,
            "after": a,
            "difference": None if a is None or b is None else a - b,
            "interval": None,
            "outside_noise": None,
        }
    problem = _too_small(stratum_names, strata, before.unit)
    if problem or not keys:
        result["notes"].append(problem or "the two reports have no metric in common")
        return result
    fns_b = [before.metrics[k] for k in keys]
    fns_a = [after.metrics[k] for k in keys]

    def differences(w: np.ndarray) -> np.ndarray:
        return _metric_rows(fns_a, names_a, w @ matrix_a) - _metric_rows(fns_b, names_b, w @ matrix_b)

    low, high, undefined = _percentile_bootstrap(
        strata, len(before), differences, len(keys), resamples=resamples, confidence=confidence, seed=seed
    )
    for j, key in enumerate(keys):
        row = result["metrics"][key]
        row["interval"] = _interval(low[j], high[j], row["difference"], int(undefined[j]), key, result["notes"])
        if row["interval"] is not None:
            row["outside_noise"] = bool(row["interval"][0] > 0 or row["interval"][1] < 0)
    return result


# ================================================================================================= reporting


def verdict(row: dict) -> str:
    """ "outside noise" / "within noise" / "n/a" for one metric of `paired_differences`."""
    return "n/a" if row["outside_noise"] is None else ("outside noise" if row["outside_noise"] else "within noise")


def fmt_interval(interval: list[float] | None, digits: int = 3) -> str:
    return "n/a" if interval is None else f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def intervals_markdown(report: dict) -> str:
    """The report.md table of a report's intervals (empty without an `intervals` block)."""
    block = report.get("intervals")
    if not block:
        return ""
    overall = report.get("overall", {})
    strata = f", resampled within each {block['stratified_by']}" if block.get("stratified_by") else ""
    head = (
        f"**{100 * block['confidence']:g}% bootstrap intervals** ({block['method']}, {block['resamples']} "
        f"resamples of the {block['units']} {block['unit']}s{strata}, seed {block['seed']})"
    )
    lines = [head, "", "| metric | value | interval |", "|---|---|---|"]
    for key, interval in block["metrics"].items():
        value = overall.get(key)
        shown = "n/a" if value is None else f"{value:.3f}"
        lines.append(f"| {key} | {shown} | {fmt_interval(interval)} |")
    if block.get("notes"):
        lines += [""] + [f"- {note}" for note in block["notes"]]
    return "\n".join(lines) + "\n"
