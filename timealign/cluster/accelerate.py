"""The exact `accelerate launch` command of one node (the configs by name: `timealign.config.accelerate`)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from timealign.config.accelerate import ACCELERATE_DIR, accelerate_config_path, accelerate_configs

if TYPE_CHECKING:
    from timealign.cluster.slurm import Placement

__all__ = [
    "ACCELERATE_DIR",
    "accelerate_command",
    "accelerate_config_path",
    "accelerate_configs",
    "run_accelerate",
    "venv_tool",
    "with_accelerate_config",
    "with_auto_resume",
]


def venv_tool(name: str) -> str:
    """The tool next to this interpreter (the venv's), else whatever is on PATH."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def with_auto_resume(args: list[str]) -> list[str]:
    """Append training.resume_from_checkpoint=auto unless the user chose (a requeued job must resume)."""
    if any(a.lstrip("+").startswith("training.resume_from_checkpoint=") for a in args):
        return list(args)
    return [*args, "training.resume_from_checkpoint=auto"]


def with_accelerate_config(args: list[str], config: str | None) -> list[str]:
    """Tell the training script which accelerate config it is launched with (`launch.accelerate_config=`), when the
    launcher's `accelerate_config=` option overrides the recipe's: its launch check compares against that config."""
    if config is None:
        return list(args)
    kept = [a for a in args if not a.lstrip("+").startswith("launch.accelerate_config=")]
    at = 0  # right after recipe=NAME / --config PATH, where a reader looks for it
    for i, arg in enumerate(kept):
        if arg.startswith(("recipe=", "--config=")):
            at = i + 1
        elif arg == "--config":
            at = i + 2
    return [*kept[:at], f"launch.accelerate_config={config}", *kept[at:]]


def accelerate_command(
    script: str | Path, script_args: list[str], *, config: str | Path, where: Placement, accelerate: str | None = None
) -> list[str]:
    """The exact `accelerate launch` command for one node."""
    return [
        accelerate or venv_tool("accelerate"),
        "launch",
        "--config_file",
        str(config),
        "--num_machines",
        str(where.num_machines),
        "--num_processes",
        str(where.num_processes),
        "--machine_rank",
        str(where.machine_rank),
        "--main_process_ip",
        where.main_process_ip,
        "--main_process_port",
        str(where.port),
        str(script),
        *script_args,
    ]


def run_accelerate(cmd: list[str], env: Mapping[str, str]) -> int:
    """Run `cmd` (an `accelerate launch ...` command of `accelerate_command`) in this process with `env`, and return
    its exit code. The same launcher as the `accelerate` executable (accelerate's own parser and launch_command, in
    this interpreter), but a failed child ends the launch with the child's own last words (the one-line `error: ...`
    of a timealign entry point) and its exit code, not with accelerate's CalledProcessError or torchrun's
    ChildFailedError traceback appended."""
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if env is not os.environ:
        os.environ.clear()
        os.environ.update(env)
    if os.environ.get("SLURM_JOB_ID"):
        outlive_job_signals()
    args = launch_command_parser().parse_args(cmd[2:])
    # torchrun's agent would add "failed (exitcode: 2) local_rank: 0 ..." after the child's own error line
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    try:
        launch_command(args)
    except subprocess.CalledProcessError as failed:  # the one-process launcher
        return _exit_code(failed.returncode, "the training process")
    except ChildFailedError as failed:  # torchrun's agent (multi-process and DeepSpeed launchers)
        rank, first = failed.get_first_failure()
        return _exit_code(first.exitcode, f"rank {rank} (pid {first.pid})")
    return 0


def _term_in_job(signum, frame) -> None:
    print(
        f"[timealign launcher] {signal.Signals(signum).name}: Slurm signals every process of the job; the "
        "trainers checkpoint and stop, this launcher waits for them",
        file=sys.stderr,
        flush=True,
    )


def outlive_job_signals() -> None:
    """In a Slurm job, keep the launcher (torchrun's agent) alive through the job's signals, so the trainers can
    finish their checkpoint however long it takes: Slurm sends SIGTERM (scancel, preemption, the time limit) and
    `scancel --signal=USR1 --full` to every process of the job, the trainers included. Left alone, the agent dies on
    SIGUSR1 and answers SIGTERM by signalling its workers again (a second SIGTERM ends a trainer mid-save) and killing
    them 30 s later. SIGUSR1 is ignored (inherited: a trainer still loading the model ignores it too and sees the stop
    file at its first step); SIGTERM gets a handler that only logs (reset to the default in the trainers); torchrun
    is told not to take SIGTERM over (its --signals-to-handle, through PET_SIGNALS_TO_HANDLE). Slurm's SIGKILL,
    KillWait seconds after SIGTERM, still ends everything."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _term_in_job)
    for name in ("PET_SIGNALS_TO_HANDLE", "TORCHELASTIC_SIGNALS_TO_HANDLE"):  # torchrun's option, its env
        os.environ.setdefault(name, "SIGINT,SIGHUP,SIGQUIT")


def _exit_code(code: int, who: str) -> int:
    """A child's exit code as a shell reports it; a child killed by a signal said nothing itself: say it here."""
    if code >= 0:
        return code or 1
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    print(f"error: {who} was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else ""), file=sys.stderr)
    return 128 - code
