"""One training per output folder at a time (issue 42: two trainings into one output_dir, the second started while
the first ran, both exited 0 and wrote the same checkpoints). Real training processes of the tiny recipe: the
second stops in one line naming the first, a DDP launch stops on every rank, a killed holder (a crash, a preempted
Slurm job) leaves nothing that blocks the rerun, and a finished run leaves the lock free.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers import REPO_ROOT, run_checked

RUN_LOCK, RUN_LOCK_HOLDER = ".train.lock", ".train.lock.json"  # in output_dir (timealign.train.run_lock)
BIN = Path(sys.executable).parent
DPO = str(REPO_ROOT / "train/dpo.py")


def _args(out: Path, prepared: Path, steps: int) -> list[str]:
    return [
        "recipe=tiny",
        f"output_dir={out}",
        f"data.prepared_dir={prepared}",
        "data.synthetic_trajectories=8",
        "training.per_device_train_batch_size=1",
        f"training.max_steps={steps}",
        "training.save_strategy=no",
        "training.resume_from_checkpoint=auto",
        "training.report_to=[none]",
    ]


def _holder(out: Path) -> dict | None:
    try:
        return json.loads((out / RUN_LOCK_HOLDER).read_text())
    except (OSError, ValueError):
        return None


def _error_line(stderr: str) -> str:
    """The one `error:` line of a run (ranks and launcher together)."""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-4000:]
    return errors[0]


def test_a_second_training_into_a_running_folder_stops_in_one_line(train_env, prepared, tmp_path):
    from filelock import FileLock

    out = tmp_path / "run"
    log = tmp_path / "first.log"
    with open(log, "w") as sink:  # a long run: it trains until killed
        first = subprocess.Popen(
            [sys.executable, DPO, *_args(out, prepared, 100000)],
            cwd=REPO_ROOT,
            env={**train_env, "SLURM_JOB_ID": "4242"},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 180
        while (_holder(out) or {}).get("pid") != first.pid:
            assert first.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        holder = _holder(out)
        named = (
            f"error: output_dir={out} is in use by another training (pid {first.pid} on host {socket.gethostname()}, "
            f"Slurm job 4242, started {holder['started']}; it holds {out / RUN_LOCK}): wait for it to end, stop it, "
            "or train into another folder: output_dir=NEW_FOLDER"
        )

        second = run_checked([sys.executable, DPO, *_args(out, prepared, 100000)], train_env, check=False, timeout=300)
        assert second.returncode == 2 and _error_line(second.stderr) == named, second.stderr[-4000:]
        assert "Traceback" not in second.stderr

        # Two processes (DDP over gloo): rank 0 holds the answer, rank 1 learns it over the process group; both stop
        # at once (none waits at a barrier), one line in all.
        ddp = [str(BIN / "accelerate"), "launch", "--config_file", "recipes/accelerate/ddp.yaml"]
        ddp += ["--num_processes", "2", DPO, *_args(out, prepared, 100000)]
        both = run_checked(ddp, {**train_env, "ACCELERATE_USE_CPU": "true"}, check=False, timeout=300)
        assert both.returncode != 0 and _error_line(both.stderr) == named, both.stderr[-4000:]
        assert first.poll() is None and _holder(out)["pid"] == first.pid  # the first trains on, still named
    finally:
        first.kill()  # a crash: no handler of its own runs
        first.wait()

    # The kernel released the dead holder's lock: the rerun (a requeued job) takes it, trains and finishes.
    rerun = run_checked([sys.executable, DPO, *_args(out, prepared, 2)], train_env, timeout=300)
    assert "error:" not in rerun.stderr and (out / "model.safetensors").exists()
    assert _holder(out)["pid"] not in (first.pid, None)
    lock = FileLock(str(out / RUN_LOCK))
    lock.acquire(timeout=0)  # and a finished run leaves it free
    lock.release()
    record = json.loads((out / "timealign_run.json").read_text())
    assert not {RUN_LOCK, RUN_LOCK_HOLDER} & set(record["written"])  # no run's output: never deleted by one
