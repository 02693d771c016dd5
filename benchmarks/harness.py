"""The benchmark harness every script in benchmarks/ shares: the command line, timing, statistics and output.

- command line: `Command` + `run_command` from `timealign.config.cli` (`python benchmarks/bench_X.py key=value`);
  `run_benchmark` calls a script's function with its options, `check_steps` rejects timed windows of no steps;
- environment: `offline_environment` (no hub, no uploads, no progress bars), `quiet_libraries`, `quiet`;
- timing: `best_time` (best of N after an optional warm-up), `cold_cli` (one end-to-end CLI run in a fresh
  interpreter, optionally with the top-level import times);
- statistics (pure, tested in tests/test_benchmarks.py): `summary` (best/median/max), `paired_ratios` and
  `ratio_range` for interleaved A/B timings, `fastest_quartile`, `abba` (alternating order that cancels drift);
- output: `machine_info`, `print_header`, `finish`, `table`, `met`, `verdict`, `log` (progress on stderr),
  `write_json`.

The trainer-versus-trainer comparison built on these lives in `benchmarks.trainer_ab`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

from timealign.config.cli import Command, run_command
from timealign.config.options import RecipeError

REPO_ROOT = Path(__file__).resolve().parents[1]

__all__ = [
    "REPO_ROOT",
    "Command",
    "RecipeError",
    "abba",
    "best_time",
    "check_steps",
    "cold_cli",
    "fastest_quartile",
    "finish",
    "log",
    "machine_info",
    "met",
    "offline_environment",
    "options_record",
    "paired_ratios",
    "print_header",
    "quiet",
    "quiet_libraries",
    "ratio_range",
    "run_benchmark",
    "summary",
    "table",
    "top_level_imports",
    "verdict",
    "write_json",
]


# ------------------------------------------------------------------------------------------- command line


def run_benchmark(command: Command, argv: list[str] | None, run: Callable[[Any], int | None]) -> int:
    """`--help`, `key=value` parsing into `command.options` (exit 2 with a message when wrong), then `run(options)`."""
    return run_command(command, argv, lambda invocation: run(invocation.options))


def options_record(options) -> dict:
    """The options as the `args` section of a result JSON (the same names the options have on the command line)."""
    return dataclasses.asdict(options)


def check_steps(warmup: int, **max_steps: int) -> None:
    """Every run must time at least one step after its untimed warm-up."""
    for name, steps in max_steps.items():
        if steps <= warmup:
            raise RecipeError(f"{name}={steps} must be larger than warmup={warmup}")


# -------------------------------------------------------------------------------------------- environment


def offline_environment() -> None:
    """No hub access, no uploads, no progress bars; before transformers/datasets are imported."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")  # TRL's reference-precompute loop reads this


def quiet_libraries() -> None:
    """Only the benchmark's own output: library warnings, info logs and progress bars off."""
    logging.disable(logging.WARNING)
    import transformers

    transformers.logging.set_verbosity_error()
    try:
        import datasets
    except ImportError:
        return
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


@contextlib.contextmanager
def quiet():
    """Silence library stdout/stderr chatter (progress bars, warnings) inside a timed or noisy block."""
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        yield


def log(msg: str) -> None:
    """Progress on stderr, so stdout holds only the report."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------- timing


def best_time(fn: Callable[[], Any], repeats: int, warmup: Callable[[], Any] | None = None) -> tuple[float, Any]:
    """(fastest of `repeats` timed calls of `fn`, the last call's result), after one untimed `warmup()` call.

    The fastest run is the least disturbed one on a machine shared with other work.
    """
    if warmup is not None:
        warmup()
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def cold_cli(cmd: list[str], importtime: bool = False) -> dict:
    """One end-to-end run of a command line in a fresh interpreter (what a user waits for, imports included).

    `cmd` starts after the interpreter. With `importtime`, `python -X importtime` reports the top-level imports'
    cumulative times, which say how much of the run is imports.
    """
    full = [sys.executable, *(["-X", "importtime"] if importtime else []), *cmd]
    start = time.perf_counter()
    proc = subprocess.run(full, cwd=REPO_ROOT, capture_output=True, text=True)
    out = {"seconds": time.perf_counter() - start, "returncode": proc.returncode, "command": " ".join(full[1:])}
    if importtime:
        out["top_level_imports_s"] = top_level_imports(proc.stderr)
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-2000:]
        log(f"CLI run failed (rc {proc.returncode}): {proc.stderr[-500:]}")
    return out


def top_level_imports(importtime_stderr: str, top: int = 4) -> dict:
    """Total and largest top-level imports (seconds) from `python -X importtime` output."""
    times = {}
    for line in importtime_stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if name.startswith(" ") and not name.startswith("  "):  # one space: imported by __main__ itself
            try:
                times[name.strip()] = int(cumulative) / 1e6
            except ValueError:
                continue
    largest = dict(sorted(times.items(), key=lambda kv: -kv[1])[:top])
    return {"total": sum(times.values()), "largest": largest}


# --------------------------------------------------------------------------------------------- statistics


def summary(values: list[float]) -> dict:
    """Best (smallest), median and largest of repeated timings, with the runs themselves."""
    return {"best": min(values), "median": statistics.median(values), "max": max(values), "runs": values}


def abba(a: str, b: str, rounds: int) -> Iterator[tuple[int, str]]:
    """(round, which) in the order A,B then B,A, ...: alternating cancels linear drift and order effects."""
    for rnd in range(rounds):
        for which in (a, b) if rnd % 2 == 0 else (b, a):
            yield rnd, which


def paired_ratios(a_seconds: list[float], b_seconds: list[float]) -> list[float]:
    """A/B speed ratios of paired timings (B's seconds over A's): above 1 means A is faster."""
    return [b / a for a, b in zip(a_seconds, b_seconds)]


def ratio_range(ratios: list[float]) -> dict:
    """Median and range of paired ratios, under the keys the A/B results use."""
    return {
        "ratio_paired_median": statistics.median(ratios),
        "ratio_paired_min": min(ratios),
        "ratio_paired_max": max(ratios),
    }


def fastest_quartile(step_seconds: list[float]) -> float:
    """The 25th-percentile step time (lower element). Other processes only ever add time to a step, so the
    fastest quartile approximates the speed on unshared cores."""
    ordered = sorted(step_seconds)
    return ordered[(len(ordered) - 1) // 4]


# ------------------------------------------------------------------------------------------------- output


def machine_info() -> dict:
    """Library versions, cores and load at the start (the `env` section of a result JSON)."""
    import torch
    import transformers
    import trl

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "platform": platform.platform(),
        "loadavg_start": os.getloadavg(),
    }


def finish(results: dict, started: float) -> None:
    """Total wall time and the load at the end, once every part has run."""
    results["total_s"] = time.perf_counter() - started
    results["env"]["loadavg_end"] = os.getloadavg()


def print_header(title: str, env: dict, note: str = "") -> None:
    print(
        f"# {title}: torch {env['torch']}, transformers {env['transformers']}, trl {env['trl']}, "
        f"{env['cpu_count']} CPU cores, {env['torch_threads']} torch threads, CUDA {env['cuda']}"
    )
    load = ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(env["loadavg_start"], env["loadavg_end"]))
    print(f"load average (1/5/15 min) at start/end: {load}" + (f"; {note}" if note else ""))


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with padded columns."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def met(flag: bool) -> str:
    return "MET" if flag else "NOT MET"


def verdict(goal_met: bool, within_noise: bool | None) -> str:
    """MET, or NOT MET with whether the miss is inside the run-to-run noise (None: unknown, one repeat)."""
    if goal_met:
        return met(True)
    return (
        met(False)
        + {
            True: " (within run-to-run noise)",
            False: " (outside run-to-run noise)",
            None: " (noise unknown: 1 repeat)",
        }[within_noise]
    )


def write_json(path: str | None, results: dict, say: bool = True) -> None:
    """Every number to `path` (nothing when no path was given); `say`: print where."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results, indent=2, default=str))
    if say:
        print(f"wrote {target}")
