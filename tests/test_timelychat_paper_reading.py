"""`timelychat.interval_reading=paper`: predicted intervals read as the TimelyChat authors' script reads them.

Compared, phrase by phrase, with their own `convert_to_minutes` (../shared/reference/timelychat/utils/postprocess.py,
imported from their code) on the real TimelyChat sample's `time_elapsed` values, the canonical phrases TIMER writes
and thousands of seeded synthetic phrases (prose, markdown, ranges, ISO, number words, vague quantities).
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from timealign.render.intervals import paper_interval_minutes, parse_minutes, render_minutes
from timealign.suites.timelychat.metrics import INTERVAL_READINGS, read_intervals
from timealign.suites.timelychat.options import TimelyChatOptions

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
THEIR_POSTPROCESS = SHARED / "reference" / "timelychat" / "utils" / "postprocess.py"
SAMPLE = SHARED / "data" / "timelychat-sample" / "eval.jsonl"


@pytest.fixture(scope="module")
def convert_to_minutes():
    assert THEIR_POSTPROCESS.is_file(), f"the TimelyChat authors' code is needed at {THEIR_POSTPROCESS}"
    spec = importlib.util.spec_from_file_location("timelychat_authors_postprocess", THEIR_POSTPROCESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.convert_to_minutes


NUMBERS = [
    "0",
    "1",
    "2",
    "3",
    "5",
    "10",
    "12",
    "15",
    "20",
    "25",
    "30",
    "45",
    "90",
    "1.5",
    "0.5",
    ".5",
    "2.25",
    "100",
    "a",
    "an",
    "one",
    "two",
    "three",
    "five",
    "ten",
    "eleven",
    "fifteen",
    "seventeen",
    "eighteen",
    "twenty",
    "twenty-five",
    "twenty five",
    "thirty",
    "forty-five",
    "sixty",
    "ninety",
    "a hundred",
    "hundred",
    "thousand",
    "a few",
    "few",
    "several",
    "a couple of",
    "half an",
    "half a",
    "one and a half",
    "a quarter of an",
]
UNITS = [
    "second",
    "seconds",
    "sec",
    "secs",
    "minute",
    "minutes",
    "min",
    "mins",
    "m",
    "hour",
    "hours",
    "hr",
    "hrs",
    "h",
    "day",
    "days",
    "d",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "Hours",
    "MINUTES",
]
FRAMES = [
    "{}",
    "{} later",
    "about {}",
    "~{}",
    "**{}**",
    "[{}]",
    "After {}.",
    "I'd say {} or so.",
    "in {}",
    "The estimated time interval is: {}",
    "Therefore, the answer: {}",
    "$\\boxed{{{}}}$",
    "{} have passed",
    "Probably {}, maybe less",
    "often {}",
    "it takes {}",
]
FIXED = [
    "",
    " ",
    "0 minutes",
    "immediately",
    "no delay",
    "right away",
    "none",
    "a while",
    "soon",
    "later",
    "1 hour 30 minutes",
    "1 hour and 30 minutes",
    "an hour and a half",
    "2 hours 15 minutes",
    "1h30m",
    "90min",
    "2-3 hours",
    "2 to 3 hours",
    "between 2 and 3 hours",
    "20-30 minutes",
    "1.5-2 hours",
    "10-15 mins",
    "PT2H",
    "PT1H30M",
    "P1D",
    "P1DT2H",
    "pt45s",
    "P1W",
    "P2M",
    "up 2h",
    "sleep PT3H",
    "pt",
    "PT",
    "several hours",
    "a few minutes",
    "fewer than 5 minutes",
    "twenty-five minutes",
    "half an hour",
    "half a day",
    "a half hour",
    "$\\boxed{2 hours}$",
    "\\sqrt{4} hours",
    "} 3 hours {",
    "**20 minutes**",
    "3 days 4 hours",
    "a day",
    "A Week",
    "an hour",
    "one hour",
    "١٥ minutes",
    "5 minutes. Then 2 hours",
    "Reasoning: cooking takes 30 minutes... Therefore, the answer: 45 minutes",
    "It's 5pm now, see you in 2h",
    "I'll be back in 2 to 3 days",
    "12:30",
    "20",
    "0.0 minutes",
    "00 minutes",
    "1e3 minutes",
    "-5 minutes",
]


def corpus() -> list[str]:
    phrases = list(FIXED)
    phrases += sorted({json.loads(line)["time_elapsed"] for line in SAMPLE.read_text().splitlines() if line.strip()})
    phrases += sorted({json.loads(line)["duration"] for line in SAMPLE.read_text().splitlines() if line.strip()})
    phrases += [
        render_minutes(m)
        for m in (0, 0.5, 1, 5, 20, 45, 59, 60, 61, 90, 125, 600, 1439, 1440, 1500, 2880, 10080, 20000)
    ]
    rng = random.Random(20261124)
    for _ in range(4000):
        number, unit, frame = rng.choice(NUMBERS), rng.choice(UNITS), rng.choice(FRAMES)
        phrase = f"{number}{rng.choice([' ', '', '  '])}{unit}"
        if rng.random() < 0.3:  # a compound: "1 hour 30 minutes", "2 days and 3 hours"
            phrase += rng.choice([" ", " and ", ", "]) + f"{rng.choice(NUMBERS)} {rng.choice(UNITS)}"
        phrases.append(frame.format(phrase))
    return phrases


def test_sample_holds_the_real_intervals():
    assert SAMPLE.is_file(), f"the TimelyChat sample is needed at {SAMPLE}"
    assert {"20 minutes", "2 hours"} <= {json.loads(line)["time_elapsed"] for line in SAMPLE.read_text().splitlines()}


def test_paper_reading_equals_the_authors_convert_to_minutes_on_every_phrase(convert_to_minutes):
    phrases = corpus()
    assert len(set(phrases)) > 1500
    differ = [
        (p, paper_interval_minutes(p), convert_to_minutes(p))
        for p in phrases
        if paper_interval_minutes(p) != convert_to_minutes(p)
    ]
    assert differ == []
    # the corpus exercises where their reading departs from timealign's strict one
    departs = sum(1 for p in set(phrases) if _strict(p) is not None and _strict(p) != convert_to_minutes(p))
    assert departs > 100


def _strict(phrase: str) -> float | None:
    try:
        return parse_minutes(phrase)
    except ValueError:
        return None


def test_the_known_departures_by_hand():
    assert paper_interval_minutes("1 hour 30 minutes") == 60.0  # the first quantity only
    assert paper_interval_minutes("twenty-five minutes") == 5.0  # "twenty" needs a unit right after it
    assert paper_interval_minutes("several hours") == 180.0 and paper_interval_minutes("2 to 3 hours") == 180.0
    assert paper_interval_minutes("2-3 hours") == 150.0 and paper_interval_minutes("I don't know") == 0.0


def test_read_intervals_applies_each_reading():
    predicted = [("1 hour 30 minutes", 90.0), ("**20 minutes**", None), ("no idea", None)]
    assert read_intervals(predicted, "strict") == (predicted, set())
    assert read_intervals(predicted, "extract") == ([predicted[0], ("**20 minutes**", 20.0), ("no idea", None)], {1})
    assert read_intervals(predicted, "paper") == (
        [("1 hour 30 minutes", 60.0), ("**20 minutes**", 20.0), ("no idea", 0.0)],
        set(),
    )
    assert set(INTERVAL_READINGS) == {"extract", "strict", "paper"}
    assert TimelyChatOptions().interval_reading == "extract"  # the default is unchanged
    assert TimelyChatOptions(interval_reading="paper").interval_reading == "paper"
    with pytest.raises(ValueError, match="interval_reading='authors'; known: extract, strict, paper"):
        TimelyChatOptions(interval_reading="authors")
