"""Interaction-time model (paper Sec. 2.4, App. B.4: Tables 3 and 4)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from timealign.data.timing import (
    DAY,
    GAP_TABLE,
    HOUR,
    LEVELS,
    MINUTE,
    PACE_MODEL,
    SENSITIVITIES,
    Pace,
    assign_timestamps,
    final_user_times,
    format_iso,
    message_delays,
    parse_iso,
    sample_gap,
    sample_pace,
    truncated_lognormal,
    truncated_normal,
)


def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _cdf(x: float) -> float:
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def analytic_tn_mean(mu: float, sigma: float, a: float, b: float) -> float:
    """E[X] of N(mu, sigma^2) truncated to [a, b]."""
    al, be = (a - mu) / sigma, (b - mu) / sigma
    pdf_b = 0.0 if math.isinf(be) else _phi(be)
    return mu + sigma * (_phi(al) - pdf_b) / (_cdf(be) - _cdf(al))


@pytest.mark.parametrize(
    "mu, sigma, a, b",
    [
        (0.0, 1.0, -0.5, 2.0),
        (238.0, 60.0, 50.0, math.inf),  # Table 3 reading speed
        (40.0, 16.0, 10.0, math.inf),  # Table 3 generation speed
        (3.0, 1.0, 1.0, 6.0),  # Table 4 high/small
        (0.0, 1.0, 1.0, 3.0),  # only the right tail: heavy rejection, still exact
    ],
)
def test_truncated_normal_bounds_and_analytic_mean(mu, sigma, a, b):
    rng = np.random.default_rng(0)
    x = truncated_normal(rng, mu, sigma, a, b, size=200_000)
    assert x.shape == (200_000,)
    assert x.min() >= a and x.max() <= b
    expected = analytic_tn_mean(mu, sigma, a, b)
    # 5 standard errors (sd of a truncated normal <= sigma).
    assert abs(x.mean() - expected) < 5 * sigma / math.sqrt(x.size)
    # The truncation must actually move the mean where it binds (guards against a plain normal).
    if a > mu - 2 * sigma or b < mu + 2 * sigma:
        assert abs(expected - mu) > 5 * sigma / math.sqrt(x.size)


def test_truncated_normal_scalar_and_refuses_empty_mass():
    rng = np.random.default_rng(1)
    v = truncated_normal(rng, 0.0, 1.0, -1.0, 1.0)
    assert isinstance(v, float) and -1.0 <= v <= 1.0
    with pytest.raises(ValueError):
        truncated_normal(rng, 0.0, 1.0, 40.0, 41.0)
    with pytest.raises(ValueError):
        truncated_normal(rng, 0.0, 1.0, 2.0, 1.0)


def test_truncated_lognormal_writing_speed():
    """Table 3 writing speed: mu/sigma in log space, a = 5 wpm in linear space."""
    rng = np.random.default_rng(2)
    mu, sigma, a, b = PACE_MODEL.write_wpm
    assert (mu, sigma, a, b) == (3.61, 0.40, 5.0, math.inf)
    w = truncated_lognormal(rng, mu, sigma, a, b, size=100_000)
    assert w.min() >= 5.0
    # log w is a normal truncated to [ln 5, inf): its mean is the analytic truncated mean.
    expected = analytic_tn_mean(mu, sigma, math.log(a), math.inf)
    assert abs(np.log(w).mean() - expected) < 5 * sigma / math.sqrt(w.size)
    # median near exp(3.61) ~ 37 wpm: a plausible typing speed, not 3.61 wpm.
    assert 33 < np.median(w) < 41
    # With a bound that binds, the lower tail is cut off exactly at the bound.
    w2 = truncated_lognormal(rng, mu, sigma, 40.0, 60.0, size=20_000)
    assert w2.min() >= 40.0 and w2.max() <= 60.0


def test_sample_pace_respects_table3_bounds():
    rng = np.random.default_rng(3)
    paces = [sample_pace(rng) for _ in range(3000)]
    assert min(p.read_wpm for p in paces) >= 50
    assert min(p.write_wpm for p in paces) >= 5
    assert min(p.gen_wps for p in paces) >= 10
    assert abs(np.mean([p.read_wpm for p in paces]) - analytic_tn_mean(238, 60, 50, math.inf)) < 5
    assert abs(np.mean([p.gen_wps for p in paces]) - analytic_tn_mean(40, 16, 10, math.inf)) < 1.5


def test_gap_table_is_table4():
    assert GAP_TABLE["high"][0] == (3.0, 1.0, 1.0, 6.0)
    assert GAP_TABLE["medium"][1] == (3 * HOUR, HOUR, HOUR, 6 * HOUR)
    assert GAP_TABLE["low"][1] == (3 * DAY, DAY, DAY, 6 * DAY)
    assert GAP_TABLE["low"][2] == (90 * DAY, 30 * DAY, 30 * DAY, 180 * DAY)
    assert (
        GAP_TABLE["low"][0]
        == GAP_TABLE["medium"][0]
        == GAP_TABLE["high"][1]
        == (3 * MINUTE, MINUTE, MINUTE, 6 * MINUTE)
    )


@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
@pytest.mark.parametrize("level", LEVELS)
def test_sample_gap_within_table4(sensitivity, level):
    rng = np.random.default_rng(4)
    mu, sigma, a, b = GAP_TABLE[sensitivity][level]
    gaps = np.array([sample_gap(rng, sensitivity, level) for _ in range(2000)])
    assert gaps.min() >= a and gaps.max() <= b
    assert abs(gaps.mean() - analytic_tn_mean(mu, sigma, a, b)) < 5 * sigma / math.sqrt(gaps.size)


def test_sample_gap_rejects_unknown_keys():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        sample_gap(rng, "extreme", 0)
    with pytest.raises(ValueError):
        sample_gap(rng, "low", 3)


def test_reading_time_hand_computation():
    """User after assistant: writing time + reading time of the assistant message (jitter 0)."""
    pace = Pace(read_wpm=240.0, write_wpm=30.0, gen_wps=40.0)
    msgs = [
        {"role": "assistant", "content": " ".join(["word"] * 10)},
        {"role": "user", "content": "one two three four five"},
    ]
    d = message_delays(msgs, pace, None, jitter_sigma=0.0)
    # 5 words / 30 wpm = 10 s writing; 10 words / 240 wpm = 2.5 s reading.
    assert d == [0.0, pytest.approx(5 / 30 * 60 + 10 / 240 * 60)]
    assert d[1] == pytest.approx(12.5)


def test_delay_rules_per_role():
    pace = Pace(read_wpm=240.0, write_wpm=30.0, gen_wps=40.0)
    msgs = [
        {"role": "system", "content": "be helpful " * 20},
        {"role": "user", "content": "first question " * 5},  # start time: no delay
        {"role": "assistant", "content": " ".join(["w"] * 80)},  # 80 / 40 wps = 2 s
        {"role": "tool", "tool_call_id": "c", "name": "f", "content": "{}"},  # ~1 s
        {"role": "user", "content": "a b c d e f"},  # after a tool message: no reading time
        {"role": "assistant", "content": "ok"},  # 1 word -> 0.025 s, floored to 1 s
    ]
    d = message_delays(msgs, pace, None, jitter_sigma=0.0)
    assert d == pytest.approx([0.0, 0.0, 2.0, 1.0, 6 / 30 * 60, 1.0])
    with pytest.raises(ValueError):
        message_delays(msgs, pace, None, jitter_sigma=0.5)


def test_jitter_changes_delays_but_respects_floor():
    pace = Pace(read_wpm=240.0, write_wpm=30.0, gen_wps=40.0)
    msgs = [{"role": "user", "content": "hi"}] + [
        {"role": r, "content": "some words here " * 3} for r in ("assistant", "user") * 50
    ]
    rng = np.random.default_rng(5)
    d = np.array(message_delays(msgs, pace, rng, jitter_sigma=2.0)[1:])
    base = np.array(message_delays(msgs, pace, None, jitter_sigma=0.0)[1:])
    assert d.min() >= 1.0
    assert np.any(np.abs(d - base) > 0.1)


def _conversation(n_rounds: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are helpful."}]
    for k in range(n_rounds):
        msgs += [
            {"role": "user", "content": f"What is the price of item {k}?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{k}",
                        "type": "function",
                        "function": {"name": "get_price", "arguments": '{"item": "x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{k}", "name": "get_price", "content": '{"price": 3}'},
            {"role": "assistant", "content": f"Item {k} costs $3."},
        ]
    return msgs


def test_assign_timestamps_strictly_increasing_and_copies():
    rng = np.random.default_rng(6)
    msgs = _conversation(3)
    for _ in range(200):
        out = assign_timestamps(msgs, "2024-02-29T23:59:58Z", rng)
        assert len(out) == len(msgs)
        times = [parse_iso(m["time"]) for m in out]
        assert out[0]["time"] == out[1]["time"] == "2024-02-29T23:59:58Z"  # system and first user share start
        assert all(b > a for a, b in zip(times[1:], times[2:]))
        assert all(m["time"].endswith("Z") and len(m["time"]) == 20 for m in out)
    assert all("time" not in m for m in msgs)  # input untouched
    out[2]["tool_calls"][0]["id"] = "changed"
    assert msgs[2]["tool_calls"][0]["id"] == "call_0"


def test_assign_timestamps_with_fixed_pace_is_reproducible():
    pace = Pace(238.0, 37.0, 40.0)
    a = assign_timestamps(
        _conversation(2), datetime(2023, 5, 1, 9, 0, tzinfo=timezone.utc), np.random.default_rng(7), pace
    )
    b = assign_timestamps(_conversation(2), "2023-05-01T09:00:00Z", np.random.default_rng(7), pace)
    assert a == b


@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
def test_final_user_times_levels(sensitivity):
    rng = np.random.default_rng(8)
    last = "2023-03-21T10:00:05Z"
    for _ in range(300):
        times = final_user_times(last, sensitivity, rng)
        assert len(times) == 3
        gaps = [(parse_iso(t) - parse_iso(last)).total_seconds() for t in times]
        for lv, g in zip(LEVELS, gaps):
            _, _, a, b = GAP_TABLE[sensitivity][lv]
            assert a <= g <= b  # bounds are whole seconds, so flooring keeps them
        assert gaps[0] < gaps[1] < gaps[2]


def test_iso_helpers():
    dt = parse_iso("2023-03-21T10:00:05Z")
    assert dt == datetime(2023, 3, 21, 10, 0, 5, tzinfo=timezone.utc)
    assert parse_iso("2023-03-21T10:00:05+00:00") == dt
    assert parse_iso("2023-03-21T12:00:05+02:00") == dt
    assert parse_iso("2023-03-21T10:00:05") == dt  # naive = UTC
    assert format_iso(dt) == "2023-03-21T10:00:05Z"
    assert format_iso(dt + timedelta(microseconds=999_999)) == "2023-03-21T10:00:05Z"
    assert format_iso(datetime(2023, 3, 21, 10, 0, 5)) == "2023-03-21T10:00:05Z"
    assert format_iso(parse_iso("2024-12-31T23:59:59Z") + timedelta(seconds=1)) == "2025-01-01T00:00:00Z"


def test_real_v1_times_parse(tictoc_v1_dir):
    """The helpers read the real release's time strings (skips without ../shared)."""
    import json

    records = json.loads((tictoc_v1_dir / "preferTool_elapse_0.json").read_text())
    h = records[0]["history"]
    for m in h[:-1]:
        assert format_iso(parse_iso(m["time"])) == m["time"]
    assert [format_iso(parse_iso(t)) for t in h[-1]["time"]] == h[-1]["time"]
