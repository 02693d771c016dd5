"""One training per output folder at a time: `<output_dir>/.train.lock`, an OS file lock (filelock, as data prep's).

    lock = lock_output_dir(out)   # `timealign.train.preflight`: after the launch checks, before the claim
    lock.announce()               # the claim held: name this run in .train.lock.json
    with lock:                    # train/dpo.py and train/sft.py `run`: held until the run returns or raises
        ...

Two trainings into one output_dir (the second started while the first runs, with
training.resume_from_checkpoint=auto, say) would both take the folder for their own run and write the same
checkpoints. The first to start takes the lock before it claims the folder (`timealign.train.output_dir`) and, once
the claim holds, writes who it is to `<output_dir>/.train.lock.json` (pid, host, Slurm job, start time); the second
stops at once, before data prep, with `OutputDirBusy` (one line naming that job, exit 2).

The lock is the kernel's (flock on the open file): it goes with the process that holds it, however it ends (an
exception, a crash, SIGKILL, a Slurm preemption), so a requeued job or a rerun after a crash takes it again. The
holder file a dead process leaves behind only names; it never blocks.

One lock per run: the launcher's global rank 0 takes it (`launcher_rank`, the rank that claims the folder and
prepares the data). The other ranks learn the outcome from rank 0 over the process group when the launch check has
made one, so a refused launch stops on every rank, not on rank 0 alone while the rest wait for it at a barrier.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import launcher_rank
from timealign.config.written import RUN_LOCK, RUN_LOCK_HOLDER


class OutputDirBusy(RecipeError):
    """Another training holds output_dir's lock. Every rank raises it; rank 0 says it (`run_command`)."""

    rank_zero_only = True


def holder_record(env=None) -> dict:
    """Who this process is, as the next run into the folder will name it."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID", "").strip() or None
    array, task = env.get("SLURM_ARRAY_JOB_ID", "").strip(), env.get("SLURM_ARRAY_TASK_ID", "").strip()
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "slurm_job": f"{array}_{task}" if array and task else job,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def _gone(pid: int, host: str) -> bool:
    """Whether the holder file names a process of this host that has ended (a dead run's file, not yet replaced)."""
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        return False
    return False


def describe_holder(out: Path) -> str:
    """The running job in words, from the holder file (what it wrote once its claim of the folder held)."""
    unnamed = "one that started moments ago and has not named itself yet"
    try:
        record = json.loads((out / RUN_LOCK_HOLDER).read_text())
        pid, host = int(record["pid"]), str(record["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return unnamed
    if _gone(pid, host):
        return unnamed
    words = f"pid {pid} on host {host}"
    if record.get("slurm_job"):
        words += f", Slurm job {record['slurm_job']}"
    if record.get("started"):
        words += f", started {record['started']}"
    return words


class RunLock:
    """The held lock (None on ranks other than 0, and when no claim is made); `release()` is idempotent."""

    def __init__(self, lock=None, out: Path | None = None):
        self._lock, self._out = lock, out

    def announce(self) -> None:
        """Name this run in the holder file (rank 0, once the claim holds: a refused run leaves the folder as it
        was)."""
        if self._lock is None or self._out is None:
            return
        tmp = self._out / f"{RUN_LOCK_HOLDER}.tmp-{os.getpid()}"  # whole or absent (written.TEMPORARY)
        tmp.write_text(json.dumps(holder_record()) + "\n")
        os.replace(tmp, self._out / RUN_LOCK_HOLDER)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _agree(refusal: str | None) -> str | None:
    """Rank 0's outcome on every rank, when a process group exists (every rank calls this at the same point)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return refusal
    box = [refusal]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def lock_output_dir(out: str | Path) -> RunLock:
    """Take `<out>/.train.lock` on rank 0 (creating `out`); OutputDirBusy, naming the job that holds it, when
    another training runs there. `announce()` names this run once its claim of the folder holds."""
    from filelock import FileLock, Timeout

    out = Path(out)
    lock, refusal = None, None
    if launcher_rank() == 0:
        out.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(out / RUN_LOCK))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            lock = None
            refusal = (
                f"output_dir={out} is in use by another training ({describe_holder(out)}; it holds "
                f"{out / RUN_LOCK}): wait for it to end, stop it, or train into another folder: output_dir=NEW_FOLDER"
            )
    held = RunLock(lock, out)
    try:
        refusal = _agree(refusal)
    except BaseException:
        held.release()
        raise
    if refusal:
        raise OutputDirBusy(refusal)
    return held
