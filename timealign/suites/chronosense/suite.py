"""The ChronoSense evaluation suite: its options, a freshly generated seeded set, generation and scoring."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from timealign.config.schema import opt
from timealign.suites.chronosense.generate import composition, generate
from timealign.suites.chronosense.prompts import SETTINGS, TEMPLATES, normalize_setting
from timealign.suites.chronosense.score import markdown_summary, score
from timealign.suites.questions import ask
from timealign.suites.registry import EvalContext, GeneratedSet, Suite, suite_cache_dir

# Sec. 4: up to 64 new tokens, 512 with CoT.
DEFAULT_MAX_NEW_TOKENS = {"0-shot": 64, "1-shot": 64, "3-shot": 64, "cot": 512}


@dataclass
class ChronoSenseSet:
    """What defines a generated ChronoSense set (the same options give the same items)."""

    n: int = opt(50, "number of items; an even n is exactly half True, per task too")
    seed: int = opt(0, "generation seed")
    tasks: str = opt("all", "all | allen | arithmetic | comma-separated task names (e.g. 'Before,Next Occurrence')")
    setting: str | None = opt(None, f"prompt setting: {' | '.join(SETTINGS)} (default 0-shot)")
    variant: str | None = opt(
        None, "the same as setting (the name other suites use); setting wins when both are given"
    )
    template: int = opt(0, f"prompt wording 0..{len(TEMPLATES) - 1} (the paper's three prompt variants)")
    named: bool = opt(
        False,
        "named events (the built-in list) instead of Event A / Event B for the Allen tasks; "
        "each pair of years is asked once; a relation whose named pairs run out goes on with abstract ones "
        "(abstract=true), so every relation keeps its share",
    )
    events: str | None = opt(
        None, "JSON file with a list of [name, start_year, end_year] to draw the named pairs from (implies named)"
    )

    def resolved_setting(self) -> str:
        return normalize_setting(self.setting or self.variant or "0-shot")


@dataclass
class ChronoSenseOptions(ChronoSenseSet):
    """`chronosense.key=value` options of the evaluator."""

    max_new_tokens: int | None = opt(
        None,
        "generation budget per item (tokens); default "
        f"{DEFAULT_MAX_NEW_TOKENS['0-shot']}, {DEFAULT_MAX_NEW_TOKENS['cot']} "
        "with cot",
    )


def generate_set(options: ChronoSenseSet) -> list[dict]:
    events = None
    if options.events:
        events = [tuple(e) for e in json.loads(Path(options.events).read_text(encoding="utf-8"))]
    return generate(
        options.n,
        options.seed,
        tasks=options.tasks,
        setting=options.resolved_setting(),
        template=options.template,
        named=options.named,
        events=events,
    )


def evaluate_chronosense(
    backend, items: Sequence[dict], *, max_new_tokens: int | None = None, desc: str = "ChronoSense", cache_dir=None
) -> dict:
    """Ask each item's prompt as one user turn, generate, parse, score."""
    setting = items[0]["setting"] if items else "0-shot"
    max_new_tokens = max_new_tokens or DEFAULT_MAX_NEW_TOKENS[setting]
    outputs, generation = ask(
        backend, items, suite="chronosense", max_new_tokens=max_new_tokens, cache_dir=cache_dir, desc=desc
    )
    report = score(items, outputs)
    report.update(generation)  # failed samples (scored as unparseable) and cache use
    preds = report.pop("predictions")
    report["samples"] = [
        {
            "id": it["id"],
            "task": it["category"],
            "abstract": it["abstract"],
            "hypothesis": it.get("hypothesis_relation", it.get("hypothesis_year")),
            "gold": it["answer"],
            "pred": pred,
            "correct": pred == it["answer"],
            "output": out,
        }
        for it, pred, out in zip(items, preds, outputs)
    ]
    return report


def run_suite(backend, ctx: EvalContext) -> dict:
    options: ChronoSenseOptions = ctx.options or ChronoSenseOptions()
    setting = options.resolved_setting()
    items = generate_set(options)
    max_new_tokens = options.max_new_tokens or DEFAULT_MAX_NEW_TOKENS[setting]
    report = evaluate_chronosense(backend, items, max_new_tokens=max_new_tokens, cache_dir=suite_cache_dir(ctx))
    report["settings"] = {
        "setting": setting,
        "template": options.template,
        "named": options.named or bool(options.events),
        "n": len(items),
        "seed": options.seed,
        "tasks": options.tasks,
        "max_new_tokens": max_new_tokens,
        "backend": getattr(backend, "name", "?"),
        "composition": composition(items),
    }
    report["markdown"] = markdown_summary(report)
    return report


SUITE = Suite(
    name="chronosense",
    description="ChronoSense: 13 Allen relations + 3 temporal-arithmetic True/False tasks (Islakoglu & Kalo 2025)",
    run=run_suite,
    options=ChronoSenseOptions,
    dataset=GeneratedSet(ChronoSenseSet, generate_set),
)
