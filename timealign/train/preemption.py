"""Preemption: checkpoint and stop on the SLURM warning signal, then exit so the job is requeued.

`PreemptionCallback` turns SIGUSR1 (the sbatch `--signal=B:USR1@120` warning, forwarded by slurm/launch.sh as a stop
file) and SIGTERM into "save a checkpoint at the end of this step and stop". The request is OR-reduced over all ranks
at every optimizer step, so every process stops at the same step even when only one of them saw the signal. The stop
file (`$TIMEALIGN_STOP_FILE`) exists because signals do not travel reliably through `srun` + `accelerate launch`
(torchrun's agent dies on SIGUSR1). After the checkpoint, `TrainingSession.finish()` writes
`<output_dir>/preempted.json` and `$TIMEALIGN_STOP_FILE.requeue` (the sbatch script requeues on it) and exits with
`EXIT_REQUEUE` (75, EX_TEMPFAIL). The last log line says what happens next, read from Slurm (`stop_outcome`: `scontrol
show job`'s JobState and Requeue, the signal that arrived, TIMEALIGN_REQUEUE): requeued by the batch script (the USR1
warning), requeued by Slurm (preemption with Requeue=1), or not requeued (cancelled, time limit reached, or USR1 that
reached the job steps only: `scancel --signal=USR1 JOB` without --batch/--full, a `--signal` without `B:`; the batch
shell, which alone requeues, then never made the stop file).

Save budget: `SaveTimingCallback` logs how long each checkpoint took (rank 0) and warns when the last optimizer step
plus that save took longer than the job's real warning lead (`job_signal`: the `--signal` the job was submitted with,
read from Slurm; the recipe's `launch.signal_seconds` only outside a Slurm job). Slurm 22.05 shows a job's
`--signal` in neither `scontrol show job` nor the job's environment: it is known from `sacct`'s SubmitLine
(accounting), `submit`'s TIMEALIGN_SUBMIT_SIGNAL or SBATCH_SIGNAL. The batch script's `#SBATCH --signal` line is only
sbatch's default (a `--signal` on the command line overrides it): without accounting the lead is then unknown, and
the log says so with the measured save time instead of checking against a lead that may not be the job's.
`TIMEALIGN_TEST_SLOW_SAVE` (test-only, tests/test_slurm_real.py) makes every checkpoint save sleep that many seconds.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

EXIT_REQUEUE = 75  # EX_TEMPFAIL: "try again later"; slurm/launch.sh requeues the job (its TA_EXIT_REQUEUE)
STOP_FILE_ENV = "TIMEALIGN_STOP_FILE"
SLOW_SAVE_ENV = "TIMEALIGN_TEST_SLOW_SAVE"  # TEST-ONLY: seconds each checkpoint save sleeps (slow-save tests)
REQUEUE_SUFFIX = ".requeue"
PREEMPTED_FILE = "preempted.json"
SUBMIT_SIGNAL_ENV = "TIMEALIGN_SUBMIT_SIGNAL"  # the --signal `python -m timealign.cluster submit` gave sbatch
NOT_REQUEUED_STEPS_ONLY = "not requeued: signal the batch shell (--batch or --full)"


class TrainingPreempted(SystemExit):
    """Training stopped early on a preemption request after saving `checkpoint`; exits with EXIT_REQUEUE."""

    def __init__(self, checkpoint: str, step: int, reason: str):
        super().__init__(EXIT_REQUEUE)
        self.checkpoint, self.step, self.reason = checkpoint, step, reason

    def __str__(self) -> str:
        return f"preempted ({self.reason}) at step {self.step}; checkpoint {self.checkpoint}"


def _any_rank(flag: bool, device) -> bool:
    """OR of `flag` over all processes (every rank must call this at the same step)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


class PreemptionCallback(TrainerCallback):
    """On SIGUSR1/SIGTERM or an existing stop file: save a checkpoint at the end of the current step and stop.

    All ranks agree on the step (OR-reduce at every optimizer step). `stopped_at` is the step it stopped at and
    `reason` what asked for it. Handlers are installed by `install()` (main thread only) and restored by
    `uninstall()`; a second signal of the same kind falls back to the previous handler (e.g. kill on SIGTERM).
    """

    def __init__(self, signals=(signal.SIGUSR1, signal.SIGTERM), stop_file: str | None = None):
        self.signals = tuple(signals)
        self.stop_file = stop_file if stop_file is not None else (os.environ.get(STOP_FILE_ENV) or None)
        self.reason: str | None = None
        self.stopped_at: int | None = None
        self._previous: dict = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.reason == name:  # asked twice: give the signal its previous meaning
            previous = self._previous.get(signum)
            self.uninstall()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signum)
            return
        self.reason = self.reason or name
        logger.warning("%s received: checkpointing at the end of this step, then stopping", name)

    def requested(self) -> bool:
        if self.reason is None and self.stop_file and os.path.exists(self.stop_file):
            self.reason = f"stop file {self.stop_file}"
            logger.warning("%s exists: checkpointing at the end of this step, then stopping", self.stop_file)
        return self.reason is not None

    def on_train_begin(self, args, state, control, **kwargs):
        self.install()

    def on_step_end(self, args, state, control, **kwargs):
        if self.stopped_at is None and _any_rank(self.requested(), args.device):
            self.reason = self.reason or "another rank"
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control


def slurm_job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job --oneliner JOB` as {field: value}; {} when Slurm cannot be asked."""
    try:
        proc = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", str(job_id)], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 else {}


def _slurm_seconds(text: str | None) -> int | None:
    """`RunTime`/`TimeLimit` of scontrol ([D-]HH:MM:SS, MM:SS) in seconds; None for UNLIMITED or unreadable."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", (text or "").strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def stop_outcome(reason: str | None, env=None, job_fields=slurm_job_fields) -> tuple[bool, str]:
    """(requeued?, what happens to the job next) after a preemption checkpoint, from what asked for the stop and from
    Slurm itself (`scontrol show job`). While Slurm ends a job it shows JobState=COMPLETING whatever the cause
    (Slurm 22.05): a requeue has already counted the restart (Restarts above SLURM_RESTART_COUNT), the time limit
    shows Reason=TimeLimit (and RunTime >= TimeLimit), anything else ending it is a cancellation (scancel, or
    preemption that cancels)."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    resubmit = "resubmit the same command (training.resume_from_checkpoint=auto) to continue from it"
    if not job:
        return False, f"not in a Slurm job: nothing requeues it; {resubmit}"
    fields = job_fields(job)
    state = fields.get("JobState", "")
    restarts = int(env.get("SLURM_RESTART_COUNT") or 0)
    cap = int(env.get("TIMEALIGN_MAX_REQUEUES") or 20)
    hold = "after Slurm holds it ~2 min (Reason=BeginTime)"
    counted = fields.get("Restarts", "")
    if state in ("PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED") or (
        counted.isdigit() and int(counted) > restarts
    ):
        if fields.get("Requeue") == "0":
            return False, f"job {job} was preempted and is not requeueable (Requeue=0); {resubmit}"
        return True, (
            f"Slurm requeues job {job} (preemption or scontrol requeue): it resumes from this checkpoint {hold}"
        )
    limit, ran = _slurm_seconds(fields.get("TimeLimit")), _slurm_seconds(fields.get("RunTime"))
    if (
        state == "TIMEOUT"
        or fields.get("Reason") == "TimeLimit"
        or (state == "COMPLETING" and limit is not None and ran is not None and ran >= limit)
    ):
        return False, (
            f"job {job} reached its time limit before a checkpoint on the warning (USR1, launch."
            f"signal_seconds before the limit) was done: it is not requeued; raise launch.signal_seconds "
            f"(SBATCH_SIGNAL=B:USR1@N sbatch ...) and {resubmit}"
        )
    if state in ("CANCELLED", "COMPLETING"):
        return False, f"job {job} was cancelled (scancel): it is not requeued; {resubmit}"
    if reason != "SIGTERM":  # the USR1 warning (to this process, or to the batch shell: the stop file)
        stop_file = env.get(STOP_FILE_ENV)
        if not (stop_file and os.path.exists(stop_file)):  # the batch shell, which alone requeues, got no USR1
            return False, (
                f"USR1 reached the job steps only (scancel --signal=USR1 without --batch/--full, or a --signal "
                f"without B:): job {job} is {NOT_REQUEUED_STEPS_ONLY}; {resubmit}"
            )
        if env.get("TIMEALIGN_REQUEUE", "1") == "0":
            return False, f"the warning came and requeueing is off (TIMEALIGN_REQUEUE=0); {resubmit}"
        if restarts >= cap:
            return False, f"job {job} was requeued {restarts} times already (TIMEALIGN_MAX_REQUEUES={cap}); {resubmit}"
        return True, (
            f"time limit near (USR1): the batch script requeues job {job} and it resumes from this checkpoint {hold}"
        )
    return False, (
        f"{reason}: Slurm is ending job {job} (JobState={state or '?'}); it is requeued only if Slurm "
        f"requeues it (preemption with Requeue=1); else {resubmit}"
    )


@dataclass(frozen=True)
class JobSignal:
    """The warning a Slurm job gets before its time limit: sbatch's `--signal=[{R|B}:]<sig>[@sig_time]`."""

    spec: str  # as given, e.g. "B:USR1@120"; "" when the job has no --signal (or it is unknown)
    name: str  # "USR1" ("" when none)
    seconds: int  # sig_time: how long before the time limit (sbatch's default 60)
    batch: bool  # B: the batch shell only; without it the job steps only, never the batch shell
    source: str  # where it was read (or, when not known, why not), for the messages
    known: bool = True  # False: Slurm cannot say which --signal the job has; spec..batch say nothing then


def parse_signal(spec: str, source: str = "") -> JobSignal | None:
    """`[{R|B}:]<sig_num>[@sig_time]` as sbatch reads it (sig_num a number or name, sig_time 60 when left out); None
    when it is not one."""
    match = re.fullmatch(r"(?:([RB]{1,2}):)?(\w+?)(?:@(\d+))?", spec.strip())
    if not match:
        return None
    flags, sig, seconds = match.groups()
    try:
        number = int(sig) if sig.isdigit() else signal.Signals["SIG" + sig.upper().removeprefix("SIG")]
        name = signal.Signals(number).name.removeprefix("SIG")
    except (KeyError, ValueError):
        return None
    return JobSignal(spec.strip(), name, int(seconds) if seconds else 60, "B" in (flags or ""), source)


def unknown_signal(why: str) -> JobSignal:
    """A job whose --signal Slurm cannot show: `why` says what was read and what may override it."""
    return JobSignal("", "", 0, False, why, known=False)


def submit_line_signal(line: str) -> str | None:
    """The `--signal` value of an sbatch command line (sacct's SubmitLine), or None."""
    found = re.findall(r"(?:^|\s)--signal(?:=|\s+)(\S+)", line)
    return found[-1].strip("'\"") if found else None


def batch_script_signal(script: str) -> str | None:
    """The `#SBATCH --signal` of a batch script, as sbatch reads it: the `#SBATCH` lines before the first command
    (the last one wins), or None."""
    found = None
    for line in script.splitlines()[1:]:
        text = line.strip()
        if text and not text.startswith("#"):
            break
        match = re.match(r"#SBATCH\s+--signal(?:=|\s+)(\S+)", text)
        if match:
            found = match.group(1)
    return found


def _slurm_output(cmd: list[str]) -> str | None:
    """stdout of a Slurm command, or None when it fails (no Slurm here, accounting disabled, not a batch job)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _environment_kept(env) -> bool:
    """Whether the job got the submitting shell's whole environment (sbatch's default --export=ALL): only then does
    the job's environment show an SBATCH_SIGNAL sbatch read. A restricted --export shows as SLURM_EXPORT_ENV."""
    exported = env.get("SLURM_EXPORT_ENV")
    return not exported or "ALL" in exported.split(",")


def job_signal(env=None, run=_slurm_output) -> JobSignal | None:
    """The `--signal` this Slurm job was submitted with (what Slurm will send, and how long before the time limit);
    None outside a job; `known` False where Slurm cannot say.

    Slurm 22.05 shows it neither in `scontrol show job` nor in the job's environment (checked on the real Slurm of
    `make test-slurm`), so in sbatch's own order (command line over SBATCH_SIGNAL over the script): `sacct`'s
    SubmitLine (needs accounting), the --signal `python -m timealign.cluster submit` put on its command line
    (TIMEALIGN_SUBMIT_SIGNAL), SBATCH_SIGNAL, the batch script's `#SBATCH --signal` (`scontrol write batch_script`).
    The script's line is only a default: it is the job's lead only where the SubmitLine shows no --signal and the
    job's environment would show an SBATCH_SIGNAL; otherwise the lead is unknown (never the script's 120 s asserted
    for a job whose command line said 600)."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    line = run(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job}", "--format=SubmitLine"]) or ""
    line = line.strip()
    spec = submit_line_signal(line) if line else None
    if spec:
        return parse_signal(spec, f"--signal={spec} on its sbatch command line")
    if env.get(SUBMIT_SIGNAL_ENV):  # `submit` wrote the whole command line: nothing overrides its --signal
        spec = env[SUBMIT_SIGNAL_ENV]
        return parse_signal(spec, f"--signal={spec} from `python -m timealign.cluster submit`: launch.signal_seconds")
    unseen = (
        ""
        if line
        else "; a --signal on its sbatch command line would override it: Slurm shows that only with accounting"
    )
    if env.get("SBATCH_SIGNAL"):
        spec = env["SBATCH_SIGNAL"]
        return parse_signal(spec, f"SBATCH_SIGNAL={spec} where it was submitted{unseen}")
    script = run(["scontrol", "write", "batch_script", job, "-"])
    if script is None:
        return unknown_signal("Slurm shows no batch script for it (`scontrol write batch_script` failed)")
    spec = batch_script_signal(script)
    default = f"its batch script's #SBATCH --signal={spec}" if spec else "its batch script has no #SBATCH --signal"
    if not line:
        return unknown_signal(
            f"{default}, but a --signal on the sbatch command line overrides that, and without Slurm accounting "
            "(sacct) no command line shows"
        )
    if not _environment_kept(env):
        return unknown_signal(
            f"{default}, but an SBATCH_SIGNAL overrides that, and --export={env['SLURM_EXPORT_ENV']} keeps it from "
            "the job's environment"
        )
    if spec:
        return parse_signal(spec, f"#SBATCH --signal={spec} of its batch script")
    return JobSignal("", "", 0, False, "no --signal: no warning before its time limit")


class SaveTimingCallback(TrainerCallback):
    """How long each checkpoint takes (the time from the end of its step to on_save), logged by rank 0, with a
    warning when one optimizer step plus the save no longer fits in the warning's lead (the time limit's SIGTERM, and
    Slurm's SIGKILL KillWait seconds later, would cut a save short). The lead is the job's own (`job_signal`, read
    once at the start of training, which also says where the job's warning differs from the recipe's
    `signal_seconds`); outside a Slurm job the recipe's `signal_seconds`. Where Slurm cannot say which --signal the
    job has, nothing is checked: the log says the lead is unknown, and what lead the measured step + save need.
    None: no check (launch.requeue off). The test-only TIMEALIGN_TEST_SLOW_SAVE sleeps here, in the save path, before
    the measurement."""

    def __init__(self, signal_seconds: int | None, env=None, read_job_signal=job_signal):
        self.signal_seconds = signal_seconds  # the recipe's launch.signal_seconds
        self.env = os.environ if env is None else env
        self.read_job_signal = read_job_signal
        self.lead_seconds = signal_seconds
        self.lead_source = "launch.signal_seconds, the recipe's: not in a Slurm job"
        self.lead_unknown: str | None = None  # why the job's lead cannot be known (then nothing is checked)
        self._unknown_said = 0.0  # the longest step + save already logged against an unknown lead
        self.job_signal: JobSignal | None = None
        self._read = False
        self.step_started = self.step_ended = None
        self.step_seconds = self.save_seconds = None

    def _rank_zero(self, state) -> bool:
        # under torchrun on CPU every rank may call itself process zero (../shared/NOTES.md): RANK decides there
        return state.is_world_process_zero and self.env.get("RANK", "0") in ("", "0")

    def read_lead(self) -> None:
        """The job's real lead, once: what Slurm will send and when, not what the recipe says it asked for."""
        if self._read or self.signal_seconds is None:
            return
        self._read = True
        found = self.read_job_signal(self.env)
        if found is None and self.env.get("SLURM_JOB_ID"):  # in a job, the recipe's number is no more than a plan
            found = unknown_signal("Slurm could not say")
        self.job_signal = found
        if found is None:
            return
        job, recipe = self.env.get("SLURM_JOB_ID"), self.signal_seconds
        if not found.known:
            self.lead_seconds, self.lead_unknown = None, found.source
            logger.info(
                "job %s's warning lead is unknown (%s): checkpoint saves are timed, not checked against it; for a "
                "checked lead submit with SBATCH_SIGNAL=B:USR1@%d sbatch ... (or `python -m timealign.cluster "
                "submit`)",
                job,
                found.source,
                recipe,
            )
            return
        if not found.spec:
            self.lead_seconds = None
            logger.warning(
                "job %s has no warning signal (%s): its time limit ends it with SIGTERM and SIGKILL KillWait s later, "
                "mid-save, and nothing requeues it; submit with SBATCH_SIGNAL=B:USR1@%d sbatch ... (or `python -m "
                "timealign.cluster submit`)",
                job,
                found.source,
                recipe,
            )
            return
        self.lead_seconds, self.lead_source = found.seconds, found.source
        if found.name != "USR1" or not found.batch:
            what = (
                "without B: Slurm sends it to the job steps only: the trainer checkpoints and stops, but the job is "
                + NOT_REQUEUED_STEPS_ONLY
                if found.name == "USR1"
                else "slurm/*.sbatch checkpoint and requeue on USR1 to the batch shell only"
            )
            logger.warning(
                "job %s's warning is --signal=%s (%s): %s; submit with SBATCH_SIGNAL=B:USR1@%d sbatch ...",
                job,
                found.spec,
                found.source,
                what,
                found.seconds,
            )
        elif found.seconds != recipe:  # a shorter lead than the recipe planned for is the dangerous one
            (logger.warning if found.seconds < recipe else logger.info)(
                "launch.signal_seconds=%d, but job %s's warning comes %d s before its time limit (%s): checkpoint "
                "saves are checked against the job's %d s%s",
                recipe,
                job,
                found.seconds,
                found.source,
                found.seconds,
                f"; for the recipe's {recipe} s, submit with SBATCH_SIGNAL=B:USR1@{recipe} sbatch ... (or `python -m "
                "timealign.cluster submit`)"
                if found.seconds < recipe
                else "",
            )
        else:
            logger.info(
                "job %s's warning: USR1 to the batch shell %d s before its time limit (%s)",
                job,
                found.seconds,
                found.source,
            )

    def on_train_begin(self, args, state, control, **kwargs):
        if self._rank_zero(state):
            self.read_lead()

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ended = time.monotonic()
        if self.step_started is not None:
            self.step_seconds = self.step_ended - self.step_started

    def on_save(self, args, state, control, **kwargs):
        slow = float(os.environ.get(SLOW_SAVE_ENV) or 0)
        if slow > 0:
            logger.warning("%s=%s (test-only): this save sleeps %.0f s", SLOW_SAVE_ENV, slow, slow)
            time.sleep(slow)
        if self.step_ended is None:
            return
        self.save_seconds = time.monotonic() - self.step_ended
        if not self._rank_zero(state):
            return
        self.read_lead()
        step = self.step_seconds or 0.0
        logger.info("checkpoint-%d saved in %.1f s (its step: %.1f s)", state.global_step, self.save_seconds, step)
        took = step + self.save_seconds
        need = int(2 * took) + 30  # the lead to ask for: twice what was measured, and a margin
        if self.lead_unknown is not None:
            if took > 1.25 * self._unknown_said:  # said at the first save, again when one takes a quarter longer
                self._unknown_said = took
                logger.info(
                    "one step + a checkpoint took %.1f s; job %s's warning lead is unknown (%s), so it is not "
                    "checked: the job's --signal must come more than %.1f s before its time limit (ask for %d: "
                    "SBATCH_SIGNAL=B:USR1@%d sbatch ..., or launch.signal_seconds=%d with `python -m "
                    "timealign.cluster submit`)",
                    took,
                    self.env.get("SLURM_JOB_ID"),
                    self.lead_unknown,
                    took,
                    need,
                    need,
                    need,
                )
        elif self.lead_seconds is not None and took > self.lead_seconds:
            logger.warning(
                "one step + a checkpoint took %.1f s, more than the warning's lead of %d s (%s): near the time "
                "limit the save would be cut short and the job would resume from an older checkpoint; resubmit "
                "with a lead of at least %d s: SBATCH_SIGNAL=B:USR1@%d sbatch ..., or launch.signal_seconds=%d "
                "with `python -m timealign.cluster submit`",
                took,
                self.lead_seconds,
                self.lead_source,
                need,
                need,
                need,
            )
