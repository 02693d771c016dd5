"""The real-model experiment's arms (`arms=`): what each trains on, or that it is not trained, and how it is shown; the
paired comparisons the report makes between them."""

from __future__ import annotations

from dataclasses import dataclass

RECIPE, TIMER_RECIPE = "smol", "smol-timer"


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: dict[str, str]
    trained: bool
    description: str
    color: str


ARMS = {
    a.name: a
    for a in (
        Arm("base", {}, False, "smol untrained, timestamps", "#7f7f7f"),
        Arm("method", {}, True, "offset-DPO, timestamps", "#1f77b4"),
        Arm("elapsed", {"data.elapsed": "true"}, True, "offset-DPO, timestamps + elapsed badge", "#17becf"),
        Arm("control", {"data.timestamps": "false"}, True, "offset-DPO, no timestamps (control)", "#ff7f0e"),
        Arm("plain", {"dpo.margin_mode": "plain"}, True, "plain DPO, timestamps", "#2ca02c"),
        Arm("clock", {"eval.backend": "clock"}, False, "the elapsed-time rule (1800 s), no model", "#d62728"),
    )
}
TRAINED = {name: arm.trained for name, arm in ARMS.items()}
# (a, b): the paired differences NAR(a) - NAR(b) the report shows (those whose arms both ran)
COMPARISONS = (
    ("method", "base"),
    ("method", "control"),
    ("method", "clock"),
    ("method", "plain"),
    ("elapsed", "method"),
    ("elapsed", "clock"),
)
