"""timealign/experiment/background.py: an evaluation in a spawned process on its own cores, its reports read back
from where `evaluate` publishes them, and a failing child failing the caller (nothing scored from it)."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import pytest

from timealign.experiment.background import BackgroundEvaluation, split_cores


def publish_report(out: str, nar: float) -> None:
    """Stands in for the evaluation the child runs: publishes a report as `evaluate` does, and what it saw."""
    import torch

    seen = {"affinity": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads(),
            "vllm_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")}  # fmt: skip
    Path(out, "tictoc.json").write_text(json.dumps({"overall": {"nar": nar}, "seen": seen}))


def fail(out: str) -> None:
    raise ValueError(f"evaluation of {out} failed on purpose")


def test_split_cores_halves_this_process_cores():
    cores = sorted(os.sched_getaffinity(0))
    split = split_cores()
    if len(cores) < 2:
        assert split is None
        return
    evaluation, training = split
    assert evaluation + training == cores and len(evaluation) == len(cores) // 2


def test_background_evaluation_runs_on_its_cores_and_returns_the_published_report(tmp_path):
    cores = sorted(os.sched_getaffinity(0))[:1]
    job = BackgroundEvaluation(partial(publish_report, str(tmp_path), 0.625), tmp_path, ["tictoc"], cores, "arm")
    reports, seconds = job.wait()
    assert reports["tictoc"]["overall"] == {"nar": 0.625} and seconds >= 0
    # the child and the vLLM engine it would start are bound to the given cores, torch to as many threads
    assert reports["tictoc"]["seen"] == {"affinity": cores, "threads": 1, "vllm_bind": str(cores[0])}


def test_a_failing_evaluation_fails_the_caller(tmp_path):
    (tmp_path / "tictoc.json").write_text(json.dumps({"overall": {"nar": 1.0}}))  # stale: must not be read
    job = BackgroundEvaluation(partial(fail, str(tmp_path)), tmp_path, ["tictoc"], [0], "broken-arm")
    with pytest.raises(RuntimeError, match=r"broken-arm: the evaluation process exited with code 1.*nothing of it"):
        job.wait()
