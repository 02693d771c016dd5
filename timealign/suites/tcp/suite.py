"""The TCP evaluation suite: its options, a freshly generated seeded set, generation and scoring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from timealign.config.schema import opt
from timealign.suites.questions import ask
from timealign.suites.registry import EvalContext, GeneratedSet, Suite, suite_cache_dir
from timealign.suites.tcp.generate import generate
from timealign.suites.tcp.problem import KINDS, VARIANTS
from timealign.suites.tcp.score import markdown_summary, score

DEFAULT_MAX_NEW_TOKENS = {"direct": 64, "cot": 1024}


@dataclass
class TCPSet:
    """What defines a generated TCP set (the same options give the same prototypes)."""

    n: int = opt(50, "number of prototypes")
    seed: int = opt(0, "generation seed")
    kind: str = opt(
        "mixed",
        f"{' | '.join(KINDS)} | mixed: hours and time zones (short), days and weekdays (long), or both alternating",
    )
    variant: str = opt(
        "direct",
        f"{' | '.join(VARIANTS)}: the answer instruction asks for the final answer only or for step-by-step reasoning",
    )
    robust: bool = opt(
        True,
        "keep only prototypes whose answer is the same under every reading the paper leaves "
        "implicit (false: also the others, answered under the paper's readings)",
    )


@dataclass
class TCPOptions(TCPSet):
    """`tcp.key=value` options of the evaluator."""

    max_new_tokens: int | None = opt(
        None,
        "generation budget per item (tokens); default "
        f"{DEFAULT_MAX_NEW_TOKENS['direct']} direct, "
        f"{DEFAULT_MAX_NEW_TOKENS['cot']} cot",
    )


def generate_set(options: TCPSet) -> list[dict]:
    return generate(options.n, options.seed, options.kind, variant=options.variant, robust=options.robust)


def evaluate_tcp(
    backend, items: Sequence[dict], *, max_new_tokens: int | None = None, desc: str = "TCP", cache_dir=None
) -> dict:
    """Ask each item's prompt as one user turn, generate, parse, score."""
    variant = items[0]["variant"] if items else "direct"
    max_new_tokens = max_new_tokens or DEFAULT_MAX_NEW_TOKENS[variant]
    outputs, generation = ask(
        backend, items, suite="tcp", max_new_tokens=max_new_tokens, cache_dir=cache_dir, desc=desc
    )
    report = score(items, outputs)
    report.update(generation)  # failed samples (scored as unparseable) and cache use
    preds = report.pop("predictions")
    report["samples"] = [
        {
            "id": it["id"],
            "kind": it["kind"],
            "dependency_type": it["dependency_type"],
            "gold": it["answer"],
            "pred": pred,
            "correct": pred == it["answer"],
            "output": out,
        }
        for it, pred, out in zip(items, preds, outputs)
    ]
    return report


def run_suite(backend, ctx: EvalContext) -> dict:
    options: TCPOptions = ctx.options or TCPOptions()
    items = generate_set(options)
    max_new_tokens = options.max_new_tokens or DEFAULT_MAX_NEW_TOKENS[options.variant]
    report = evaluate_tcp(backend, items, max_new_tokens=max_new_tokens, cache_dir=suite_cache_dir(ctx))
    report["settings"] = {
        "n": options.n,
        "seed": options.seed,
        "kind": options.kind,
        "variant": options.variant,
        "robust": options.robust,
        "max_new_tokens": max_new_tokens,
        "backend": getattr(backend, "name", "?"),
    }
    report["markdown"] = markdown_summary(report)
    return report


SUITE = Suite(
    name="tcp",
    description="TCP: temporal constraint-based planning prototypes, short (hours/time zones) "
    "and long (days/weekdays) (Ding et al. 2025)",
    run=run_suite,
    options=TCPOptions,
    dataset=GeneratedSet(TCPSet, generate_set),
)
