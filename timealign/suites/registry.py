"""Evaluation suites as declared units (in the style of lm-evaluation-harness tasks).

Each suite is a package, `timealign/suites/NAME/`, whose `suite.py` declares one module-level `SUITE = Suite(...)`:
its name (the package's), a description, `run(backend, ctx) -> report`, and optionally the dataclass of its
`NAME.key=value` options and, for suites that generate their items, how to generate a data set (`GeneratedSet`, used
by `data_prep/reasoning.py`). `SUITE_PACKAGES` lists the packages; a new benchmark is one package plus one name
there.

The report is a JSON-able dict with at least `overall` (metric name -> number or None) and, optionally, `samples`
(per-sample records) and `markdown` (a rendered section for report.md). Backends expose `tokenizer` (for the shared
PromptRenderer), `name`, and `generate(prompts, max_new_tokens=..., desc=...) -> list[str]`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from timealign.backends.cache import CACHE_SUBDIR
from timealign.config.options import RecipeError, build_options

# The suite packages, `timealign/suites/<name>/`: each declares `SUITE = Suite(name="<name>", ...)` in its
# `suite.py`, the one place a suite is declared. A suite added later is a package plus a line here.
SUITE_PACKAGES = ("tictoc", "timelychat", "timepuzzles", "chronosense", "tcp")


@dataclass
class EvalContext:
    recipe: Any  # timealign.config.Recipe
    out_dir: Path
    timestamps: bool = True
    prompt_mode: str = "none"
    family: str | None = None
    options: Any = None  # the suite's options: an instance of `Suite.options` (`Suite.parse_options`), or None
    checkpoint: str | None = None  # what the backend serves (a model or adapter folder, or a hub id)


@dataclass(frozen=True)
class GeneratedSet:
    """How a suite that generates its items makes a data set.

    `options` is the dataclass of what defines the set (n, seed, ...); the suite's eval options extend it, so an
    option means the same thing in `data_prep/reasoning.py suite=NAME n=200` and in `NAME.n=200` at eval time.
    `generate(options) -> items` accepts an instance of either.
    """

    options: type
    generate: Callable[[Any], list[dict]]


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    run: Callable[[Any, EvalContext], dict]
    options: type | None = None  # dataclass of the `NAME.key=value` options, help text per field; None: none
    dataset: GeneratedSet | None = None  # set for suites whose items are generated (see GeneratedSet)

    def __post_init__(self) -> None:
        if self.dataset is not None and not (self.options and issubclass(self.options, self.dataset.options)):
            raise TypeError(
                f"suite {self.name!r}: its options must extend its data set's options "
                f"({self.dataset.options.__name__}), so both read the same keys the same way"
            )

    def parse_options(self, raw: dict[str, str] | None = None) -> Any:
        """The suite's options from command-line text (`{"n": "200"}`), defaults filled in; None for a suite
        without options. Unknown keys and unreadable values raise RecipeError (a ValueError) naming `NAME.key`."""
        if self.options is None:
            if raw:
                raise RecipeError(f"suite {self.name!r} takes no options (got {', '.join(sorted(raw))})")
            return None
        return build_options(self.options, raw or {}, where=f"{self.name}.")


def available_suites() -> dict[str, Suite]:
    """Every declared suite by name (sorted)."""
    suites: dict[str, Suite] = {}
    for package in SUITE_PACKAGES:
        module_name = f"timealign.suites.{package}.suite"
        suite = getattr(importlib.import_module(module_name), "SUITE", None)
        if not isinstance(suite, Suite):
            raise TypeError(f"{module_name} must declare a module-level SUITE = Suite(...)")
        if suite.name != package:
            raise ValueError(f"{module_name} declares suite {suite.name!r}: a suite is named after its package")
        suites[suite.name] = suite
    return dict(sorted(suites.items()))


def get_suite(name: str) -> Suite:
    suites = available_suites()
    if name not in suites:
        raise KeyError(f"unknown suite {name!r}; known: {', '.join(suites)}")
    return suites[name]


def suite_cache_dir(ctx) -> Path | None:
    """`<out>/generations` for an EvalContext, or None when the recipe turns the cache off (`eval.cache=false`)."""
    if not getattr(getattr(ctx.recipe, "eval", None), "cache", True):
        return None
    return Path(ctx.out_dir) / CACHE_SUBDIR


def overall_markdown(title: str, report: dict) -> str:
    """A default report.md section: the overall metrics as a table."""
    lines = [f"## {title}", "", "| metric | value |", "|---|---|"]
    for key, value in report.get("overall", {}).items():
        shown = "n/a" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))
        lines.append(f"| {key} | {shown} |")
    return "\n".join(lines) + "\n"
