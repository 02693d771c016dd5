"""ChronoSense wordings: the question of an item in the three templates, few-shot and CoT prompt settings."""

from __future__ import annotations

from typing import Sequence

SETTINGS = ("0-shot", "1-shot", "3-shot", "cot")
N_SHOTS = {"0-shot": 0, "1-shot": 1, "3-shot": 3, "cot": 0}
COT_SUFFIX = "Let's think step by step."


# (question form, statement form) with {a} and {b} the quoted event names.
ALLEN_TEXT: dict[str, tuple[str, str]] = {
    "Before": (
        "Did {a} occur before {b} without any overlap between the two events?",
        "{a} occurred before {b} without any overlap between the two events.",
    ),
    "After": (
        "Did {a} occur after {b} without any overlap between the two events?",
        "{a} occurred after {b} without any overlap between the two events.",
    ),
    "Meets": ("Did {a} end in the same year as {b} began?", "{a} ended in the same year as {b} began."),
    "Met-By": ("Did {a} begin in the same year as {b} ended?", "{a} began in the same year as {b} ended."),
    "Overlaps": (
        "Did {a} begin before {b} began and end after {b} began but before {b} ended, with some overlap "
        "between the two events?",
        "{a} began before {b} began and ended after {b} began but before {b} ended, with some overlap "
        "between the two events.",
    ),
    "Overlapped-By": (
        "Did {a} begin after {b} began but before {b} ended, and end after {b} ended, with some "
        "overlap between the two events?",
        "{a} began after {b} began but before {b} ended, and ended after {b} ended, with some "
        "overlap between the two events.",
    ),
    "Starts": (
        "Did {a} begin in the same year as {b} and end before {b} ended?",
        "{a} began in the same year as {b} and ended before {b} ended.",
    ),
    "Started-By": (
        "Did {a} begin in the same year as {b} and end after {b} ended?",
        "{a} began in the same year as {b} and ended after {b} ended.",
    ),
    "During": (
        "Did {a} begin after {b} began and end before {b} ended, happening entirely within {b}?",
        "{a} began after {b} began and ended before {b} ended, happening entirely within {b}.",
    ),
    "Contains": (
        "Did {a} begin before {b} began and end after {b} ended, entirely containing {b}?",
        "{a} began before {b} began and ended after {b} ended, entirely containing {b}.",
    ),
    "Finishes": (
        "Did {a} begin after {b} began and end in the same year as {b}?",
        "{a} began after {b} began and ended in the same year as {b}.",
    ),
    "Finished-By": (
        "Did {a} begin before {b} began and end in the same year as {b}?",
        "{a} began before {b} began and ended in the same year as {b}.",
    ),
    "Equals": (
        "Did {a} begin in the same year as {b} and end in the same year as {b}?",
        "{a} began in the same year as {b} and ended in the same year as {b}.",
    ),
}
ARITHMETIC_TEXT: dict[str, tuple[str, str, str]] = {  # (context, question, statement); {a} is the event
    # The reading is stated: counted inclusively ("started 1758, lasted 6 years": 1758-1763) every gold would flip.
    "End Timepoint": (
        "{a} started in year {start}. {a} lasted {duration} years, not counting its start year.",
        "Did {a} end in the year {year}?",
        "{a} ended in the year {year}.",
    ),
    "Next Occurrence": (
        "{a} first occurred in year {first}. {a} occurs every {every} years.",
        "Did {a} occur again in the year {year}?",
        "{a} occurred again in the year {year}.",
    ),
    "Intermediate Timepoint": (
        "{a} started in year {start} and ended in year {end}.",
        "Did {a} happen in the year {year}?",
        "{a} happened in the year {year}.",
    ),
}
TEMPLATES = (
    "{context} {question} Answer True or False.",
    "{context} Statement: {statement} Is this statement True or False?",
    "Read the facts and answer with only True or False.\nFacts: {context}\nQuestion: {question}",
)


def _quote(name: str) -> str:
    return f"'{name}'"


def allen_context(ea: tuple[str, int, int], eb: tuple[str, int, int]) -> str:
    return " ".join(f"The event {_quote(n)} occurred between year {s} and year {e}." for n, s, e in (ea, eb))


def render_question(item: dict, template: int = 0) -> str:
    """The question text (context + hypothesis) of one item in one of the three wordings."""
    if item["task"] == "allen":
        a, b = _quote(item["event_a"]["name"]), _quote(item["event_b"]["name"])
        q, s = ALLEN_TEXT[item["hypothesis_relation"]]
        question, statement = q.format(a=a, b=b), s.format(a=a, b=b)
        context = allen_context(*(tuple(item[k][f] for f in ("name", "start", "end")) for k in ("event_a", "event_b")))
    else:
        c, q, s = ARITHMETIC_TEXT[item["category"]]
        fields = dict(item["params"], a=_quote(item["event"]), year=item["hypothesis_year"])
        context, question, statement = c.format(**fields), q.format(**fields), s.format(**fields)
    return TEMPLATES[template].format(context=context, question=question, statement=statement)


def build_prompt(item: dict, *, setting: str = "0-shot", template: int = 0, shots: Sequence[dict] = ()) -> str:
    """The user message: optional solved examples, then the question (plus the CoT trigger in the CoT setting)."""
    parts = [f"{render_question(s, template)}\nAnswer: {s['answer']}" for s in shots]
    question = render_question(item, template)
    if setting == "cot":
        question += "\n" + COT_SUFFIX
    parts.append(question)
    return "\n\n".join(parts)


def normalize_setting(setting: str) -> str:
    s = str(setting).strip().lower().replace("_", "-").replace(" ", "-")
    aliases = {
        "0shot": "0-shot",
        "zero-shot": "0-shot",
        "1shot": "1-shot",
        "one-shot": "1-shot",
        "3shot": "3-shot",
        "few-shot": "3-shot",
        "three-shot": "3-shot",
        "chain-of-thought": "cot",
    }
    s = aliases.get(s, s)
    if s not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; known: {', '.join(SETTINGS)}")
    return s
