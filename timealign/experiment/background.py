"""Evaluation in the background on its own CPU cores, while the caller trains the next arm on the others.

The vLLM CPU engine computes on the cores it is bound to and, with its default binding, keeps one core of a small
machine for its scheduler: on 2 cores a whole-split TicToc evaluation runs on one core while the other idles. An
experiment that trains and evaluates several arms one after the other therefore leaves half the machine unused for
most of its evaluation time. `split_cores` halves the cores the process may use; `BackgroundEvaluation` runs one
`timealign.eval.runner.evaluate` call in a spawned process bound to the first half (its vLLM worker too, through
VLLM_CPU_OMP_THREADS_BIND), and `train_on` binds the caller and torch's threads to the second half.

The child publishes its reports where `evaluate` always does (`<out>/<suite>.json`); `wait` reads them back from
there, so the caller gets the same dicts an in-process call returns. A child that fails raises in `wait` with its
exit code (its traceback is printed by the child itself): nothing is scored from a failed evaluation.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)


def split_cores() -> tuple[list[int], list[int]] | None:
    """(evaluation cores, training cores): the cores this process may use, halved; None on fewer than 2."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    half = len(cores) // 2
    return cores[:half], cores[half:]


def bind(cores: list[int]) -> None:
    """Bind this process, its future children and torch's intra-op threads to `cores`."""
    import torch

    os.sched_setaffinity(0, cores)
    os.environ["OMP_NUM_THREADS"] = str(len(cores))
    torch.set_num_threads(len(cores))


def train_on(cores: list[int]) -> None:
    """Bind the caller (the training process) to `cores`; logs what it did, as a run's threads change with it."""
    bind(cores)
    logger.info("training on cores %s (%d torch threads)", ",".join(map(str, cores)), len(cores))


def _child(make_call: Callable[[], Any], cores: list[int], log_level: int, done) -> None:
    from timealign.config.cli import LOG_FORMAT

    logging.basicConfig(level=log_level, format=LOG_FORMAT)  # a spawned process starts with logging unset
    bind(cores)
    # vLLM's CPU worker binds its OpenMP threads itself; without this it would pick cores from the whole machine
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
    start = time.perf_counter()
    make_call()
    done.put(round(time.perf_counter() - start, 1))


class BackgroundEvaluation:
    """One `evaluate` call in a spawned process on `cores`; `wait()` returns (reports by suite, seconds).

    `make_call` is a picklable callable (a module-level function or a `functools.partial` of one) that runs the
    evaluation and publishes its reports under `out`; `suites` are the reports to read back.
    """

    def __init__(self, make_call: Callable[[], Any], out: Path, suites: list[str], cores: list[int], label: str):
        context = mp.get_context("spawn")  # vLLM's engine starts processes of its own: no fork of a torch process
        self.out, self.suites, self.label = Path(out), suites, label
        self._done = context.SimpleQueue()
        args = (make_call, cores, logging.getLogger().level, self._done)
        self._process = context.Process(target=_child, args=args, name=f"eval-{label}")
        self._process.start()
        logger.info("%s: evaluating in process %d on cores %s", label, self._process.pid, ",".join(map(str, cores)))

    def wait(self) -> tuple[dict[str, dict], float]:
        self._process.join()
        if self._process.exitcode != 0:
            raise RuntimeError(
                f"{self.label}: the evaluation process exited with code {self._process.exitcode} (its traceback is "
                f"printed above); nothing of it is scored. Its finished generations are cached under {self.out}: "
                "rerun with the same out= to resume"
            )
        seconds = self._done.get()
        reports = {suite: json.loads((self.out / f"{suite}.json").read_text()) for suite in self.suites}
        return reports, seconds

    def stop(self) -> None:
        """Kill the child (the caller is failing); its cached generations stay for a rerun."""
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()
