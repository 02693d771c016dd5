"""Synthetic TicToc-style generator: layout, determinism, labels, splits, v1 layout."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from timealign.data import synthetic as S
from timealign.data.records import write_jsonl
from timealign.data.synthetic.cli import main as synthetic_main
from timealign.data.timing import GAP_TABLE, LEVELS, SENSITIVITIES, parse_iso

REPO_ROOT = Path(__file__).resolve().parents[1]

# Copied from the paper (Table 6 sensitivities; App. D.1 test split), independent of the module.
TABLE6_SENSITIVITY = {
    "Airline Baggage Policy": "low",
    "City Population Data": "low",
    "Regulatory Information Service": "low",
    "University Degree Requirements": "low",
    "Tide Height Tracker": "medium",
    "Movie Showtimes Finder": "medium",
    "Hotel Room Availability & Rates": "medium",
    "Weather Forecast Service": "medium",
    "Currency Exchange Rate": "medium",
    "Stock Market Order Book": "high",
    "Live Sports Score Tracker": "high",
    "Cryptocurrency Exchange Retrieval": "high",
    "Live Sports Betting Odds Retrieval": "high",
    "E-commerce Product Stock Checker": "high",
}
D1_TEST = {
    "Airline Baggage Policy",
    "Astronomical Object Info",
    "Chemical Safety Data Sheet (SDS)",
    "City Population Data",
    "Office Finder",
    "Patent Metadata Lookup",
    "Public Health Screening Guidelines",
    "Streaming Service Library Checker",
    "Airport Security Line Wait Time",
    "Hiking Trail Condition Report",
    "Hotel Room Availability & Rates",
    "Job Board Live Listings",
    "Movie Showtimes Finder",
    "Tide Height Tracker",
    "Cloud Server Load Balancer",
    "Emergency Alert / 911 Dispatch Interface",
    "ICU Vitals Monitor",
    "Live Auction Price Retrieval",
    "Live Sports Score Tracker",
    "Live Vehicle GPS Tracker",
    "Live Weather Sensor Data",
    "Restaurant Wait Time Checker",
    "Ride-Hailing Dispatch",
    "Stock Market Order Book",
    "Train Delay Tracker",
    "Urban Parking-Spot Reservation",
}
ISO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
RECORD_KEYS = {"id", "scenario", "history", "function", "elapse_level", "score", "score_orientation", "direct_answer"}
SLUGS = {t.slug for t in S.TEMPLATES}
SENS_OF = {t.scenario: t.sensitivity for t in S.TEMPLATES}


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return S.generate_annotated(300, seed=0)


def _gap(record: dict) -> float:
    h = record["history"]
    return (parse_iso(h[-1]["time"]) - parse_iso(h[-2]["time"])).total_seconds()


def test_templates_match_paper_tables():
    assert 10 <= len(S.TEMPLATES) <= 14
    assert len({t.slug for t in S.TEMPLATES}) == len(S.TEMPLATES)
    for t in S.TEMPLATES:
        assert TABLE6_SENSITIVITY[t.scenario] == t.sensitivity, t.scenario
        assert t.split == ("test" if t.scenario in D1_TEST else "train"), t.scenario
        assert 2 <= len(t.followups) <= 4 and len(t.entities) >= 2
        fn = t.tool_schema["function"]
        assert t.tool_schema["type"] == "function" and fn["parameters"]["required"] == [t.arg_name]
    cells = Counter((t.sensitivity, t.split) for t in S.TEMPLATES)
    for sens in SENSITIVITIES:
        for split in ("train", "test"):
            assert cells[(sens, split)] >= 2, (sens, split)


def test_determinism_per_seed():
    a = S.generate_annotated(25, seed=11)
    b = S.generate_annotated(25, seed=11)
    c = S.generate_annotated(25, seed=12)
    assert a == b
    assert json.dumps(a) == json.dumps(b)
    assert a != c


def test_record_layout(records):
    assert len(records) == 900
    for r in records:
        assert set(r) == RECORD_KEYS
        slug, n = r["id"].rsplit("_", 1)
        assert slug in SLUGS and n.isdigit() and int(n) >= 1
        assert r["scenario"] in TABLE6_SENSITIVITY
        assert r["elapse_level"] in (0, 1, 2)
        assert r["score_orientation"] == "tool_high"
        assert 0.0 <= r["score"] <= 3.0
        assert abs(r["score"] * 5 - round(r["score"] * 5)) < 1e-9  # mean of 5 integer votes
        assert isinstance(r["direct_answer"], str) and len(r["direct_answer"].split()) >= 5
        (schema,) = r["function"]
        assert schema["type"] == "function" and set(schema["function"]) == {"name", "description", "parameters"}

        h = r["history"]
        roles = [m["role"] for m in h]
        assert roles[0] == "system" and roles[-1] == "user"
        body = roles[1:-1]
        assert body in (["user", "assistant", "tool", "assistant"], ["user", "assistant", "tool", "assistant"] * 2)
        for m in h:
            assert isinstance(m["time"], str) and ISO_RE.match(m["time"]), m["time"]
        for i, m in enumerate(h):
            if m["role"] == "assistant" and m.get("tool_calls"):
                assert m["content"] is None
                (call,) = m["tool_calls"]
                assert set(call) == {"id", "type", "function"} and call["type"] == "function"
                assert call["function"]["name"] == schema["function"]["name"]
                args = json.loads(call["function"]["arguments"])
                assert set(args) == set(schema["function"]["parameters"]["required"])
                tool = h[i + 1]
                assert tool["role"] == "tool" and tool["tool_call_id"] == call["id"]
                assert tool["name"] == call["function"]["name"]
                assert isinstance(json.loads(tool["content"]), dict)
                assert isinstance(h[i + 2]["content"], str) and h[i + 2]["content"]


def test_times_strictly_increasing_and_levels_share_prefix(records):
    by_id = defaultdict(dict)
    for r in records:
        times = [parse_iso(m["time"]) for m in r["history"]]
        assert times[0] == times[1]  # system and first user share the start time
        assert all(b > a for a, b in zip(times[1:], times[2:]))
        assert 2023 <= times[0].year <= 2025
        by_id[r["id"]][r["elapse_level"]] = r
    assert len(by_id) == 300
    for levels in by_id.values():
        assert set(levels) == {0, 1, 2}
        prefix = levels[0]["history"][:-1]
        assert levels[1]["history"][:-1] == prefix and levels[2]["history"][:-1] == prefix
        assert levels[0]["history"][-1]["content"] == levels[2]["history"][-1]["content"]
        gaps = [_gap(levels[k]) for k in LEVELS]
        assert gaps[0] < gaps[1] < gaps[2]


def test_gaps_follow_table4(records):
    for r in records:
        _, _, a, b = GAP_TABLE[SENS_OF[r["scenario"]]][r["elapse_level"]]
        assert a <= _gap(r) <= b


def test_label_matches_rule_on_actual_gap(records):
    for r in records:
        tool = S.prefers_tool(SENS_OF[r["scenario"]], _gap(r))
        assert (r["score"] > 1.5) == tool, r["id"]


def test_both_labels_for_every_sensitivity(records):
    labels = defaultdict(set)
    for r in records:
        labels[SENS_OF[r["scenario"]]].add(r["score"] > 1.5)
    assert {s: labels[s] for s in SENSITIVITIES} == {s: {True, False} for s in SENSITIVITIES}


def test_direct_answer_uses_retrieved_entity(records):
    """The direct answer must be grounded in a tool result already in the history."""
    for r in records[:60]:
        tool_args = [
            json.loads(m["tool_calls"][0]["function"]["arguments"]) for m in r["history"] if m.get("tool_calls")
        ]
        entities = [next(iter(a.values())) for a in tool_args]
        question = r["history"][-1]["content"]
        assert any(e in question for e in entities) or any(
            e.split(" vs ")[0] in question or e.split("/")[-1] in question for e in entities
        ), question
        assert any(
            e in r["direct_answer"]
            or e.split(" vs ")[0] in r["direct_answer"]
            or e.split("/")[0] in r["direct_answer"]
            for e in entities
        )


@pytest.mark.parametrize("split", ["train", "test"])
def test_split_selects_templates(split):
    expected = {t.scenario for t in S.TEMPLATES if t.split == split}
    recs = S.generate_annotated(2 * len(S.TEMPLATES), seed=3, split=split)
    got = {r["scenario"] for r in recs}
    assert got == expected
    assert all((name in D1_TEST) == (split == "test") for name in got)
    assert {t.scenario for t in S.templates_for(None)} == set(TABLE6_SENSITIVITY)
    with pytest.raises(ValueError):
        S.templates_for("validation")


def test_thresholds_brute_force_against_table4():
    """Every gap Table 4 can produce for a level gets the same label; the pattern is the documented one."""
    expected = {"low": (0, 0, 1), "medium": (0, 1, 1), "high": (0, 1, 1)}
    for sens in SENSITIVITIES:
        fractions = []
        for lv in LEVELS:
            _, _, a, b = GAP_TABLE[sens][lv]
            grid = np.linspace(a, b, 2001)
            fractions.append(float(np.mean([S.prefers_tool(sens, g) for g in grid])))
        assert tuple(fractions) == expected[sens], (sens, fractions)
        # Threshold lies strictly inside the hole between two consecutive level ranges.
        th = S.DEFAULT_THRESHOLDS[sens]
        k = expected[sens].index(1)
        assert GAP_TABLE[sens][k - 1].high < th < GAP_TABLE[sens][k].low
    # Spot values from the brief: ~7 days, ~30 minutes, ~30 seconds.
    assert S.DEFAULT_THRESHOLDS == {"low": 7 * 86400, "medium": 1800, "high": 30}


def test_empirical_label_fraction_per_level(records):
    per = defaultdict(list)
    for r in records:
        per[(SENS_OF[r["scenario"]], r["elapse_level"])].append(r["score"] > 1.5)
    for (sens, lv), labels in per.items():
        assert np.mean(labels) in (0.0, 1.0), (sens, lv)


def test_score_confidence_falls_near_threshold():
    rng = np.random.default_rng(0)
    th = S.DEFAULT_THRESHOLDS["medium"]
    far_tool = [S.simulate_score(rng, "medium", th * 100, S.DEFAULT_THRESHOLDS) for _ in range(400)]
    near_tool = [S.simulate_score(rng, "medium", th * 1.1, S.DEFAULT_THRESHOLDS) for _ in range(400)]
    far_direct = [S.simulate_score(rng, "medium", th / 100, S.DEFAULT_THRESHOLDS) for _ in range(400)]
    near_direct = [S.simulate_score(rng, "medium", th / 1.1, S.DEFAULT_THRESHOLDS) for _ in range(400)]
    assert min(far_tool + near_tool) > 1.5 and max(far_direct + near_direct) < 1.5
    assert np.mean(far_tool) > 2.8 and np.mean(far_direct) < 0.2
    assert np.mean(near_tool) < 2.5 and np.mean(near_direct) > 0.5
    assert np.mean(far_tool) - 1.5 > np.mean(near_tool) - 1.5 + 0.5


def test_custom_thresholds_change_labels():
    never = {"low": math.inf, "medium": math.inf, "high": math.inf}
    always = {"low": 0.0, "medium": 0.0, "high": 0.0}
    assert all(r["score"] < 1.5 for r in S.generate_annotated(15, seed=1, thresholds=never))
    assert all(r["score"] > 1.5 for r in S.generate_annotated(15, seed=1, thresholds=always))
    # A custom rule can produce no-tool at the large level: v1 then grows a 6th file.
    files = S.to_v1_layout(S.generate_annotated(15, seed=1, thresholds=never))
    assert len(files["preferNoTool_elapse_2.json"]) == 15


def test_v1_layout_round_trip(records, tmp_path):
    files = S.to_v1_layout(records)
    assert list(files) == list(S.V1_FILES)  # default thresholds never yield no-tool at the large level
    assert sum(len(v) for v in files.values()) == len(records)
    counts = Counter((("Tool" if r["score"] > 1.5 else "NoTool"), r["elapse_level"]) for r in records)
    for (label, lv), n in counts.items():
        assert len(files[f"prefer{label}_elapse_{lv}.json"]) == n

    times = defaultdict(dict)
    for r in records:
        times[r["id"]][r["elapse_level"]] = r["history"][-1]["time"]
    for name, items in files.items():
        for item in items:
            assert set(item) == {"id", "history", "function"}
            last = item["history"][-1]
            assert last["role"] == "user" and last["time"] == [times[item["id"]][k] for k in LEVELS]
            assert all(isinstance(m["time"], str) for m in item["history"][:-1])

    S.write_v1_layout(files, tmp_path / "v1")
    reread = {p.name: json.loads(p.read_text()) for p in (tmp_path / "v1").glob("*.json")}
    assert reread == files

    confident = S.to_v1_layout(records, confident_only=True)
    n_uncertain = sum(0.5 <= r["score"] <= 2.5 for r in records)
    assert sum(len(v) for v in confident.values()) == len(records) - n_uncertain
    assert 0 < n_uncertain < len(records) // 4


def test_v1_layout_needs_all_levels(records):
    with pytest.raises(ValueError):
        S.to_v1_layout([r for r in records if r["elapse_level"] != 1])


def test_v1_layout_matches_real_release_shape(records, tictoc_v1_dir):
    """Synthetic v1 files use the real release's file names and per-record keys."""
    real_names = {p.name for p in tictoc_v1_dir.glob("*.json")}
    assert set(S.to_v1_layout(records)) == real_names
    real = json.loads((tictoc_v1_dir / "preferTool_elapse_1.json").read_text())[0]
    ours = S.to_v1_layout(records)["preferTool_elapse_1.json"][0]
    assert set(ours) == set(real)
    assert set(ours["history"][-1]) == set(real["history"][-1])
    assert len(ours["history"][-1]["time"]) == len(real["history"][-1]["time"]) == 3


def test_annotated_jsonl_round_trip(tmp_path):
    recs = S.generate_annotated(5, seed=2)
    path = write_jsonl(recs, tmp_path / "sub" / "a.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == recs


def test_generation_speed():
    t0 = time.perf_counter()
    recs = S.generate_annotated(1000, seed=5)
    elapsed = time.perf_counter() - t0
    assert len(recs) == 3000
    assert elapsed < 2.0, f"1000 trajectories took {elapsed:.2f}s"


def test_cli(tmp_path):
    assert synthetic_main(["n=4", "seed=1", f"out={tmp_path / 'a.jsonl'}"]) == 0
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 12
    assert synthetic_main(["n=4", "split=test", "layout=v1", f"out={tmp_path / 'v1'}"]) == 0
    assert {p.name for p in (tmp_path / "v1").iterdir()} == set(S.V1_FILES)
    proc = subprocess.run(
        [sys.executable, "-m", "timealign.data.synthetic", "--help"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "layout=" in proc.stdout and "split=" in proc.stdout


def test_cli_writes_the_generators_records(tmp_path, capsys):
    """The files hold exactly what the generators return for the same options (dialogs too, also on stdout)."""
    assert synthetic_main(["n=3", "seed=4", "split=train", f"out={tmp_path / 'a.jsonl'}"]) == 0
    lines = (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == S.generate_annotated(3, seed=4, split="train")
    assert synthetic_main(["layout=timelychat", "n=5", "seed=2", f"out={tmp_path / 'd.jsonl'}"]) == 0
    dialogs = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert dialogs == S.generate_timelychat(5, seed=2, split="train")
    capsys.readouterr()
    assert synthetic_main(["layout=timelychat", "n=2", "split=eval", "out=-"]) == 0
    out = capsys.readouterr().out
    assert [json.loads(x) for x in out.splitlines()] == S.generate_timelychat(2, seed=0, split="eval")


def test_cli_rejects_bad_options(tmp_path, capsys):
    assert synthetic_main(["n=2", "layout=csv", f"out={tmp_path / 'x'}"]) == 2
    assert "layout must be one of annotated, v1, timelychat" in capsys.readouterr().err
    assert synthetic_main(["n=2", "split=dev", f"out={tmp_path / 'x'}"]) == 2
    assert synthetic_main(["n=2", "--split", "test", f"out={tmp_path / 'x'}"]) == 2  # the old flags are gone
    assert synthetic_main(["n=2"]) == 2  # out is required
    assert not (tmp_path / "x").exists()


def test_every_tool_states_its_freshness():
    for t in S.TEMPLATES:
        assert t.tool_schema["function"]["description"].endswith(S.FRESHNESS[t.sensitivity])
    assert len(set(S.FRESHNESS.values())) == 3  # one phrase per sensitivity, shared by train and test scenarios


def test_max_rounds_one_keeps_a_single_retrieval():
    records = S.generate_annotated(30, seed=3, max_rounds=1)
    assert all(sum(m["role"] == "tool" for m in r["history"]) == 1 for r in records)
    two = S.generate_annotated(30, seed=3)
    assert any(sum(m["role"] == "tool" for m in r["history"]) == 2 for r in two)
    with pytest.raises(ValueError, match="max_rounds"):
        S.generate_annotated(1, seed=0, max_rounds=3)


def test_sensitivity_swap_moves_rate_gaps_and_labels_together():
    """A swapped tool states another update rate, and its gaps and labels follow that rate's rule."""
    by_phrase = {phrase: sens for sens, phrase in S.FRESHNESS.items()}
    records = S.generate_annotated(60, seed=5, split="train", sensitivity_swap=0.5)
    swapped = 0
    for r in records:
        description = r["function"][0]["function"]["description"]
        stated = next(sens for phrase, sens in by_phrase.items() if description.endswith(phrase))
        template = next(t for t in S.TEMPLATES if t.scenario == r["scenario"])
        swapped += stated != template.sensitivity
        history = r["history"]
        gap = (parse_iso(history[-1]["time"]) - parse_iso(history[-2]["time"])).total_seconds()
        assert (r["score"] > 1.5) == S.prefers_tool(stated, gap)
    assert 0.3 < swapped / len(records) < 0.7
    assert S.generate_annotated(20, seed=5) == S.generate_annotated(20, seed=5, sensitivity_swap=0.0)
    with pytest.raises(ValueError, match="sensitivity_swap"):
        S.generate_annotated(1, seed=0, sensitivity_swap=1.5)
