"""Time Puzzles answer parsing and metrics (App. B): the dates after "MY ANSWER:", set EM/F1/Jaccard."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from typing import Iterable

from timealign.suites.questions import fmt_metric
from timealign.suites.units import SampleUnits, mean_units

_ANSWER_RE = re.compile(r"MY\s+ANSWER\s*[*_]*\s*[:：]", re.IGNORECASE)
_DATE_RE = re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)")
_NONE_RE = re.compile(r"[\s*_`'\"\[(]*none\b", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAnswer:
    dates: frozenset[str]  # ISO dates; an impossible date such as 2023-02-30 is kept as written (always wrong)
    parseable: bool  # False: no "MY ANSWER:" line, or one with neither dates nor "None" (scored as the empty set)


def parse_answer(text: str) -> ParsedAnswer:
    """The dates after the last "MY ANSWER:" (App. E). The answer runs to the first blank line, so a list continued
    on the next lines is read and later prose is not; "MY ANSWER: None" is the (parseable) empty set."""
    matches = list(_ANSWER_RE.finditer(text or ""))
    if not matches:
        return ParsedAnswer(frozenset(), False)
    tail = text[matches[-1].end() :].lstrip()
    tail = re.split(r"\n\s*\n", tail, maxsplit=1)[0]
    found = set()
    for m in _DATE_RE.finditer(tail):
        y, mo, d = (int(g) for g in m.groups())
        try:
            found.add(date(y, mo, d).isoformat())
        except ValueError:
            found.add(m.group(0))
    if found:
        return ParsedAnswer(frozenset(found), True)
    if _NONE_RE.match(tail):
        return ParsedAnswer(frozenset(), True)
    return ParsedAnswer(frozenset(), False)


def set_metrics(gold: Iterable[str], predicted: Iterable[str]) -> dict[str, float]:
    """EM, precision, recall, F1 and Jaccard of one instance (App. B.1, Eqs. 3-6). Conventions of App. B.1: when
    both sets are empty all metrics are 1; when exactly one is empty, all are 0 (Jaccard is 0 there by Eq. 6)."""
    g, p = set(gold), set(predicted)
    if not g and not p:
        return {"em": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0, "jaccard": 1.0}
    if not g or not p:
        return {"em": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "jaccard": 0.0}
    inter = len(g & p)
    precision, recall = inter / len(p), inter / len(g)
    f1 = 0.0 if inter == 0 else 2 * precision * recall / (precision + recall)
    return {"em": float(g == p), "precision": precision, "recall": recall, "f1": f1, "jaccard": inter / len(g | p)}


def aggregate(rows: list[dict]) -> dict:
    """Macro averages (Eq. 7) of per-instance metrics, plus the unparseable rate."""
    n = len(rows)
    if not n:
        return {"n": 0, "em": None, "f1": None, "jaccard": None, "unparseable": None}
    return {
        "n": n,
        **{k: sum(r[k] for r in rows) / n for k in ("em", "f1", "jaccard")},
        "unparseable": sum(not r["parseable"] for r in rows) / n,
    }


def score_outputs(records: list[dict], outputs: list[str]) -> dict:
    """Score model outputs against the records' gold sets: overall, by target solution count, by number of facts."""
    rows = []
    for rec, text in zip(records, outputs, strict=True):
        parsed = parse_answer(text)
        metrics = set_metrics(rec["gold"], parsed.dates)
        rows.append(
            {
                "id": rec["id"],
                "target_count": rec["target_count"],
                "num_facts": rec["num_facts"],
                "gold": rec["gold"],
                "predicted": sorted(parsed.dates),
                "parseable": parsed.parseable,
                **metrics,
                "output": text,
            }
        )
    by_count, by_facts = defaultdict(list), defaultdict(list)
    for r in rows:
        by_count[str(r["target_count"])].append(r)
        by_facts[str(r["num_facts"])].append(r)
    return {
        "overall": aggregate(rows),
        "by_target_count": {k: aggregate(v) for k, v in sorted(by_count.items())},
        "by_num_facts": {k: aggregate(v) for k, v in sorted(by_facts.items())},
        "samples": rows,
    }


def timepuzzles_units(report: dict) -> SampleUnits:
    """Bootstrap units: one per puzzle; EM, F1 and Jaccard are means over puzzles (Eq. 7)."""
    return mean_units(report, {"em": "em", "f1": "f1", "jaccard": "jaccard"}, "puzzle")


def markdown_summary(report: dict) -> str:
    o, s = report["overall"], report.get("settings", {})
    lines = [
        f"variant `{s.get('variant')}`, seed {s.get('seed')}, max_new_tokens {s.get('max_new_tokens')}",
        "",
        "| metric | value |",
        "|---|---|",
        f"| puzzles | {o['n']} |",
        f"| EM | {fmt_metric(o['em'])} |",
        f"| F1 | {fmt_metric(o['f1'])} |",
        f"| Jaccard | {fmt_metric(o['jaccard'])} |",
        f"| unparseable | {fmt_metric(o['unparseable'])} |",
        "",
        "| solutions | n | EM | F1 | Jaccard | unparseable |",
        "|---|---|---|---|---|---|",
    ]
    for k, m in report["by_target_count"].items():
        lines.append(
            f"| {k} | {m['n']} | {fmt_metric(m['em'])} | {fmt_metric(m['f1'])} | "
            f"{fmt_metric(m['jaccard'])} | {fmt_metric(m['unparseable'])} |"
        )
    return "\n".join(lines) + "\n"
