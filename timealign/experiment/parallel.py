"""experiment-real's arms and seeds as separate processes, several at once (`parallel=N`), merged into one report.

One run of smol keeps a GPU busy only in short bursts (each step is one pair of about a thousand tokens through a
135M model), so runs side by side share it well: on one H200, 8 runs started together (one arm and seed each, 182
pairs, whole-split evaluation) finished in 253 s, where their own clocks, each slowed by the sharing, added up to
1,190 s, and together they held 35-53 GB (docs/experiment/real.md, "On an H200"). Each unit below is an ordinary
`python -m timealign.experiment.real` run with its own folder and log under <out>/runs/; `merge_runs` then joins
them exactly as `merge=` does, so the merged report is the one a user would get by running them apart.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path

logger = logging.getLogger(__name__)

GIB_PER_RUN = 10  # GPU memory budgeted per run: 8 smol runs held 35-53 GB together on an H200
MOST_MEASURED = 8  # the most runs measured side by side on one GPU
# Options a unit sets itself; every other option the user gave is passed on unchanged.
SET_PER_UNIT = ("out", "arms", "seeds", "parallel", "overlap", "merge", "timer")


@dataclass(frozen=True)
class Unit:
    """One child run: its folder name under <out>/runs/, its arms and its seed."""

    name: str
    arms: tuple[str, ...]
    seed: int


def plan_units(arms: tuple[str, ...], seeds: tuple[int, ...], trained: dict[str, bool]) -> list[Unit]:
    """The untrained arms (base, clock: scored once, they stand for every seed) in one unit, then one unit per trained
    arm and seed."""
    untrained = tuple(a for a in arms if not trained[a])
    units = [Unit("untrained", untrained, seeds[0])] if untrained else []
    return units + [Unit(f"{arm}-seed{seed}", (arm,), seed) for seed in seeds for arm in arms if trained[arm]]


def auto_processes(device: str, units: int) -> int:
    """parallel=0: one process on a CPU (there `overlap` shares the cores); on a GPU as many as its free memory holds
    at GIB_PER_RUN each, at most the units, the CPU cores and MOST_MEASURED."""
    if device != "cuda":
        return 1
    import torch

    free, _ = torch.cuda.mem_get_info()
    return max(1, min(units, os.cpu_count() or 1, MOST_MEASURED, free // (GIB_PER_RUN * 2**30)))


def unit_argv(options, unit: Unit, folder: Path) -> list[str]:
    """The child's command line: the unit's own out/arms/seeds, one process, no overlap, and every option the user
    set (resolved: `device`, `eval_backend` and `eval_batch_size` as the parent resolved them)."""
    passed = [
        f"{f.name}={getattr(options, f.name)}"
        for f in fields(options)
        if f.name not in SET_PER_UNIT and getattr(options, f.name) != f.default
    ]
    own = [f"out={folder}", f"arms={','.join(unit.arms)}", f"seeds={unit.seed}", "parallel=1", "overlap=false"]
    return [sys.executable, "-m", "timealign.experiment.real", *own, *passed]


def run_units(options, units: list[Unit], processes: int, runs_dir: Path) -> list[Path]:
    """Every unit as its own process, `processes` at a time; their folders, in unit order. A unit that fails does not
    stop the others (their results stay usable); afterwards one RuntimeError names each failed unit and its log."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # the units share the CPU cores: one torch thread each unless the user chose otherwise
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    started = time.perf_counter()
    done: list[str] = []

    def one(unit: Unit) -> tuple[Unit, int]:
        log = runs_dir / f"{unit.name}.log"
        t0 = time.perf_counter()
        with log.open("w") as stream:
            code = subprocess.run(
                unit_argv(options, unit, runs_dir / unit.name), stdout=stream, stderr=subprocess.STDOUT, env=env
            ).returncode
        done.append(unit.name)
        logger.info("%s: %s in %.0f s (%d of %d done, %.0f s since the start); log %s", unit.name,
                    "done" if code == 0 else f"FAILED (exit {code})", time.perf_counter() - t0, len(done),
                    len(units), time.perf_counter() - started, log)  # fmt: skip
        return unit, code

    logger.info("%d runs, %d at a time: %s", len(units), processes, ", ".join(u.name for u in units))
    with ThreadPoolExecutor(max_workers=processes) as pool:
        results = list(pool.map(one, units))
    failed = [f"{unit.name} (exit {code}, log {runs_dir / f'{unit.name}.log'})" for unit, code in results if code]
    if failed:
        raise RuntimeError(
            f"parallel: {len(failed)} of {len(units)} runs failed: {'; '.join(failed)}; the others are in {runs_dir} "
            "(merge= joins finished runs)"
        )
    return [runs_dir / unit.name for unit in units]
