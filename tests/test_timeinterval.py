"""Time-interval phrases <-> minutes: the table of phrasings the pipeline reads, the documented vague readings, and
errors that quote the phrase."""

import math

import pytest

from timealign.render.intervals import (
    IntervalParseError,
    extract_interval,
    interval_bucket,
    parse_minutes,
    render_minutes,
    split_leading_interval,
    split_trailing_interval,
)

PHRASES = [
    # TimelyChat's own phrasings
    ("0 minutes", 0),
    ("20 minutes", 20),
    ("2 hours", 120),
    ("1 hour 30 minutes", 90),
    ("8 hours", 480),
    # compounds, abbreviations, decimals
    ("1 hour and 30 minutes", 90),
    ("2 hours, 15 minutes", 135),
    ("1h30m", 90),
    ("2h", 120),
    ("90 min", 90),
    ("1.5 hours", 90),
    ("45 secs", 0.75),
    ("3 days", 4320),
    ("1 week", 10080),
    ("2+ hours", 120),
    # words, halves, quarters
    ("half an hour", 30),
    ("a half hour", 30),
    ("an hour", 60),
    ("an hour and a half", 90),
    ("one and a half hours", 90),
    ("2 hours and a half", 150),
    ("a quarter of an hour", 15),
    ("half a day", 720),
    ("twenty minutes", 20),
    ("twenty-five minutes", 25),
    # documented vague readings: a couple = 2, a few = 3, several = 5
    ("a few minutes", 3),
    ("a couple of hours", 120),
    ("several hours", 300),
    ("few minutes", 3),
    # ranges: arithmetic midpoint
    ("2-3 hours", 150),
    ("2 to 3 hours", 150),
    ("between 2 and 3 hours", 150),
    ("20\u201330 minutes", 25),
    ("two-three hours", 150),
    # ISO-8601 durations
    ("PT2H", 120),
    ("PT1H30M", 90),
    ("PT45S", 0.75),
    ("P1D", 1440),
    ("P1DT2H", 1560),
    ("pt20m", 20),
    # zero, hedges and framing
    ("immediately", 0),
    ("No delay", 0),
    ("right away", 0),
    ("about 2 hours", 120),
    ("around 20 minutes", 20),
    ("~20 minutes", 20),
    ("[20 minutes later]", 20),
    ("(2 hours later)", 120),
    ("after 5 hours", 300),
    ("  1 HOUR 30 MINUTES  ", 90),
]


@pytest.mark.parametrize("phrase,minutes", PHRASES)
def test_phrase_table(phrase, minutes):
    assert parse_minutes(phrase) == pytest.approx(minutes)


def test_numbers_are_minutes():
    assert parse_minutes(20) == 20.0 and parse_minutes(0.5) == 0.5 and parse_minutes(0) == 0.0


@pytest.mark.parametrize(
    "bad,why",
    [
        ("", "empty"),
        ("20", "without a unit"),
        ("a while", "unknown unit 'while'"),
        ("soon", "expected a quantity"),
        ("later", "no quantity"),
        ("3 parsecs", "unknown unit 'parsecs'"),
        ("-5 minutes", "expected a quantity"),
        ("3-2 hours", "runs backwards"),
        ("PT", "expected a quantity"),
        ("20 minutes or so", "expected a quantity"),
        (-1, ">= 0"),
        (float("nan"), ">= 0"),
        (True, "boolean"),
        (None, "NoneType"),
        (["20 minutes"], "list"),
    ],
)
def test_unparseable_raises_value_error_quoting_the_phrase(bad, why):
    with pytest.raises(ValueError) as err:
        parse_minutes(bad)
    assert isinstance(err.value, IntervalParseError)
    assert why in str(err.value) and repr(bad) in str(err.value)


@pytest.mark.parametrize(
    "minutes,text",
    [
        (0, "0 minutes"),
        (0.4, "0 minutes"),
        (0.5, "1 minute"),
        (1, "1 minute"),
        (20, "20 minutes"),
        (60, "1 hour"),
        (90, "1 hour 30 minutes"),
        (120, "2 hours"),
        (121, "2 hours 1 minute"),
        (1440, "1 day"),
        (1530, "1 day 1 hour 30 minutes"),
        (2880, "2 days"),
        ("PT2H", "2 hours"),
    ],
)
def test_render_is_canonical(minutes, text):
    assert render_minutes(minutes) == text


def test_render_parse_round_trip():
    for m in list(range(0, 200)) + [239, 240, 241, 719, 720, 1439, 1440, 1441, 10000]:
        assert parse_minutes(render_minutes(m)) == m
    for phrase, minutes in PHRASES:
        assert parse_minutes(render_minutes(parse_minutes(phrase))) == math.floor(minutes + 0.5)


def test_buckets_follow_table6():
    assert [interval_bucket(m) for m in (0, 4.9, 5, 29, 30, 119, 120, 359, 360, 719, 720, 1440, 1441)] == [
        "instant",
        "instant",
        "short",
        "short",
        "moderate",
        "moderate",
        "long",
        "long",
        "half-day",
        "half-day",
        "full-day",
        "full-day",
        "multi-day",
    ]


def test_split_leading_and_trailing_interval():
    assert split_leading_interval("20 minutes I'm back!") == (20.0, " I'm back!")
    assert split_leading_interval(" 1 hour 30 minutes Great, thanks") == (90.0, " Great, thanks")
    assert split_leading_interval("Hello there") is None
    assert split_trailing_interval("I'm back! 2 hours") == ("I'm back! ", 120.0)
    assert split_trailing_interval("no interval here") is None
    assert split_trailing_interval("20 minutes") is None  # the whole text is not a "trailing" part


# What instruction-tuned baselines write when asked for the interval (TimelyChat's zero-shot, few-shot and CoT
# prompts end with "The estimated time interval is:"; GPT-4o answers in a JSON "answer" field).
BASELINE_OUTPUTS = [
    ("20 minutes", 20),  # the strict form: what TIMER writes
    ("**20 minutes**", 20),
    ("The estimated time interval is: 20 minutes", 20),
    ("The estimated time interval is: **2 hours**.", 120),
    ("I'd say about 2 hours later.", 120),
    ("[20 minutes]", 20),
    ("B: (30 minutes later) Just got back!", 30),
    ('{"answer": "1 hour 30 minutes"}', 90),
    ("Answer format: n (0<=n<=1440) minutes\nThe estimated time interval is: 45 minutes", 45),
    (
        (
            "Reasoning: the laundry cycle takes 30 minutes and drying another 40 minutes.\n"
            "Therefore, the answer: 70 minutes"
        ),
        70,
    ),
    ("Given that 2 people are cooking, it would take around 40 minutes.", 40),  # "2 people" has no unit
    ("It would take a while, probably 2-3 hours.", 150),
    ("$\\boxed{30 \\text{ minutes}}$", 30),
    ("The time interval is 0 minutes, since the reply is immediate.", 0),
    ("The next response is expected immediately.", 0),
    ("### Estimated delay: about an hour", 60),
    ("An hour and a half.", 90),
    ("PT2H", 120),
]


@pytest.mark.parametrize("text,minutes", BASELINE_OUTPUTS)
def test_extract_interval_from_prose_and_markdown(text, minutes):
    assert extract_interval(text) == pytest.approx(minutes)


@pytest.mark.parametrize(
    "text", ["I don't know.", "It will be 3 pm.", "Sure, let's meet at 5.", "", "   ", None, "soonish", "a while"]
)
def test_extract_interval_without_an_interval_is_none(text):
    assert extract_interval(text) is None


def test_extraction_leaves_the_strict_reading_alone():
    assert extract_interval(20) == 20.0 and extract_interval(-1) is None
    for text in ("**20 minutes**", "The estimated time interval is: 20 minutes"):
        with pytest.raises(IntervalParseError):
            parse_minutes(text)
    # a quantity wins over a zero phrase wherever it stands
    assert extract_interval("Not immediately: about 20 minutes.") == 20.0
