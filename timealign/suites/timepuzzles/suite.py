"""The Time Puzzles evaluation suite: its options, a freshly generated seeded set, generation and scoring."""

from __future__ import annotations

from dataclasses import dataclass

from timealign.config.schema import opt
from timealign.suites.questions import ask
from timealign.suites.registry import EvalContext, GeneratedSet, Suite, suite_cache_dir
from timealign.suites.timepuzzles.generate import MAX_SOLUTIONS, VARIANTS, generate
from timealign.suites.timepuzzles.score import markdown_summary, score_outputs


@dataclass
class TimePuzzlesSet:
    """What defines a generated Time Puzzles set (the same seed gives the same puzzles and answers)."""

    n: int = opt(50, f"number of puzzles; their target solution counts cycle 1..{MAX_SOLUTIONS}")
    seed: int = opt(0, "generation seed: the same seed gives the same puzzles")
    variant: str = opt(
        "implicit",
        f"{' | '.join(VARIANTS)}: facts about events, people, the zodiac... (implicit) "
        "or with their dates spelled out (explicit)",
    )


@dataclass
class TimePuzzlesOptions(TimePuzzlesSet):
    """`timepuzzles.key=value` options of the evaluator."""

    max_new_tokens: int = opt(256, "generation budget per puzzle (tokens)")


def generate_set(options: TimePuzzlesSet) -> list[dict]:
    return generate(options.n, options.seed, variant=options.variant)


def evaluate_timepuzzles(
    backend, records: list[dict], *, max_new_tokens: int = 256, desc: str = "TimePuzzles", cache_dir=None
) -> dict:
    """Ask each record's prompt as one user turn, generate, and score."""
    outputs, generation = ask(
        backend, records, suite="timepuzzles", max_new_tokens=max_new_tokens, cache_dir=cache_dir, desc=desc
    )
    report = score_outputs(records, outputs)
    report.update(generation)  # failed samples (scored as unparseable) and cache use
    report["settings"] = {
        "backend": getattr(backend, "name", type(backend).__name__),
        "max_new_tokens": max_new_tokens,
        "variant": records[0]["variant"] if records else None,
        "seed": records[0]["seed"] if records else None,
    }
    return report


def run_suite(backend, ctx: EvalContext) -> dict:
    options: TimePuzzlesOptions = ctx.options or TimePuzzlesOptions()
    report = evaluate_timepuzzles(
        backend, generate_set(options), max_new_tokens=options.max_new_tokens, cache_dir=suite_cache_dir(ctx)
    )
    report["markdown"] = markdown_summary(report)
    return report


SUITE = Suite(
    name="timepuzzles",
    description="Time Puzzles (EM, F1, Jaccard) on a freshly generated seeded set",
    run=run_suite,
    options=TimePuzzlesOptions,
    dataset=GeneratedSet(TimePuzzlesSet, generate_set),
)
