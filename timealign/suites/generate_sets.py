"""Generate a fresh, seeded data set of a suite that generates its items, as JSONL (`data_prep/reasoning.py`).

    python data_prep/reasoning.py suite=timepuzzles n=200 seed=0 out=data/timepuzzles.jsonl

The keys after `suite=` are that suite's data-set options: the same dataclass its eval options extend
(`registry.GeneratedSet`), so `n=200` here and `timepuzzles.n=200` at eval time give the same items.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from functools import lru_cache

from timealign.config.cli import HELP_FLAGS, Command, Invocation, run_command
from timealign.config.options import RecipeError, describe
from timealign.config.schema import opt
from timealign.data.records import write_jsonl
from timealign.suites.registry import Suite, available_suites

PROG = "python data_prep/reasoning.py"
SUMMARY = "Writes a freshly generated, seeded evaluation set of one suite as JSONL (one item per line)."
EXAMPLES = f"""    {PROG} suite=timepuzzles n=200 seed=0 out=data/timepuzzles.jsonl
    {PROG} suite=chronosense n=500 setting=3-shot out=data/chronosense.jsonl
    {PROG} suite=tcp n=100 kind=long out=data/tcp.jsonl
    {PROG} suite=tcp --help        (one suite's options)"""


@dataclass
class GenerateOptions:
    suite: str | None = opt(None, "the suite whose set to generate (required): one of those `--help` lists")
    out: str | None = opt(None, "the JSONL file to write; unset: print the first item instead")


def generating_suites() -> dict[str, Suite]:
    return {name: suite for name, suite in available_suites().items() if suite.dataset is not None}


@lru_cache(maxsize=None)
def suite_command(name: str) -> Command:
    """The command for one suite: `suite=` and `out=` plus that suite's data-set options."""
    suite = generating_suites()[name]
    options = dataclasses.make_dataclass(
        f"Generate{suite.dataset.options.__name__}", [], bases=(suite.dataset.options, GenerateOptions)
    )
    return Command(
        prog=f"{PROG} suite={name}",
        summary=f"{SUMMARY}\n\nsuite={name}: {suite.description}",
        options=options,
        recipe="none",
        examples=EXAMPLES,
    )


def overview_command() -> Command:
    """The command `--help` shows when no suite is chosen: every suite's data-set options."""
    listing = [
        f"suite={name}: {suite.description}\n{describe(suite.dataset.options)}"
        for name, suite in generating_suites().items()
    ]
    return Command(
        prog=PROG,
        summary=SUMMARY,
        options=GenerateOptions,
        recipe="none",
        examples="\n".join([EXAMPLES, "", "Data-set options of each suite:", "", "\n\n".join(listing)]),
    )


def chosen_suite(argv: list[str]) -> str | None:
    """The value of `suite=` on the command line (None when absent); unknown names fail with the list."""
    values = [arg.split("=", 1)[1] for arg in argv if arg.startswith("suite=")]
    if not values:
        return None
    known = generating_suites()
    if values[-1] not in known:
        raise RecipeError(f"unknown suite {values[-1]!r}; suites with generated sets: {', '.join(known)}")
    return values[-1]


def write_set(name: str, invocation: Invocation) -> int:
    options = invocation.options
    suite = generating_suites()[name]
    start = time.perf_counter()
    items = suite.dataset.generate(options)
    seconds = time.perf_counter() - start
    if options.out:
        path = write_jsonl(items, options.out)
        print(
            f"wrote {len(items)} {name} items to {path} in {seconds:.2f} s "
            f"({1000 * seconds / max(len(items), 1):.1f} ms per item)"
        )
    elif items:
        print(f"{len(items)} {name} items in {seconds:.2f} s; the first one (write them all with out=FILE):\n")
        print(items[0]["prompt"])
        print(f"-> {items[0].get('answer', items[0].get('gold'))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        name = chosen_suite(argv)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if name is None:
        if any(a in HELP_FLAGS for a in argv):
            return run_command(overview_command(), argv, lambda _: 0)
        print(
            f"error: choose a suite with suite=NAME ({', '.join(generating_suites())}); see {PROG} --help",
            file=sys.stderr,
        )
        return 2
    return run_command(
        suite_command(name), argv, lambda invocation: write_set(name, invocation), errors={ValueError: 2, OSError: 1}
    )


if __name__ == "__main__":
    sys.exit(main())
