"""Generation speed of the temporal-reasoning suites (prints numbers; not a test).

    python benchmarks/bench_reasoning.py [n=200] [seed=0]

Goal (issue 5): Time Puzzles <= 0.2 s per puzzle on one core (the paper reports about 2 s).
"""

import sys
import time
from dataclasses import dataclass

from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.suites import chronosense, tcp, timepuzzles


@dataclass
class BenchOptions:
    n: int = opt(200, "items per suite and setting")
    seed: int = opt(0, "generation seed")


COMMAND = Command(
    prog="python benchmarks/bench_reasoning.py",
    options=BenchOptions,
    recipe="none",
    summary="Times the generation of each temporal-reasoning suite's set (best of 3 runs).\n\n"
    "Goal (issue 5): Time Puzzles <= 0.2 s per puzzle on one core (the paper reports about 2 s).",
)


def timed(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench(invocation: Invocation) -> int:
    n, seed = invocation.options.n, invocation.options.seed
    start = time.perf_counter()
    timepuzzles.get_calendar()  # one-time calendar table, reported separately
    calendar_s = time.perf_counter() - start
    cases = [
        ("timepuzzles implicit", lambda: timepuzzles.generate(n, seed)),
        ("timepuzzles explicit", lambda: timepuzzles.generate(n, seed, variant="explicit")),
        ("chronosense 0-shot", lambda: chronosense.generate(n, seed)),
        ("chronosense 3-shot", lambda: chronosense.generate(n, seed, setting="3-shot")),
        ("tcp short", lambda: tcp.generate(n, seed, kind="short")),
        ("tcp long", lambda: tcp.generate(n, seed, kind="long")),
    ]
    print(f"Time Puzzles calendar table (one-time): {calendar_s:.2f} s")
    print(f"{'suite':<24}{'items':>7}{'best s':>10}{'ms/item':>10}{'items/s':>10}")
    for name, fn in cases:
        seconds = timed(fn)
        print(f"{name:<24}{n:>7}{seconds:>10.3f}{1000 * seconds / n:>10.2f}{n / seconds:>10.0f}")
        if name == "timepuzzles implicit":
            per = seconds / n
            print(f"  goal <= 0.2 s per puzzle: {'met' if per <= 0.2 else 'NOT met'} ({per:.4f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, bench)


if __name__ == "__main__":
    sys.exit(main())
