"""Labels and annotator scores of the synthetic TicToc data: a time rule and simulated annotators.

Label rule (``prefers_tool``): calling the tool again is preferred iff the actual gap before
the final question exceeds a per-sensitivity threshold. ``DEFAULT_THRESHOLDS`` sit in the
holes between Table 4's level ranges, so with the paper's gaps the label equals:

==========  ===========  ====================  ===========================
sensitivity threshold    small / medium / large  Table 4 ranges
==========  ===========  ====================  ===========================
low         7 days       direct/direct/tool    1-6 min / 1-6 d / 1-6 months
medium      30 minutes   direct/tool/tool      1-6 min / 1-6 h / 1-6 d
high        30 seconds   direct/tool/tool      1-6 s / 1-6 min / 1-6 h
==========  ===========  ====================  ===========================

The generator computes the label from the gap read back from the ISO strings, never from the level.

Annotator score S in [0, 3] (Sec 2.5 / App. D.2, orientation "tool_high": 0 Direct,
1 Lean-Direct, 2 Lean-Tool, 3 Tool) is the mean of 5 simulated votes whose confidence grows
with the log-distance between gap and threshold: far from it S is ~0 or ~3, close to it S
drifts toward 1.5 (but always stays on the label's side).
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Mapping

import numpy as np

from timealign.data.timing import DAY, MINUTE

SCORE_ORIENTATION = "tool_high"
N_ANNOTATORS = 5

# Seconds; see the module docstring for why these values (holes between Table 4 ranges).
DEFAULT_THRESHOLDS: Mapping[str, float] = MappingProxyType({"low": 7 * DAY, "medium": 30 * MINUTE, "high": 30.0})

# Annotator confidence as a function of m = |ln(gap / threshold)|: P(vote on the label's
# side) = 0.5 + 0.5 tanh(m / SIDE_SCALE), P(strong vote | right side) = tanh(m / STRONG_SCALE),
# both capped so even obvious samples keep a little annotator noise.
SIDE_SCALE = 0.5
STRONG_SCALE = 1.0
MAX_P_SIDE = 0.98
MAX_P_STRONG = 0.95


def prefers_tool(sensitivity: str, gap_seconds: float, thresholds: Mapping[str, float] = DEFAULT_THRESHOLDS) -> bool:
    """True iff the gap before the final question exceeds the sensitivity's threshold."""
    if sensitivity not in thresholds:
        raise ValueError(f"no threshold for sensitivity {sensitivity!r}; have {sorted(thresholds)}")
    return gap_seconds > thresholds[sensitivity]


def simulate_score(
    rng: np.random.Generator,
    sensitivity: str,
    gap_seconds: float,
    thresholds: Mapping[str, float] = DEFAULT_THRESHOLDS,
    n_annotators: int = N_ANNOTATORS,
) -> float:
    """Mean of ``n_annotators`` integer votes in 0..3 ("tool_high"), on the side of ``prefers_tool``.

    With an odd number of annotators the mean is never exactly 1.5, so the side is always
    defined; draws that land on the wrong side are redrawn (rejection keeps the score
    consistent with the rule while still getting closer to 1.5 near the threshold).
    """
    tool = prefers_tool(sensitivity, gap_seconds, thresholds)
    th = thresholds[sensitivity]
    # Log-distance to the threshold; a rule that never/always fires (0 or inf) is "obvious".
    m = math.inf if th <= 0 or math.isinf(th) else abs(math.log(max(gap_seconds, 1e-9) / th))
    p_side = min(MAX_P_SIDE, 0.5 + 0.5 * math.tanh(m / SIDE_SCALE))
    p_strong = min(MAX_P_STRONG, math.tanh(m / STRONG_SCALE))
    strong_v, lean_v, other_v = (3, 2, 1) if tool else (0, 1, 2)
    for _ in range(200):
        side = rng.random(n_annotators) < p_side
        strong = rng.random(n_annotators) < p_strong
        votes = np.where(side, np.where(strong, strong_v, lean_v), other_v)
        mean = float(votes.mean())
        if (mean > 1.5) == tool and mean != 1.5:
            return round(mean, 4)
    return 3.0 if tool else 0.0  # unreachable in practice: p_side >= 0.5 always
