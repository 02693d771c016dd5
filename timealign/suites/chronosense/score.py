"""ChronoSense scoring: a reply parsed to True / False / unclear, accuracy overall and per task."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Sequence

from timealign.suites.chronosense.generate import TASKS
from timealign.suites.questions import accuracy_counts, fmt_metric, strip_thinking
from timealign.suites.units import SampleUnits, mean_units

_CHOICE_PHRASE = re.compile(r"\btrue\s*(?:or|/)\s*false\b|\bfalse\s*(?:or|/)\s*true\b", re.I)
_MARKED = re.compile(r"answer\**\s*(?:is\s*:?|:)\s*[\*\"'`(\[]*\s*(true|false)\b", re.I)
_LEADING = re.compile(r"^[\s\*\"'`(\[#>:.-]*(true|false)\b", re.I)
_WORD = re.compile(r"\b(true|false)\b", re.I)


def parse_true_false(text: str) -> str | None:
    """The model's verdict, "True" / "False", or None (unclear).

    Order: an explicit "answer: X" / "answer is X" (the last one, so CoT conclusions win); else a reply that
    starts with True/False; else a reply that mentions exactly one of the two words. Echoes of the instruction
    ("True or False") are ignored; anything else (both words, neither, Yes/No) is unclear.
    """
    t = strip_thinking(text)
    t = _CHOICE_PHRASE.sub(" ", t)
    marked = _MARKED.findall(t)
    if marked:
        return marked[-1].capitalize()
    lead = _LEADING.match(t)
    if lead:
        return lead.group(1).capitalize()
    words = {w.lower() for w in _WORD.findall(t)}
    if len(words) == 1:
        return words.pop().capitalize()
    return None


def _metrics(rows: list[tuple[dict, str | None]]) -> dict:
    counts = accuracy_counts(rows)
    clear = counts["n"] - counts["unclear"]
    return {**counts, "accuracy_on_clear": counts["correct"] / clear if clear else None}


def score(items: Sequence[dict], outputs: Sequence[str]) -> dict:
    """Accuracy (unclear = wrong) overall, per task (13 relations + 3 arithmetic), per question type, per label."""
    if len(items) != len(outputs):
        raise ValueError(f"{len(items)} items but {len(outputs)} outputs")
    preds = [parse_true_false(o) for o in outputs]
    rows = list(zip(items, preds))
    overall = _metrics(rows)
    overall["random_baseline"] = 0.5
    overall["true_fraction"] = sum(i["label"] for i in items) / len(items) if items else None
    groups: dict[str, dict[str, list]] = {
        "by_task": defaultdict(list),
        "by_type": defaultdict(list),
        "by_label": defaultdict(list),
    }
    for item, pred in rows:
        groups["by_task"][item["category"]].append((item, pred))
        groups["by_type"][item["task"]].append((item, pred))
        groups["by_label"][item["answer"]].append((item, pred))
    report = {"overall": overall}
    for name, buckets in groups.items():
        order = TASKS if name == "by_task" else sorted(buckets)
        report[name] = {k: _metrics(buckets[k]) for k in order if k in buckets}
    report["predictions"] = preds
    return report


def chronosense_units(report: dict) -> SampleUnits:
    """Bootstrap units: one per item; accuracy is the mean of `correct` (unclear and failed answers are wrong)."""
    return mean_units(report, {"accuracy": "correct"}, "item")


def markdown_summary(report: dict) -> str:
    o = report["overall"]
    s = report.get("settings", {})
    lines = [
        f"setting {s.get('setting', '?')}, template {s.get('template', '?')}, "
        f"{'named' if s.get('named') else 'abstract'} events",
        "",
        "| metric | value |",
        "|---|---|",
        f"| items | {o['n']} |",
        f"| accuracy | {fmt_metric(o['accuracy'])} |",
        f"| unclear | {o['unclear']} |",
        f"| accuracy on clear answers | {fmt_metric(o['accuracy_on_clear'])} |",
        f"| random baseline | {fmt_metric(o['random_baseline'])} |",
        "",
        "| task | n | accuracy | unclear |",
        "|---|---|---|---|",
    ]
    for task, m in report["by_task"].items():
        lines.append(f"| {task} | {m['n']} | {fmt_metric(m['accuracy'])} | {m['unclear']} |")
    named = s.get("composition", {}).get("named_by_task", {})
    filled = {t: report["by_task"][t]["n"] - k for t, k in named.items() if t in report["by_task"]}
    if s.get("named") and any(filled.values()):
        lines += [
            "",
            "Abstract items (Event A / Event B) where a relation's named pairs ran out: "
            + ", ".join(f"{t} {k}" for t, k in filled.items() if k),
        ]
    return "\n".join(lines) + "\n"
