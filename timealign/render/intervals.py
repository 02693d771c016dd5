"""Time intervals ("20 minutes", "1 hour 30 minutes", "PT2H") to minutes and back; shared by training and evaluation.

    parse_minutes("1 hour 30 minutes") == 90.0       render_minutes(90) == "1 hour 30 minutes"
    parse_minutes("PT2H") == 120.0                    render_minutes(0) == "0 minutes"

TimelyChat writes intervals as English phrases (`time_elapsed`: "20 minutes", "2 hours", "1 hour 30 minutes"); model
outputs add ISO-8601 durations, vague quantities and ranges. `parse_minutes` reads all of them to float minutes;
anything it cannot read raises `IntervalParseError` (a `ValueError`) that quotes the phrase and says why. Training
renders every interval with `render_minutes`, so the model only ever sees the canonical form, and the two-step
inference parses what the model wrote with `parse_minutes`.

Accepted (case-insensitive):
- numbers with units: "20 minutes", "1.5 hours", "2h", "90 min", "45 secs", "3 days", "1 week";
  compounds add up: "1 hour 30 minutes", "1 hour and 30 minutes", "1h30m", "2 hours, 15 minutes";
- number words up to ninety-nine: "twenty minutes", "twenty-five minutes", "one hour";
- a / an / one: "an hour", "a minute"; halves and quarters: "half an hour" (30), "a quarter of an hour" (15),
  "an hour and a half" / "one and a half hours" (90), "half a day" (720);
- ISO-8601 durations: "PT2H", "PT1H30M", "P1D", "P1DT2H", "PT45S", "P1W" (in ISO, "M" after "T" is minutes,
  before it months);
- zero: "0 minutes", "no delay", "immediately", "instantly", "right away", "right now", "none";
- hedges and framing are ignored: about, around, approximately, roughly, almost, nearly, ~, "after", "in", "for",
  trailing "later" / "ago" / "(have) passed" / "elapsed", surrounding brackets ("[20 minutes later]").

Choices for vague phrases (documented, tested, and deliberately simple):
- "a couple (of)" = 2, "a few" = 3, "several" = 5 units ("a few minutes" -> 3.0, "several hours" -> 300.0). These
  are the usual readings; they are rare in ground truth (TimelyChat durations are numeric) and mostly come from
  baseline model outputs, where a stable number matters more than the exact reading.
- ranges are the arithmetic midpoint: "2-3 hours", "2 to 3 hours", "between 2 and 3 hours" -> 150.0;
  "20-30 minutes" -> 25.0. (The log-scale midpoint would suit RMSLE better but is 0 for any range starting at 0.)
- months are 30 days and years 365 days.
- a bare number is minutes only when given as an int/float (the dialog layout's `delay: 20`); a string needs a unit
  ("20" raises), since "20" in text is ambiguous.
- "a while", "later", "soon", "some time" and other unit-less vagueness raise.

Strict and lenient reading: `parse_minutes` is strict (the whole text must be one interval); it is what TIMER
emits, since training only shows the canonical form. Instruction-tuned baselines answer in prose and markdown
("**20 minutes**", "The estimated time interval is: 20 minutes", "I'd say about 2 hours later."), so evaluation
reads model outputs with `extract_interval`, which finds the interval inside such text (module docstring of
`extract_interval`) and returns None when there is none.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "IntervalParseError",
    "parse_minutes",
    "extract_interval",
    "render_minutes",
    "split_leading_interval",
    "split_trailing_interval",
    "interval_bucket",
    "BUCKETS",
]


class IntervalParseError(ValueError):
    """A time-interval phrase that cannot be read; the message quotes it and says why."""

    def __init__(self, text, reason: str):
        self.text, self.reason = text, reason
        super().__init__(f"cannot parse time interval {text!r}: {reason}")


MINUTES_PER = {
    "second": 1 / 60,
    "minute": 1.0,
    "hour": 60.0,
    "day": 1440.0,
    "week": 10080.0,
    "month": 43200.0,
    "year": 525600.0,
}
_UNIT_WORDS = {
    "second": ("s", "sec", "secs", "second", "seconds"),
    "minute": ("m", "min", "mins", "minute", "minutes", "mn"),
    "hour": ("h", "hr", "hrs", "hour", "hours"),
    "day": ("d", "day", "days"),
    "week": ("w", "wk", "wks", "week", "weeks"),
    "month": ("mo", "mos", "month", "months"),
    "year": ("y", "yr", "yrs", "year", "years"),
}
UNITS = {word: MINUTES_PER[unit] for unit, words in _UNIT_WORDS.items() for word in words}

_ONES = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
VAGUE_QUANTITIES = {"couple": 2.0, "few": 3.0, "several": 5.0}
_ZERO_PHRASES = {
    "no delay",
    "immediately",
    "instantly",
    "instant",
    "right away",
    "right now",
    "now",
    "none",
    "no time",
    "no wait",
    "straight away",
    "at once",
}
_HEDGES = {
    "about",
    "around",
    "approximately",
    "approx",
    "roughly",
    "almost",
    "nearly",
    "some",
    "after",
    "in",
    "for",
    "just",
    "only",
    "maybe",
    "perhaps",
    "probably",
    "like",
    "estimated",
    "est",
    "exactly",
    "another",
}
_TRAILERS = ("later", "ago", "have passed", "has passed", "passed", "elapsed", "afterwards", "after that", "from now")
_ISO = re.compile(
    r"^P(?!$)(?:(?P<year>\d+(?:\.\d+)?)Y)?(?:(?P<month>\d+(?:\.\d+)?)M)?(?:(?P<week>\d+(?:\.\d+)?)W)?"
    r"(?:(?P<day>\d+(?:\.\d+)?)D)?(?:T(?=\d)(?:(?P<hour>\d+(?:\.\d+)?)H)?(?:(?P<minute>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<second>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[a-z]+|[-\u2013\u2014,/&+]")


def parse_minutes(value) -> float:
    """A time interval (phrase, ISO-8601 duration, or a number of minutes) in minutes, as a float >= 0."""
    if isinstance(value, bool):
        raise IntervalParseError(value, "a boolean is not a time interval")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise IntervalParseError(value, "minutes must be a finite number >= 0")
        return float(value)
    if not isinstance(value, str):
        raise IntervalParseError(value, f"expected a phrase or a number of minutes, got {type(value).__name__}")
    text = value.strip()
    if not text:
        raise IntervalParseError(value, "empty")
    iso = _ISO.match(text)
    if iso:
        return sum(float(v) * MINUTES_PER[k] for k, v in iso.groupdict().items() if v is not None)
    norm = _normalise(text)
    if not norm:
        raise IntervalParseError(value, "no quantity and unit")
    if norm in _ZERO_PHRASES:
        return 0.0
    tokens = _TOKEN.findall(norm)
    leftover = _TOKEN.sub(" ", norm).strip()
    if leftover:
        raise IntervalParseError(value, f"unexpected characters {leftover!r}")
    minutes = _Parser(tokens, value).phrase()
    return minutes


def _normalise(text: str) -> str:
    t = text.lower().strip()
    t = t.strip("[](){}<>\"'`.!?:;")
    t = t.strip()
    changed = True
    while changed:
        changed = False
        for trailer in _TRAILERS:
            if t.endswith(" " + trailer) or t == trailer:
                t = t[: -len(trailer)].strip(" ,.")
                changed = True
    t = t.replace("~", " ").replace("\u00bd", " and a half")
    words = t.split()
    while words and words[0] in _HEDGES:
        words = words[1:]
    return " ".join(words)


class _Parser:
    """Recursive-descent reader over tokens: phrase := part ((and|,|&)? part)*; part := quantity unit [and a half]."""

    def __init__(self, tokens: list[str], original):
        self.toks, self.i, self.original = tokens, 0, original

    # -- helpers -----------------------------------------------------------------------------------------------
    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def take(self, *words: str) -> bool:
        if self.peek() in words:
            self.i += 1
            return True
        return False

    def fail(self, reason: str):
        raise IntervalParseError(self.original, reason)

    # -- grammar -----------------------------------------------------------------------------------------------
    def phrase(self) -> float:
        total = self.part()
        while self.peek() is not None:
            self.take("and", ",", "&", "+")
            if self.peek() is None:
                break
            total += self.part()
        return total

    def part(self) -> float:
        if self.take("between"):
            low = self.quantity(required=True)
            if not self.take("and", "-", "\u2013", "\u2014", "to"):
                self.fail("'between' needs 'and'")
            high = self.quantity(required=True)
            return self._range(low, high) * self.unit()
        qty = self.quantity(required=True)
        if self.peek() in ("-", "\u2013", "\u2014", "to", "or", "/") and self._looks_like_quantity(1):
            self.i += 1
            high = self.quantity(required=True)
            qty = self._range(qty, high)
        unit = self.unit()
        minutes = qty * unit
        # "an hour and a half", "2 hours and a half"
        if self.peek() == "and" and self.peek(1) in ("a", "an") and self.peek(2) == "half":
            self.i += 3
            minutes += 0.5 * unit
        elif self.peek() == "and" and self.peek(1) == "half" and self.peek(2) is None:
            self.i += 2
            minutes += 0.5 * unit
        return minutes

    def _range(self, low: float, high: float) -> float:
        if high < low:
            self.fail(f"range {low:g}-{high:g} runs backwards")
        return (low + high) / 2

    def _looks_like_quantity(self, k: int) -> bool:
        tok = self.peek(k)
        return tok is not None and (tok[0].isdigit() or tok in _ONES or tok in _TENS or tok in ("a", "an"))

    def unit(self) -> float:
        tok = self.peek()
        if tok is None:
            self.fail("a quantity without a unit (write e.g. '20 minutes')")
        if tok not in UNITS:
            self.fail(f"unknown unit {tok!r}")
        self.i += 1
        return UNITS[tok]

    def quantity(self, required: bool) -> float:
        tok = self.peek()
        if tok is None:
            self.fail("missing quantity")
        value: float | None = None
        if tok[0].isdigit():
            self.i += 1
            value = float(tok)
            self.take("+")  # "2+ hours"
        elif tok in _TENS:
            self.i += 1
            value = float(_TENS[tok])
            if self.peek() == "-" and self.peek(1) in _ONES and 0 < _ONES[self.peek(1)] < 10:
                self.i += 1
            if self.peek() in _ONES and 0 < _ONES[self.peek()] < 10:
                value += _ONES[self.toks[self.i]]
                self.i += 1
        elif tok in _ONES:
            self.i += 1
            value = float(_ONES[tok])
        elif tok in ("a", "an"):
            nxt = self.peek(1)
            if nxt in VAGUE_QUANTITIES:  # "a few", "a couple (of)"
                self.i += 2
                self.take("of")
                return VAGUE_QUANTITIES[nxt]
            if nxt == "half":  # "a half hour"
                self.i += 2
                self.take("of")
                self.take("a", "an")
                return 0.5
            if nxt == "quarter":  # "a quarter of an hour", "a quarter hour"
                self.i += 2
                self.take("of")
                self.take("a", "an")
                return 0.25
            self.i += 1
            value = 1.0
        elif tok in VAGUE_QUANTITIES:  # "few minutes", "several hours", "couple of hours"
            self.i += 1
            self.take("of")
            return VAGUE_QUANTITIES[tok]
        elif tok == "half":  # "half an hour", "half a day", "half hour"
            self.i += 1
            self.take("of")
            self.take("a", "an")
            return 0.5
        elif tok == "quarter":
            self.i += 1
            self.take("of")
            self.take("a", "an")
            return 0.25
        else:
            self.fail(f"expected a quantity, got {tok!r}")
        # "one and a half hours", "2 and a half hours"
        if self.peek() == "and" and self.peek(1) in ("a", "an") and self.peek(2) == "half" and self.peek(3) in UNITS:
            self.i += 3
            value += 0.5
        return value


# ---------------------------------------------------------------------------------------------- rendering


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


def render_minutes(minutes: float) -> str:
    """The canonical phrase training uses: whole minutes, largest units first, zero parts left out.

    0 -> "0 minutes", 20 -> "20 minutes", 60 -> "1 hour", 90 -> "1 hour 30 minutes", 1440 -> "1 day",
    1530 -> "1 day 1 hour 30 minutes". Minutes are rounded half up (0.5 -> "1 minute", 0.4 -> "0 minutes").
    """
    m = parse_minutes(minutes)
    total = int(math.floor(m + 0.5))
    if total == 0:
        return "0 minutes"
    days, rest = divmod(total, 1440)
    hours, mins = divmod(rest, 60)
    parts = []
    if days:
        parts.append(_plural(days, "day"))
    if hours:
        parts.append(_plural(hours, "hour"))
    if mins:
        parts.append(_plural(mins, "minute"))
    return " ".join(parts)


def split_leading_interval(text: str, max_words: int = 8) -> tuple[float, str] | None:
    """(minutes, rest) for text that starts with an interval ("20 minutes I'm back" -> (20.0, " I'm back")).

    The longest word prefix (up to `max_words` words) that parses wins; None when no prefix parses. Used to read
    model output in the no-special-tokens format, where nothing marks the end of the interval.
    """
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    for k in range(min(max_words, len(spans)), 0, -1):
        end = spans[k - 1][1]
        candidate = text[:end].rstrip(",.;:!?")
        try:
            return parse_minutes(candidate), text[end:]
        except IntervalParseError:
            continue
    return None


def split_trailing_interval(text: str, max_words: int = 8) -> tuple[str, float] | None:
    """(rest, minutes) for text that ends with an interval ("I'm back 20 minutes" -> ("I'm back ", 20.0)).

    The longest word suffix (up to `max_words` words, not the whole text) that parses wins; None when none does.
    """
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    for k in range(min(max_words, len(spans) - 1), 0, -1):
        start = spans[-k][0]
        try:
            return text[:start], parse_minutes(text[start:].rstrip(",.;:!?"))
        except IntervalParseError:
            continue
    return None


# ------------------------------------------------------------------------------------- lenient extraction

# "The estimated time interval is:", "Therefore, the answer:", '{"answer": ', "Estimate: ": the answer follows.
_ANSWER_MARKER = re.compile(
    r"\b(?:answer|interval|estimate|estimation|estimated\s+time|prediction|delay|response\s+time)\b[\"'\s]*"
    r"(?:(?:is|would\s+be|will\s+be|of)\b\s*:?|[:=])",
    re.IGNORECASE,
)
# Markdown and LaTeX wrappers baselines put around answers; removed before searching.
_MARKUP = re.compile(r"\*\*|__|`+|\$+|\\boxed\{|\\text\{|\\mathrm\{|\\,|(?<=\w)\}|^#+\s*", re.MULTILINE)
_ZERO_IN_PROSE = re.compile(
    r"\b(?:no\s+delay|without\s+(?:any\s+)?delay|immediately|instantly|right\s+away|straight\s+away|at\s+once)\b",
    re.IGNORECASE,
)
# Words an interval can start with (after leading punctuation): a digit or a quantity word.
_QUANTITY_STARTS = set(_ONES) | set(_TENS) | {"a", "an", "half", "quarter", "few", "several", "couple", "between"}


def _could_start_interval(word: str) -> bool:
    w = word.lstrip("[({<\"'~*_").lower()
    return bool(w) and (
        w[0].isdigit()
        or w in _QUANTITY_STARTS
        or w.rstrip(",.;:!?)]\"'") in _QUANTITY_STARTS
        or bool(_ISO.match(w.rstrip(",.;:!?)]\"'")))
    )


def _first_interval(text: str, max_words: int) -> float | None:
    """The first word position where an interval starts, read as the longest phrase that parses there."""
    for match in re.finditer(r"\S+", text):
        if not _could_start_interval(match.group()):
            continue
        found = split_leading_interval(text[match.start() :], max_words=max_words)
        if found is not None:
            return found[0]
    return None


def extract_interval(text, max_words: int = 8) -> float | None:
    """Minutes of the time interval inside model output (prose, markdown, JSON), or None when it holds none.

        extract_interval("**20 minutes**") == 20.0
        extract_interval("The estimated time interval is: 20 minutes") == 20.0
        extract_interval("I'd say about 2 hours later.") == 120.0
        extract_interval("Reasoning: cooking takes 30 minutes... Therefore, the answer: 45 minutes") == 45.0
        extract_interval("I don't know.") is None

    Reading order: the whole text by `parse_minutes` (strict; what TIMER writes); then, with markdown / LaTeX
    wrappers removed, the first interval after the last answer marker ("answer:", "interval is", "estimate:", a
    JSON "answer" field), so a chain of thought's intermediate durations do not count; then the first interval
    anywhere (the phrase starting there that parses, longest first, at most `max_words` words, so
    "1 hour 30 minutes" is 90); then, only when no quantity was found, a zero phrase ("no delay", "immediately",
    "right away") -> 0.0. Numbers without a unit ("20") are not intervals, as in `parse_minutes`.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        try:
            return parse_minutes(text)
        except IntervalParseError:
            return None
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return parse_minutes(text)
    except IntervalParseError:
        pass
    plain = _MARKUP.sub(" ", text)
    markers = list(_ANSWER_MARKER.finditer(plain))
    if markers:
        found = _first_interval(plain[markers[-1].end() :], max_words)
        if found is not None:
            return found
    found = _first_interval(plain, max_words)
    if found is not None:
        return found
    return 0.0 if _ZERO_IN_PROSE.search(plain) else None


# TimelyChat paper, Appendix A.3, Table 6: semantic interval categories, [low, high) in minutes.
BUCKETS = (
    ("instant", 0.0, 5.0),
    ("short", 5.0, 30.0),
    ("moderate", 30.0, 120.0),
    ("long", 120.0, 360.0),
    ("half-day", 360.0, 720.0),
    ("full-day", 720.0, 1440.0),
)


def interval_bucket(minutes: float) -> str:
    """The paper's Table 6 category of an interval; above 24 hours: "multi-day"."""
    m = parse_minutes(minutes)
    for name, low, high in BUCKETS:
        if low <= m < high:
            return name
    return "full-day" if m == 1440.0 else "multi-day"


# -- the TimelyChat authors' reading (`timelychat.interval_reading=paper`) ------------------------------------------
# Restated from what their `utils/postprocess.py` `convert_to_minutes` (sb-jang/timelychat, f717753) computes, so
# that RMSLE can be scored on the very numbers their script scored. It reads the *first* quantity only ("1 hour
# 30 minutes" is 60), takes a word number only where a unit follows it ("twenty-five minutes" is 5), reads
# "few"/"several" as 3, a digit range "2-3 hours" as its midpoint, knows no months or years, and returns 0 for
# anything it cannot read (it never fails).
# Text rewrites, in order, after lower-casing. Their "$\boxed{" is a plain (not raw) string whose "\b" is a
# backspace, so it removes "$\x08oxed{" and a LaTeX "$\boxed{" stays (its "}" goes with the last-but-one rewrite).
_PAPER_REWRITES = (
    ("**", ""),
    ("few", "3"),
    ("several", "3"),
    ("$\x08oxed{", ""),
    ("}$", ""),
    ("\\sqrt{", ""),
    ("}", ""),
    ("half an", "0.5"),
    ("half a", "0.5"),
    ("a half", "0.5"),
)
_PAPER_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
    "thousand": 1000,
}
_PAPER_UNIT_MINUTES = {"minute": 1, "hour": 60, "day": 1440, "week": 10080}  # seconds: divided by 60
# No word boundaries, as theirs: "often minutes" holds "ten minutes".
_PAPER_QUANTITY = re.compile(
    r"(\d*\.?\d+|" + "|".join(_PAPER_NUMBER_WORDS) + r")\s*(second|minute|hour|day|week)s?", re.IGNORECASE
)
_PAPER_RANGE = re.compile(r"(\d+)-(\d+)\s*(minute|hour)s?", re.IGNORECASE)
# Every part optional: it matches at the first "p" of the text, and only digits right after that "p" count.
_PAPER_ISO = re.compile(r"P(?:(\d+)D)?T?(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", re.IGNORECASE)


def _paper_in_minutes(value: float, unit: str) -> float:
    return value / 60 if unit == "second" else value * _PAPER_UNIT_MINUTES[unit]


def paper_interval_minutes(text: str) -> float:
    """Minutes of a predicted interval as the TimelyChat authors' script reads it (0.0 where it reads none).

    paper_interval_minutes("1 hour 30 minutes") == 60.0     paper_interval_minutes("2-3 hours") == 150.0
    paper_interval_minutes("twenty-five minutes") == 5.0    paper_interval_minutes("several hours") == 180.0
    paper_interval_minutes("2 to 3 hours") == 180.0         paper_interval_minutes("PT1H30M") == 90.0
    """
    text = text.strip().lower()
    for old, new in _PAPER_REWRITES:
        text = text.replace(old, new)
    found = _PAPER_RANGE.search(text)  # a digit range anywhere wins over a quantity before it
    if found:
        return _paper_in_minutes((float(found[1]) + float(found[2])) / 2, found[3].lower())
    found = _PAPER_QUANTITY.search(text)
    if found:
        number = found[1].lower()
        value = float(_PAPER_NUMBER_WORDS[number]) if number in _PAPER_NUMBER_WORDS else float(found[1])
        return _paper_in_minutes(value, found[2].lower())
    found = _PAPER_ISO.search(text)
    if found:
        days, hours, minutes, seconds = (int(part) if part else 0 for part in found.groups())
        return days * 1440 + hours * 60 + minutes + seconds / 60
    return 0.0
