"""What a bootstrap resamples in a suite's report: its units (samples) and the per-unit counts its metrics sum.

Every metric the intervals cover is a function of sums over units: a rate is (hits summed) / (cases summed), a mean
is (values summed) / (count summed), NAR is `nar_from_counts` of the summed confusion cells, corpus BLEU is sacrebleu's
formula over the summed n-gram statistics, RMSLE is sqrt(summed squared log errors / summed cases). So the metric of
any multiset of units (a bootstrap resample) is `metric(weights @ counts)`, with `weights[i]` how often unit i was
drawn, and the metric of the full report is the one with every weight 1: the number the suite reported.

Each suite's metric module builds its `SampleUnits` from a report (`tictoc_units`, `timelychat_units`, ...), from the
report's own per-sample records, so compare.py can rebuild them from two saved JSON reports and pair them by id.
The resampling itself (scipy.stats.bootstrap) is `timealign.eval.bootstrap`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

Metric = Callable[[Mapping[str, float]], "float | None"]


@dataclass(frozen=True)
class SampleUnits:
    """One report's units. `counts[name][i]` is unit i's contribution to the sum `name`; `metrics[key](sums)` is the
    report's `overall[key]` computed from sums (None where it is undefined, e.g. a rate over no cases).

    unit: what one unit is, in words ("held-out pair", "dialog"); ids: one per unit, unique (the key that pairs two
    runs' units); strata: one per unit, units are resampled within their stratum so each stratum keeps its size
    (`stratified_by` names it; None: one stratum, a plain bootstrap); notes: what the units leave out and why.
    """

    unit: str
    ids: tuple[str, ...]
    strata: tuple[str, ...]
    counts: dict[str, np.ndarray]
    metrics: dict[str, Metric]
    stratified_by: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        n = len(self.ids)
        if len(self.strata) != n:
            raise ValueError(f"{len(self.strata)} strata for {n} units")
        for name, column in self.counts.items():
            if np.shape(column) != (n,):
                raise ValueError(f"counts[{name!r}] has shape {np.shape(column)}, expected ({n},)")

    def __len__(self) -> int:
        return len(self.ids)

    def columns(self) -> tuple[list[str], np.ndarray]:
        """The count names and the (units x names) matrix of floats."""
        names = list(self.counts)
        matrix = (
            np.column_stack([np.asarray(self.counts[k], dtype=float) for k in names])
            if names
            else np.zeros((len(self), 0))
        )
        return names, matrix

    def value(self, key: str) -> float | None:
        """`metrics[key]` over every unit once: the number the report states."""
        names, matrix = self.columns()
        return self.metrics[key](dict(zip(names, matrix.sum(axis=0).tolist())))

    def duplicate_ids(self) -> list[str]:
        seen, dup = set(), []
        for i in self.ids:
            if i in seen:
                dup.append(i)
            seen.add(i)
        return dup


def rate(num: float, den: float) -> float | None:
    """num / den, None when den is 0 (the metric is undefined on no cases)."""
    return num / den if den else None


def mean_metric(total: str, count: str) -> Metric:
    """The mean of a per-unit value: sums[total] / sums[count]."""
    return lambda sums: rate(sums[total], sums[count])


def mean_units(report: dict, fields: Mapping[str, str], unit: str) -> SampleUnits:
    """Units for metrics that are means over every sample record: `overall[key]` = the mean of `sample[field]`
    (booleans as 0/1) for each `key: field` of `fields`; one unit per sample, no strata. Every record counts, as in
    the suites' scores (a failed generation is scored as an unparseable answer, i.e. wrong)."""
    samples = report.get("samples") or []
    counts = {"samples": np.ones(len(samples))}
    for key, name in fields.items():
        missing = [s.get("id", i) for i, s in enumerate(samples) if s.get(name) is None]
        if missing:
            raise ValueError(f"{len(missing)} sample records have no {name!r} (first: {missing[0]})")
        counts[key] = np.asarray([float(s[name]) for s in samples])
    return SampleUnits(
        unit,
        tuple(str(s["id"]) for s in samples),
        ("all",) * len(samples),
        counts,
        {key: mean_metric(key, "samples") for key in fields},
    )
