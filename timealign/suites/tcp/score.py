"""TCP scoring: the predicted completion parsed from a reply, exact-match accuracy, the random baseline."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Sequence

from timealign.suites.questions import accuracy_counts, fmt_metric, strip_thinking
from timealign.suites.tcp.problem import answer_candidates
from timealign.suites.units import SampleUnits, mean_units

_MARKER = re.compile(r"answer\**\s*(?:is\b|:)", re.I)
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[ T]+|\s+at\s+)(\d{1,2}):(\d{2})")
_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")


def _norm_datetime(m: re.Match) -> str | None:
    y, mo, d, h, mi = map(int, m.groups())
    try:
        dt = datetime(y, mo, d) + timedelta(hours=h, minutes=mi)
    except ValueError:
        return None
    if h > 24 or mi > 59:
        return None
    return dt.strftime("%Y-%m-%d %H:%M GMT")


def _norm_date(m: re.Match) -> str | None:
    try:
        return date(*map(int, m.groups())).isoformat()
    except ValueError:
        return None


def parse_answer(text: str, kind: str) -> str | None:
    """The predicted completion ("YYYY-MM-DD HH:MM GMT" for short, "YYYY-MM-DD" for long), or None (unclear).

    The first date(-time) after the last "Answer:"/"answer is" that is followed by one; else the last one in the
    reply. Short answers need a date and a time (24:00 becomes 00:00 of the next day); other formats are unclear.
    """
    t = strip_thinking(text)
    pattern, norm = (_DATETIME, _norm_datetime) if kind == "short" else (_DATE, _norm_date)
    for marker in reversed(list(_MARKER.finditer(t))):
        m = pattern.search(t, marker.end())
        if m:
            value = norm(m)
            if value:
                return value
    for m in reversed(list(pattern.finditer(t))):
        value = norm(m)
        if value:
            return value
    return None


def random_baseline(items: Sequence[dict]) -> float | None:
    """Expected accuracy of guessing uniformly among the candidates (1/24 short, 1/7 long), averaged over items."""
    return sum(1 / len(answer_candidates(it)) for it in items) / len(items) if items else None


def simulate_random_baseline(items: Sequence[dict], seed: int = 0, trials: int = 1) -> float | None:
    """The random baseline run as a guesser: accuracy of uniform guesses over `trials` passes."""
    if not items:
        return None
    rng = random.Random(seed)
    pools = [(answer_candidates(it), it["answer"]) for it in items]
    hits = sum(rng.choice(pool) == gold for _ in range(trials) for pool, gold in pools)
    return hits / (trials * len(items))


def _metrics(rows: list[tuple[dict, str | None]]) -> dict:
    return {**accuracy_counts(rows), "random_baseline": random_baseline([item for item, _ in rows])}


def score(items: Sequence[dict], outputs: Sequence[str]) -> dict:
    """Exact-match accuracy (unclear = wrong) overall, per kind, per dependency type, per kind x dependency."""
    if len(items) != len(outputs):
        raise ValueError(f"{len(items)} items but {len(outputs)} outputs")
    preds = [parse_answer(o, it["kind"]) for it, o in zip(items, outputs)]
    rows = list(zip(items, preds))
    groups: dict[str, dict[str, list]] = {
        "by_kind": defaultdict(list),
        "by_dependency_type": defaultdict(list),
        "by_kind_dependency": defaultdict(list),
    }
    for item, pred in rows:
        groups["by_kind"][item["kind"]].append((item, pred))
        groups["by_dependency_type"][item["dependency_type"]].append((item, pred))
        groups["by_kind_dependency"][f"{item['kind']} {item['dependency_type']}"].append((item, pred))
    report = {"overall": _metrics(rows)}
    for name, buckets in groups.items():
        report[name] = {k: _metrics(v) for k, v in sorted(buckets.items())}
    report["predictions"] = preds
    return report


def tcp_units(report: dict) -> SampleUnits:
    """Bootstrap units: one per prototype; accuracy is the mean of `correct` (unclear and failed answers are wrong)."""
    return mean_units(report, {"accuracy": "correct"}, "prototype")


def markdown_summary(report: dict) -> str:
    o = report["overall"]
    lines = [
        "| metric | value |",
        "|---|---|",
        f"| items | {o['n']} |",
        f"| accuracy | {fmt_metric(o['accuracy'])} |",
        f"| unclear | {o['unclear']} |",
        f"| random baseline | {fmt_metric(o['random_baseline'])} |",
        "",
        "| bucket | n | accuracy | unclear | random |",
        "|---|---|---|---|---|",
    ]
    for group in ("by_kind", "by_dependency_type"):
        for k, m in report[group].items():
            lines.append(
                f"| {k} | {m['n']} | {fmt_metric(m['accuracy'])} | {m['unclear']} | "
                f"{fmt_metric(m['random_baseline'])} |"
            )
    return "\n".join(lines) + "\n"
