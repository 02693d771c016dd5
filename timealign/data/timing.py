"""Interaction-time model of the TicToc paper (Sec. 2.4, Appendix B.4).

Every message gets the ISO time at which it was *completed*:

* a per-trajectory pace (reading speed r, writing speed w, generation speed g) is drawn
  from Table 3;
* intermediate delays follow from word counts: user -> writing time (+ reading time of the
  assistant message right before it), assistant -> generation time, tool -> ~1 s, each
  estimate plus a Gaussian jitter eps ~ N(0, sigma_eps^2);
* the gap before the final user message is drawn from Table 4 per (sensitivity, level).

Truncated distributions are sampled *exactly* by rejection: draw from the untruncated
normal and keep the draws inside [low, high]. All parameter sets of the paper keep at least
~97% of the mass inside the bounds, so rejection is both exact and cheap; a bound pair that
leaves almost no mass raises instead of looping forever.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from timealign.render.timefmt import format_time, parse_time

SENSITIVITIES = ("low", "medium", "high")
LEVELS = (0, 1, 2)
LEVEL_NAMES = ("small", "medium", "large")

# Default interaction-model constants not given numerically in the paper.
JITTER_SIGMA = 0.5  # seconds; "small random jitter" of Sec. 2.4
MIN_DELAY = 1.0  # seconds; >= 1 s keeps whole-second ISO strings strictly increasing
TOOL_SECONDS = 1.0  # "tool messages induce a ~1-second execution time"

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
MONTH = 30 * DAY  # Table 4 "months" are read as 30-day months

# Below this kept mass, rejection sampling would spin: refuse such bounds.
_MIN_MASS = 1e-6


# ---------------------------------------------------------------- ISO helpers


# One ISO parser/formatter for the whole project: the renderer's.
parse_iso = parse_time
format_iso = format_time


def _as_datetime(t: datetime | str) -> datetime:
    if isinstance(t, str):
        return parse_iso(t)
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


# ---------------------------------------------------------------- truncated sampling


def _phi_cdf(x: float) -> float:
    """Standard normal CDF (math.erf keeps us off scipy)."""
    if x == math.inf:
        return 1.0
    if x == -math.inf:
        return 0.0
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def truncated_normal(
    rng: np.random.Generator,
    mu: float,
    sigma: float,
    low: float = -math.inf,
    high: float = math.inf,
    size: int | None = None,
) -> float | np.ndarray:
    """Exact draw(s) from N(mu, sigma^2) truncated to [low, high], by rejection sampling.

    Returns a float when ``size`` is None, else an array of ``size`` draws.
    """
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if not low < high:
        raise ValueError(f"need low < high, got [{low}, {high}]")
    mass = _phi_cdf((high - mu) / sigma) - _phi_cdf((low - mu) / sigma)
    if mass < _MIN_MASS:
        raise ValueError(
            f"truncation [{low}, {high}] keeps only {mass:.2e} of N({mu}, {sigma}^2); "
            "rejection sampling would not terminate in reasonable time"
        )
    n = 1 if size is None else int(size)
    out = np.empty(n)
    filled = 0
    while filled < n:
        # Oversample by the expected rejection rate so one round almost always suffices.
        want = n - filled
        draws = rng.normal(mu, sigma, size=int(want / mass * 1.1) + 4)
        kept = draws[(draws >= low) & (draws <= high)][:want]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return float(out[0]) if size is None else out


def truncated_lognormal(
    rng: np.random.Generator,
    mu_log: float,
    sigma_log: float,
    low: float = 0.0,
    high: float = math.inf,
    size: int | None = None,
) -> float | np.ndarray:
    """Exact draw(s) of X = exp(Y), Y ~ N(mu_log, sigma_log^2), with X truncated to [low, high].

    ``mu_log``/``sigma_log`` live in log space; ``low``/``high`` are in the units of X
    (Table 3's writing speed: mu=3.61, sigma=0.40 in log-wpm, a=5 wpm).
    """
    if low < 0:
        raise ValueError(f"log-normal bounds must be >= 0, got low={low}")
    log_low = math.log(low) if low > 0 else -math.inf
    log_high = math.log(high) if high < math.inf else math.inf
    y = truncated_normal(rng, mu_log, sigma_log, log_low, log_high, size=size)
    # exp can round a boundary draw a hair below `low`: clip to keep the bound exact.
    x = np.clip(np.exp(y), low, high)
    return float(x) if size is None else x


# ---------------------------------------------------------------- Table 3: pace


class TruncParams(NamedTuple):
    """(mu, sigma, low, high) of a truncated (log-)normal."""

    mu: float
    sigma: float
    low: float
    high: float


@dataclass(frozen=True)
class Pace:
    """Per-trajectory speeds: reading / writing in words per minute, generation in words per second."""

    read_wpm: float
    write_wpm: float
    gen_wps: float


@dataclass(frozen=True)
class PaceModel:
    """Table 3 pace distributions (defaults = the paper's values)."""

    read_wpm: TruncParams = TruncParams(238.0, 60.0, 50.0, math.inf)  # TN
    write_wpm: TruncParams = TruncParams(3.61, 0.40, 5.0, math.inf)  # TLN: mu/sigma in log space
    gen_wps: TruncParams = TruncParams(40.0, 16.0, 10.0, math.inf)  # TN

    def sample(self, rng: np.random.Generator) -> Pace:
        return Pace(
            read_wpm=truncated_normal(rng, *self.read_wpm),
            write_wpm=truncated_lognormal(rng, *self.write_wpm),
            gen_wps=truncated_normal(rng, *self.gen_wps),
        )


PACE_MODEL = PaceModel()


def sample_pace(rng: np.random.Generator, model: PaceModel = PACE_MODEL) -> Pace:
    """Draw one trajectory's (r, w, g) from Table 3."""
    return model.sample(rng)


# ---------------------------------------------------------------- Sec 2.4: delays

_WORD = re.compile(r"\S+")


def word_count(message: Mapping[str, Any]) -> int:
    """Words a message contributes to the pace model (text, or tool-call names + arguments)."""
    content = message.get("content")
    n = len(_WORD.findall(content)) if isinstance(content, str) else 0
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {})
        # Count JSON tokens split on punctuation too: '{"ticker": "AAPL"}' is ~2 words, not 2 blobs.
        n += len(re.findall(r"\w+", str(fn.get("name", "")) + " " + str(fn.get("arguments", ""))))
    return n


def message_delays(
    messages: Sequence[Mapping[str, Any]],
    pace: Pace,
    rng: np.random.Generator | None,
    jitter_sigma: float = JITTER_SIGMA,
    min_delay: float = MIN_DELAY,
    tool_seconds: float = TOOL_SECONDS,
) -> list[float]:
    """Seconds between the completion of message i-1 and message i (entry 0 is 0).

    * leading system messages and the first non-system message get 0: the start time *is*
      the completion time of the first user message (system and first user share it in v1);
    * user: writing time words/w*60 (+ reading time words(prev)/r*60 if the previous
      message is an assistant message);
    * assistant: generation time words/g;
    * tool: ``tool_seconds``.

    Each estimate gets its own jitter N(0, jitter_sigma^2); the sum is floored at
    ``min_delay`` so timestamps stay strictly increasing. ``rng`` may be None iff
    ``jitter_sigma == 0``.
    """
    if jitter_sigma > 0 and rng is None:
        raise ValueError("rng is required when jitter_sigma > 0")

    def jitter() -> float:
        return float(rng.normal(0.0, jitter_sigma)) if jitter_sigma > 0 else 0.0

    delays = [0.0] * len(messages)
    started = False  # the clock starts at the first non-system message
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if not started:
            started = role != "system"
            continue
        if role == "user":
            d = word_count(msg) / pace.write_wpm * 60.0 + jitter()
            prev = messages[i - 1]
            if prev.get("role") == "assistant":
                d += word_count(prev) / pace.read_wpm * 60.0 + jitter()
        elif role == "assistant":
            d = word_count(msg) / pace.gen_wps + jitter()
        elif role == "tool":
            d = tool_seconds + jitter()
        elif role == "system":
            d = 0.0  # a mid-conversation system note takes no time; the floor still orders it
        else:
            raise ValueError(f"unknown role {role!r} at message {i}")
        delays[i] = max(d, min_delay)
    return delays


def assign_timestamps(
    messages: Sequence[Mapping[str, Any]],
    start: datetime | str,
    rng: np.random.Generator,
    pace: Pace | None = None,
    jitter_sigma: float = JITTER_SIGMA,
) -> list[dict[str, Any]]:
    """Deep copies of ``messages`` with an ISO ``time`` on each (start = first user message time).

    Times are accumulated in float seconds and truncated to whole seconds only when
    formatted, so rounding never accumulates; ``MIN_DELAY`` >= 1 s keeps them strictly
    increasing after the first user message.
    """
    if pace is None:
        pace = sample_pace(rng)
    t0 = _as_datetime(start).replace(microsecond=0)
    delays = message_delays(messages, pace, rng, jitter_sigma=jitter_sigma)
    out: list[dict[str, Any]] = []
    elapsed = 0.0
    for msg, d in zip(messages, delays):
        elapsed += d
        new = copy.deepcopy(dict(msg))
        new["time"] = format_iso(t0 + timedelta(seconds=math.floor(elapsed)))
        out.append(new)
    return out


# ---------------------------------------------------------------- Table 4: final gap

# GAP_TABLE[sensitivity][level] -> (mu, sigma, low, high) in seconds; level 0/1/2 = small/medium/large.
GAP_TABLE: dict[str, tuple[TruncParams, TruncParams, TruncParams]] = {
    "low": (
        TruncParams(3 * MINUTE, 1 * MINUTE, 1 * MINUTE, 6 * MINUTE),
        TruncParams(3 * DAY, 1 * DAY, 1 * DAY, 6 * DAY),
        TruncParams(3 * MONTH, 1 * MONTH, 1 * MONTH, 6 * MONTH),
    ),
    "medium": (
        TruncParams(3 * MINUTE, 1 * MINUTE, 1 * MINUTE, 6 * MINUTE),
        TruncParams(3 * HOUR, 1 * HOUR, 1 * HOUR, 6 * HOUR),
        TruncParams(3 * DAY, 1 * DAY, 1 * DAY, 6 * DAY),
    ),
    "high": (
        TruncParams(3.0, 1.0, 1.0, 6.0),
        TruncParams(3 * MINUTE, 1 * MINUTE, 1 * MINUTE, 6 * MINUTE),
        TruncParams(3 * HOUR, 1 * HOUR, 1 * HOUR, 6 * HOUR),
    ),
}


def _check(sensitivity: str, level: int) -> None:
    if sensitivity not in GAP_TABLE:
        raise ValueError(f"sensitivity must be one of {SENSITIVITIES}, got {sensitivity!r}")
    if level not in LEVELS:
        raise ValueError(f"elapse level must be one of {LEVELS}, got {level!r}")


def sample_gap(rng: np.random.Generator, sensitivity: str, level: int) -> float:
    """Seconds between the penultimate message and the final user question (Table 4)."""
    _check(sensitivity, level)
    return truncated_normal(rng, *GAP_TABLE[sensitivity][level])


def final_user_times(last_time: datetime | str, sensitivity: str, rng: np.random.Generator) -> list[str]:
    """The 3 ISO times (small, medium, large gap) of the final user message, as in the v1 layout.

    Gaps are truncated to whole seconds, so the gap read back from the strings is the one a
    label should use.
    """
    t = _as_datetime(last_time).replace(microsecond=0)
    return [format_iso(t + timedelta(seconds=math.floor(sample_gap(rng, sensitivity, lv)))) for lv in LEVELS]
