"""Simulated annotator panels for the synthetic TicToc data: per-annotator four-point answers, their mean S, and the
paper's retention rule.

The paper (Sec 2.5, App. B.5) asks at least five people per sample for one of four answers, scored Direct 0,
Lean-Direct 1, Lean-Tool 2, Tool 3; S is their mean, and samples with 0.5 <= S <= 2.5 are left out of the
evaluation (3,016 of 5,592 kept). `AnnotatorPanel` simulates that panel so the margin delta = |S - 1.5| carries
information a constant margin cannot: near the time rule's threshold annotators disagree, S drifts toward 1.5 and
the majority may even side against the rule.

Model. The evidence for calling the tool again is e = ln(gap / threshold) (the threshold of the tool's sensitivity,
`labels.DEFAULT_THRESHOLDS`): positive means the gap exceeds it. Annotator j reads z_j = e + sigma_s * n_j with
n_j ~ N(0, 1) and answers Tool if z_j > lean, Lean-Tool if 0 < z_j <= lean, Lean-Direct if -lean <= z_j <= 0,
Direct otherwise. sigma_s = noise * exp(disagreement * g_s): g_s ~ N(0, 1) is drawn once per scenario from the
panel's seed and the scenario's name, so some scenarios are contested more than others (disagreement = 0: all alike).
The votes use the panel's own random stream, so the same panel gives the same answers for the same trajectories.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from timealign.data.synthetic.labels import DEFAULT_THRESHOLDS

ANSWERS = ("Direct", "Lean-Direct", "Lean-Tool", "Tool")  # scored 0..3 ("tool_high"), the paper's survey
# The paper's retention rule: S in [RETAIN_LOW, RETAIN_HIGH] is ambiguous and left out of the evaluation.
RETAIN_LOW, RETAIN_HIGH = 0.5, 2.5
TIE = 1.5
AMBIGUOUS_KEPT_IN = ("none", "train", "all")


def is_ambiguous(score: float) -> bool:
    """True iff the paper's evaluation would drop the sample (0.5 <= S <= 2.5)."""
    return RETAIN_LOW <= score <= RETAIN_HIGH


@dataclass(frozen=True)
class AnnotatorPanel:
    """A seeded panel of simulated annotators (module docstring)."""

    count: int = 5
    noise: float = 1.0
    disagreement: float = 0.5
    lean: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"annotator count must be >= 1, got {self.count}")
        for name in ("noise", "disagreement", "lean"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"annotator {name} must be a finite number >= 0, got {value}")

    def scenario_sigma(self, scenario: str) -> float:
        """The judgment noise of this panel on one scenario (stable across runs: seeded by the scenario's name)."""
        digest = hashlib.sha256(f"{self.seed}:{scenario}".encode()).digest()
        g = float(np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal())
        return self.noise * math.exp(self.disagreement * g)

    def votes(
        self,
        rng: np.random.Generator,
        scenario: str,
        sensitivity: str,
        gap_seconds: float,
        thresholds: Mapping[str, float] = DEFAULT_THRESHOLDS,
    ) -> list[int]:
        """`count` answers in 0..3 for one sample."""
        if sensitivity not in thresholds:
            raise ValueError(f"no threshold for sensitivity {sensitivity!r}; have {sorted(thresholds)}")
        evidence = math.log(max(gap_seconds, 1e-9) / thresholds[sensitivity])
        z = evidence + self.scenario_sigma(scenario) * rng.standard_normal(self.count)
        answers = np.where(z > self.lean, 3, np.where(z > 0, 2, np.where(z >= -self.lean, 1, 0)))
        return [int(a) for a in answers]


def mean_score(votes: Iterable[int]) -> float:
    values = list(votes)
    return round(sum(values) / len(values), 4)


def retain(records: list[dict], ambiguous_kept_in: str = "train") -> tuple[list[dict], dict]:
    """The records the paper's retention rule keeps, and counts of what was dropped.

    `ambiguous_kept_in`: none (drop 0.5 <= S <= 2.5 everywhere, the paper's evaluation set), train (keep them in the
    train-split scenarios only: training may use them, the evaluation never does) or all. An exact tie (S = 1.5)
    is always dropped: it prefers neither action, so it makes no preference pair (the annotated loader refuses it).
    Records need `score` and `scenario` (a synthetic template's scenario name: it gives the split).
    """
    from timealign.data.synthetic.templates import TEMPLATES

    split_of = {t.scenario: t.split for t in TEMPLATES}
    if ambiguous_kept_in not in AMBIGUOUS_KEPT_IN:
        raise ValueError(f"ambiguous_kept_in must be one of {', '.join(AMBIGUOUS_KEPT_IN)}, got {ambiguous_kept_in!r}")
    kept, ties, ambiguous_dropped = [], 0, 0
    for r in records:
        if r["score"] == TIE:
            ties += 1
            continue
        in_train = split_of[r["scenario"]] == "train"
        keep_ambiguous = ambiguous_kept_in == "all" or (ambiguous_kept_in == "train" and in_train)
        if is_ambiguous(r["score"]) and not keep_ambiguous:
            ambiguous_dropped += 1
            continue
        kept.append(r)
    return kept, {
        "ties_dropped": ties,
        "ambiguous_dropped": ambiguous_dropped,
        "kept": len(kept),
        "ambiguous_kept": sum(is_ambiguous(r["score"]) for r in kept),
    }
