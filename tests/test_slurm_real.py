"""The real batch scripts on a real Slurm (Debian's slurm-wlm 22.05 + munge), started on this host: `make test-slurm`.

tests/slurm_cluster.py starts slurmctld and three slurmd: partition `one` (this host) and partition `two` (nodes n1
and n2 on this host, NodeAddr 127.0.0.1; the names need not resolve). The unedited slurm/*.sbatch are submitted on
the tiny recipes (CPU-only jobs, `--gres=none`), with plain `sbatch` as a user types it and through
`python -m timealign.cluster submit`. Nothing here fakes a SLURM variable.

The cluster tests run only when asked (TIMEALIGN_TEST_SLURM=1, which `make test-slurm` sets after installing
Slurm), as root, with slurmctld installed: they start system daemons and take a few minutes. The first tests need
no daemons: what the launcher makes of a job without GPUs, of `sinfo`'s node lines and of Slurm times.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import slurm_cluster
from helpers import REPO_ROOT


def _skip_reason() -> str | None:
    if os.environ.get("TIMEALIGN_TEST_SLURM") != "1":
        return (
            "real-Slurm tests run with `make test-slurm` (installs slurm-wlm + munge through apt, starts "
            "slurmctld/slurmd; or set TIMEALIGN_TEST_SLURM=1)"
        )
    if os.geteuid() != 0:
        return "real-Slurm tests need root: they start munged, slurmctld and slurmd"
    missing = slurm_cluster.missing_tools()
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): `make test-slurm` installs it (apt, root)"
    return None


real_slurm = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
# Tiny offset-DPO: 24 training pairs, batch 2, one epoch of 12 steps, a checkpoint every 2 steps.
TRAIN = [
    "recipe=tiny",
    "data.synthetic_trajectories=8",
    "training.per_device_train_batch_size=2",
    "training.logging_steps=1",
    "training.save_strategy=steps",
    "training.save_steps=2",
    "training.max_steps=12",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = time.monotonic()
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        print(f"\nSlurm up in {time.monotonic() - started:.1f} s: {cluster.conf}")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def job_env(cluster, tmp_path_factory):
    """The submitting shell: no SLURM_* of an outer job, the test cluster's config, offline, logs in a temp dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "ACCELERATE_", "TIMEALIGN_", "MASTER_", "WANDB_RUN_ID"))
    }
    logs = tmp_path_factory.mktemp("logs")
    env.update(
        cluster.env,
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        WANDB_MODE="offline",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        TIMEALIGN_CACHE=str(tmp_path_factory.mktemp("cache")),
        TIMEALIGN_LOG_DIR=str(logs),
        TIMEALIGN_PYTHON=sys.executable,
    )
    return env


# ---------------------------------------------------------------------------------------------- helpers


def _run(env, *cmd, check=True, timeout=120) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def sbatch(env, *args) -> str:
    """Plain sbatch, as a user types it (with the test's log folder)."""
    out = _run(env, "sbatch", "--parsable", f"--output={env['TIMEALIGN_LOG_DIR']}/%x-%j.out", *args).stdout
    return out.strip().split(";")[0]


def submit(env, *args) -> str:
    """`python -m timealign.cluster submit`: sbatch from the recipe's launch section."""
    proc = _run(env, sys.executable, "-m", "timealign.cluster", "submit", *args)
    match = re.search(r"Submitted batch job (\d+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    return match.group(1)


def job_info(env, job: str) -> dict[str, str]:
    out = _run(env, "scontrol", "show", "job", "--oneliner", job).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def job_log(env, job: str) -> str:
    logs = list(Path(env["TIMEALIGN_LOG_DIR"]).glob(f"*-{job}.out"))
    return logs[0].read_text(errors="replace") if logs else ""


def _describe(env, job: str) -> str:
    info = job_info(env, job)
    return (
        f"job {job}: JobState={info.get('JobState')} Reason={info.get('Reason')} ExitCode={info.get('ExitCode')} "
        f"Restarts={info.get('Restarts')}\n--- log tail ---\n{job_log(env, job)[-4000:]}"
    )


def wait_for(what: str, ready, timeout: float, env=None, job: str | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}" + (f"\n{_describe(env, job)}" if job else "")
    )


def wait_done(env, job: str, timeout: float = 600) -> dict[str, str]:
    """Wait until the job ends for good (a requeued job passes through PENDING/BeginTime on its way)."""
    return wait_for(
        f"job {job} to end",
        lambda: (lambda i: i if i.get("JobState") in TERMINAL else None)(job_info(env, job)),
        timeout,
        env,
        job,
    )


def _complete_checkpoint(out: Path, step: int) -> bool:
    return (out / f"checkpoint-{step}" / "trainer_state.json").is_file()


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


# ---------------------------------------------------------------------------------------------- no daemons needed


def test_a_job_without_gpus_never_becomes_eight_processes():
    from timealign.cluster import placement

    job = {
        "SLURM_JOB_ID": "12",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
        "TIMEALIGN_MAIN_ADDR": "10.0.0.5",
    }
    with pytest.raises(RuntimeError, match=r"no GPUs .* launch.gpus_per_node is 8: submit with --gres=gpu:8"):
        placement(job, recipe_gpus=8)
    with pytest.raises(RuntimeError, match="no GPUs"):  # Slurm saying 0 is no better
        placement({**job, "SLURM_GPUS_ON_NODE": "0"}, recipe_gpus=4)
    cpu = placement(job, recipe_gpus=0)
    assert (cpu.use_cpu, cpu.processes_per_node, cpu.num_processes, cpu.machine_rank) == (True, 1, 2, 1)
    assert cpu.main_process_ip == "10.0.0.5"  # resolved on the first node by slurm/launch.sh, not "n1"
    assert placement(job, recipe_gpus=0, processes_per_node=3).num_processes == 6
    gpu = placement({**job, "SLURM_JOB_GPUS": "0,1,2,3"}, recipe_gpus=8)  # the allocation, not the recipe
    assert (gpu.use_cpu, gpu.gpus_per_node, gpu.num_processes) == (False, 4, 8)
    with pytest.raises(RuntimeError, match="at most one process per GPU"):
        placement({**job, "SLURM_GPUS_ON_NODE": "2"}, processes_per_node=3)
    assert (
        placement({"SLURM_JOB_ID": "3", "SLURM_JOB_NODELIST": "gpu07", "SLURM_GPUS_ON_NODE": "2"}).main_process_ip
        == "127.0.0.1"
    )  # one node: loopback, whatever the name


def test_cpu_launch_environment():
    from timealign.cluster import accelerate_config_path, placement
    from timealign.cluster.jobs import launch_env

    cpu = placement({}, recipe_gpus=0)
    assert launch_env(cpu, accelerate_config_path("ddp")) == {"ACCELERATE_USE_CPU": "true"}  # else N lone trainings
    assert launch_env(cpu, accelerate_config_path("zero2")) == {}  # DeepSpeed runs on CPU as configured
    with pytest.raises(RuntimeError, match="FSDP, which needs GPUs"):
        launch_env(cpu, accelerate_config_path("fsdp"))
    assert launch_env(placement({}, recipe_gpus=2), accelerate_config_path("fsdp")) == {}


def test_partition_checks_read_sinfo_fields():
    from timealign.cluster.slurm import NodeResources, PartitionInfo, check_request, gres_gpus, slurm_minutes

    assert gres_gpus("gpu:a100:4(S:0-1),shard:8") == 4 and gres_gpus("gpu:a100:4(S:0-1)", "l40s") == 0
    assert gres_gpus("gpu:2,gpu:l40s:2") == 4 and gres_gpus("(null)") == 0
    assert [slurm_minutes(t) for t in ("30", "30:30", "2:00:00", "1-00:00:00", "2-12", "infinite")] == [
        30,
        30.5,
        120,
        1440,
        3600,
        None,
    ]
    part = PartitionInfo(
        "a100",
        "2-00:00:00",
        [
            NodeResources("g1", 64, 512000, "gpu:a100:8(S:0-1)", "idle"),
            NodeResources("g2", 32, 256000, "gpu:a100:4", "idle"),
        ],
    )
    check_request(part, nodes=2, gpus_per_node=4, gpu_type="a100", cpus_per_task=32, time="1-00:00:00", mem="200G")
    for kwargs, words in (
        ({"cpus_per_task": 128}, "--cpus-per-task=128 but its largest node has 64 CPUs"),
        ({"gpus_per_node": 8, "nodes": 2}, "only 1 of its 2 nodes fit"),
        ({"gpu_type": "h100"}, "h100 GPUs per node but its nodes have at most 0"),
        ({"time": "3-00:00:00"}, "exceeds its time limit 2-00:00:00"),
        ({"mem": "1T"}, "--mem=1T but its largest node has 512000 MB"),
    ):
        request = {"nodes": 1, "gpus_per_node": 4, "gpu_type": "a100", "cpus_per_task": 8, "time": "1:00:00", **kwargs}
        with pytest.raises(RuntimeError, match=re.escape(words)):
            check_request(part, **request)


# ---------------------------------------------------------------------------------------------- before submitting


@pytest.mark.slow
@real_slurm
def test_submit_refuses_requests_no_node_can_hold(job_env):
    """Slurm accepts a job larger than every node and leaves it PENDING forever; `submit` says so first."""
    # The premise, on the real scheduler: 64 CPUs on 2-CPU nodes is accepted and never starts.
    held = sbatch(job_env, "--gres=none", "--cpus-per-task=64", "--wrap=true")
    try:
        info = wait_for(
            "a pending reason",
            lambda: (lambda i: i if i.get("Reason", "None") != "None" else None)(job_info(job_env, held)),
            60,
            job_env,
            held,
        )
        assert info["JobState"] == "PENDING" and info["Reason"] == "PartitionConfig", info
    finally:
        _run(job_env, "scancel", held)
    queued = _run(job_env, "squeue", "--noheader", "--format=%i").stdout.split()

    cases = [
        (["launch.cpus_per_gpu=64"], ["--cpus-per-task=64", "largest node has 2 CPUs"]),
        (["launch.mem_per_gpu=64G"], ["--mem=64G but its largest node has", "MB"]),  # nodes offer <= 8000 MB
        (["launch.gpus_per_node=4"], ["4 GPUs per node", "at most 0", "launch.gpus_per_node=0"]),
        (["launch.partition=two", "launch.time=03:00:00"], ["--time=03:00:00", "time limit 2:00:00"]),
        (["launch.partition=gpu"], ["no partition 'gpu'"]),
    ]
    for extra, words in cases:
        proc = _run(
            job_env,
            sys.executable,
            "-m",
            "timealign.cluster",
            "submit",
            "task=dpo",
            "recipe=tiny",
            *extra,
            check=False,
        )
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        for word in words:
            assert word in proc.stderr, (extra, word, proc.stderr)
    assert _run(job_env, "squeue", "--noheader", "--format=%i").stdout.split() == queued  # nothing was submitted


@pytest.mark.slow
@real_slurm
def test_gpu_recipe_on_a_job_without_gpus_fails_with_the_fix(job_env, tmp_path):
    """A job with no GPUs (`--gres=none`, as any job without a GPU request) for a GPU recipe: the launcher refuses
    (never 8 processes by default) and says what to pass."""
    job = sbatch(job_env, "--gres=none", "slurm/dpo.sbatch", "recipe=llama8b", f"output_dir={tmp_path / 'out'}")
    info = wait_done(job_env, job, 300)
    log = job_log(job_env, job)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "2:0", _describe(job_env, job)
    assert "Slurm gave this job no GPUs" in log and "--gres=gpu:4" in log and "launch.gpus_per_node=0" in log, log
    assert "accelerate launch --config_file" not in log  # the launcher never started a process
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- preemption


@pytest.mark.slow
@real_slurm
def test_usr1_preemption_requeues_once_and_resumes_bit_identical(job_env, tmp_path):
    plain, preempted = tmp_path / "plain", tmp_path / "preempted"
    # As a user types it on a CPU partition: the documented flags, the script as shipped.
    uninterrupted = sbatch(
        job_env, "--gres=none", "--cpus-per-task=1", "slurm/dpo.sbatch", *TRAIN, f"output_dir={plain}"
    )
    # From the recipe (tiny: launch.gpus_per_node 0 -> --gres=none --cpus-per-task=1), checked against sinfo.
    job = submit(job_env, "task=dpo", *TRAIN, f"output_dir={preempted}")

    wait_for("the first checkpoint", lambda: _complete_checkpoint(preempted, 2), 600, job_env, job)
    _run(job_env, "scancel", "--signal=USR1", "--batch", job)  # what --signal=B:USR1@120 sends near the limit

    info = wait_done(job_env, job)
    log = job_log(job_env, job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", _describe(job_env, job)
    assert info["Restarts"] == "1", _describe(job_env, job)
    assert re.search(r"USR1 to the batch shell \(the time limit is \d+ s away\)", log), log  # submit's --time
    assert f"requeueing job {job}" in log, log
    # the job's lead as Slurm has it: submit's --signal (its TIMEALIGN_SUBMIT_SIGNAL), the recipe's 120 s
    assert "--signal=B:USR1@120 from `python -m timealign.cluster submit`" in log, log
    assert log.count("restart 0") == 1 and log.count("restart 1") == 1, log  # one log, appended by the requeue
    resumed = re.findall(r"resuming from (\S*checkpoint-(\d+))", log)
    assert len(resumed) == 1 and int(resumed[0][1]) >= 2, log
    run_info = json.loads((preempted / "run_info.json").read_text())
    assert run_info["resumed_from"] == resumed[0][0] and run_info["global_step"] == 12, run_info
    assert run_info["slurm"]["job_id"] == job

    base = wait_done(job_env, uninterrupted)
    assert base["JobState"] == "COMPLETED" and base["Restarts"] == "0", _describe(job_env, uninterrupted)
    assert "resuming from" not in job_log(job_env, uninterrupted)
    expected, got = _tensors(plain), _tensors(preempted)
    assert sorted(expected) == sorted(got) and expected
    import torch

    differ = [name for name in expected if not torch.equal(expected[name], got[name])]
    assert not differ, f"weights differ from the uninterrupted run: {differ}"


@pytest.mark.slow
@real_slurm
def test_plain_scancel_and_usr1_to_the_steps_only_do_not_requeue(job_env, tmp_path):
    """A plain `scancel` (SIGTERM) and `scancel --signal=USR1 JOB` (the job steps only, not the batch shell, which
    alone requeues): both checkpoint, neither is requeued, and each trainer says so. Two jobs at once, one wait.
    The submitted one also has a known lead shorter than its saves (launch.signal_seconds=1, 2 s saves): it warns."""
    out, steps_out = tmp_path / "cancelled", tmp_path / "steps"
    slow = {**job_env, "TIMEALIGN_TEST_SLOW_SAVE": "2"}  # with the stop's own save, well within KillWait (10 s)
    job = submit(slow, "task=dpo", *TRAIN, "training.max_steps=400", "launch.signal_seconds=1", f"output_dir={out}")
    steps = sbatch(
        job_env,
        "--gres=none",
        "--cpus-per-task=1",
        "slurm/dpo.sbatch",
        *TRAIN,
        "training.max_steps=400",
        f"output_dir={steps_out}",
    )
    wait_for("a checkpoint", lambda: _complete_checkpoint(out, 2), 600, job_env, job)
    _run(job_env, "scancel", job)  # SIGTERM to every process of the job: a user's cancel, not a warning
    wait_for("a checkpoint", lambda: _complete_checkpoint(steps_out, 2), 600, job_env, steps)
    _run(job_env, "scancel", "--signal=USR1", steps)  # no --batch/--full: the job steps only
    info = wait_done(job_env, job, 120)
    assert info["JobState"] == "CANCELLED", _describe(job_env, job)
    info = wait_done(job_env, steps, 300)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "75:0", _describe(job_env, steps)
    time.sleep(slurm_cluster.CRED_EXPIRE + 5)  # longer than a requeued job waits in BeginTime
    for each, state in ((job, "CANCELLED"), (steps, "FAILED")):
        info = job_info(job_env, each)
        assert info["JobState"] == state and info["Restarts"] == "0", _describe(job_env, each)
        log = job_log(job_env, each)
        assert "requeueing" not in log and "resuming from" not in log, log
        assert "so the job is requeued" not in log and "requeues job" not in log, log
    log = job_log(job_env, job)
    assert f"job {job} was cancelled (scancel): it is not requeued" in log, log  # what Slurm says, not a guess
    # submit's --signal, known to the trainer without accounting (TIMEALIGN_SUBMIT_SIGNAL): a 2 s save outgrows 1 s
    assert "more than the warning's lead of 1 s (--signal=B:USR1@1 from `python -m timealign.cluster submit`" in log
    log = job_log(job_env, steps)
    assert re.search(r"preempted \(SIGUSR1\) at step \d+; checkpoint \S*checkpoint-\d+", log), log
    assert f"job {steps} is not requeued: signal the batch shell (--batch or --full)" in log, log
    assert "] USR1 to the batch shell (" not in log, log  # it got nothing, and made no stop file
    assert "stopped on a signal this batch shell did not get" in log, log


# ---------------------------------------------------------------------------------------------- two nodes


@pytest.mark.slow
@real_slurm
def test_two_node_job_reaches_world_size_two_with_data_prepared_once(cluster, job_env, tmp_path):
    """2 nodes x 1 CPU process (n1, n2: two slurmd on this host). The rendezvous address comes from Slurm's
    NodeAddr on the first node, not the name n1 (which need not resolve); data is prepared by one rank only."""
    try:
        socket.getaddrinfo("n1", None)
        n1_resolves = True
    except OSError:
        n1_resolves = False
    out = tmp_path / "two"
    job = sbatch(
        job_env,
        "--partition=two",
        "--nodes=2",
        "--gres=none",
        "--cpus-per-task=1",
        "slurm/dpo.sbatch",
        "recipe=tiny",
        "data.synthetic_trajectories=8",
        "training.per_device_train_batch_size=1",
        "training.max_steps=4",
        "training.logging_steps=1",
        f"output_dir={out}",
    )
    info = wait_done(job_env, job)
    log = job_log(job_env, job)
    assert info["JobState"] == "COMPLETED", _describe(job_env, job)
    assert info["NodeList"] == "n[1-2]", info
    assert "main process address: 127.0.0.1" in log, log  # n1's NodeAddr, resolved on n1 through srun
    for rank in (0, 1):
        assert re.search(rf"node {rank}/2 \(CPU only, 1 process\(es\), main 127\.0\.0\.1:\d+\)", log), log
    run_info = json.loads((out / "run_info.json").read_text())
    assert run_info["world_size"] == 2 and run_info["global_step"] == 4, run_info
    # Data prep once per job: one rank prepares, the other waits and loads (timealign.data.prepared).
    assert len(re.findall(r"wrote \d+ pairs", log)) == 1, log
    assert len(re.findall(r"preparing .* into", log)) == 1, log
    print(f"\nn1 resolves on this host: {n1_resolves} (the job does not rely on it)")


# ---------------------------------------------------------------------------------------------- SFT and eval


@pytest.mark.slow
@real_slurm
def test_sft_and_eval_jobs_complete(job_env, tmp_path):
    sft_out, eval_out = tmp_path / "sft", tmp_path / "eval"
    sft = submit(job_env, "task=sft", "recipe=tiny-timer", "training.max_steps=3", f"output_dir={sft_out}")
    # A CPU-only eval job evaluates with the recipe's backend (tiny: hf), not vLLM.
    ev = submit(
        job_env,
        "task=eval",
        "recipe=tiny",
        "checkpoint=tiny",
        "data.synthetic_trajectories=8",
        f"output_dir={tmp_path / 'eval-data'}",
        f"out={eval_out}",
    )
    for job in (sft, ev):
        info = wait_done(job_env, job)
        assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", _describe(job_env, job)
    assert (sft_out / "model.safetensors").is_file()
    assert json.loads((sft_out / "run_info.json").read_text())["global_step"] == 3
    report = json.loads((eval_out / "tictoc.json").read_text())
    assert "evaluating with the recipe's eval.backend on CPU" in job_log(job_env, ev)
    assert report["backend"]["name"] == "hf" and report["checkpoint"] == "tiny", report["backend"]
    assert report["overall"]["n"] == 24, report["overall"]  # every test pair of the 8 synthetic trajectories


# ---------------------------------------------------------------------------------------------- every signal form

SLOW_SAVE = 6  # seconds every checkpoint save sleeps (TIMEALIGN_TEST_SLOW_SAVE, test-only): several times the tiny
# model's real save, under the test cluster's KillWait (10 s)


def _preempted_and_resumed(log: str) -> tuple[int, int]:
    """(the step the preemption checkpoint was saved at, the step the requeued job resumed from)."""
    stopped = re.findall(r"preempted \((.*?)\) at step (\d+); checkpoint \S*checkpoint-(\d+)", log)
    resumed = re.findall(r"resuming from \S*checkpoint-(\d+)", log)
    assert len(stopped) == 1 and len(resumed) == 1, log
    return int(stopped[0][2]), int(resumed[0])


# form: (command + job id, what the trainer's last line says, seconds each save sleeps). After SIGTERM everything
# must fit Slurm's KillWait (10 s here): the save under way when it lands plus the stop's own save, so 2 x 3 s.
SIGNAL_FORMS = {
    "--batch": (["scancel", "--signal=USR1", "--batch"], "the batch script requeues job {job}", SLOW_SAVE),
    "--full": (["scancel", "--signal=USR1", "--full"], "the batch script requeues job {job}", SLOW_SAVE),
    "preempt-requeue": (["scontrol", "requeue"], "Slurm requeues job {job}", 3),  # SIGTERM, as PreemptMode=REQUEUE
}
# The same jobs check the save budget against the job's own lead, never one the trainer cannot see (this cluster has
# no accounting: a --signal on sbatch's command line shows nowhere): form -> (extra sbatch options, extra recipe args,
# extra environment, what the log must say, what it must not).
LEAD_CHECKS = {
    # the documented 8B form typed on the command line: the job's 600 s is invisible, the script's #SBATCH 120 s only
    # a default it overrides: the lead is unknown, said with the measured save, and no warning about 120 s
    "--batch": (
        ["--signal=B:USR1@600"],
        ["launch.signal_seconds=600"],
        {},
        "warning lead is unknown (its batch script's #SBATCH --signal=B:USR1@120",
        ("120 s before its time limit", "more than the warning's lead"),
    ),
    # the recipe says 120 s, the job 5 s (SBATCH_SIGNAL, as sbatch reads it): the 6 s saves do not fit, said with 5 s
    "--full": (
        [],
        [],
        {"SBATCH_SIGNAL": "B:USR1@5"},
        "more than the warning's lead of 5 s (SBATCH_SIGNAL=B:USR1@5 where it was submitted",
        ("more than the warning's lead of 120 s", "warning lead is unknown"),
    ),
}


@pytest.mark.slow
@real_slurm
@pytest.mark.parametrize("form", list(SIGNAL_FORMS))
def test_signal_forms_with_a_slow_save_requeue_once_and_resume_from_that_save(job_env, tmp_path, form):
    """`scancel --signal=USR1 --batch` (what the time limit's `--signal=B:USR1@N` sends), `--full` (USR1 to every
    process: the launcher agent of 2 processes, torchrun's, used to die on it) and `scontrol requeue` (SIGTERM to
    every process, then a requeue by Slurm, as preemption with PreemptMode=REQUEUE), with every save slowed to 6 s
    (3 s under SIGTERM: KillWait): one clean checkpoint, the line saying who requeues, one requeue, the resumed job
    starts from that very checkpoint and finishes."""
    command, says, slow = SIGNAL_FORMS[form]
    lead_options, lead_args, lead_env, lead_says, lead_never = LEAD_CHECKS.get(form, ([], [], {}, "", ()))
    out = tmp_path / "out"
    env = {**job_env, "TIMEALIGN_TEST_SLOW_SAVE": str(slow), **lead_env}
    job = sbatch(
        env,
        "--gres=none",
        "--cpus-per-task=2",
        *lead_options,
        "slurm/dpo.sbatch",
        *TRAIN,
        "processes_per_node=2",
        "training.per_device_train_batch_size=1",
        *lead_args,
        f"output_dir={out}",
    )
    wait_for("the first checkpoint", lambda: _complete_checkpoint(out, 2), 600, env, job)
    _run(env, *command, job)
    info = wait_done(env, job, 900)
    log = job_log(env, job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0" and info["Restarts"] == "1", _describe(
        env, job
    )
    saved, resumed = _preempted_and_resumed(log)
    assert saved == resumed >= 2, log  # the slow save finished and is what the requeued job resumed from
    assert says.format(job=job) in log, log
    assert (f"requeueing job {job}" in log) == (form != "preempt-requeue"), log  # Slurm's requeue, not ours
    assert float(re.search(rf"checkpoint-{saved} saved in (\d+\.\d) s", log).group(1)) >= slow, log  # measured
    assert "killed by SIGUSR1" not in log and "SignalException" not in log, log
    assert lead_says.format(job=job) in log and not [never for never in lead_never if never in log], log
    if form == "--batch":
        unknown = (
            rf"job {job}'s warning lead is unknown \(its batch script's #SBATCH --signal=B:USR1@120, but a --signal"
        )
        assert len(re.findall(unknown + r".*: checkpoint saves are timed, not checked", log)) == 2, log  # each run
        assert re.search(r"one step \+ a checkpoint took \d+\.\d s; " + unknown, log), log  # the measured save
        assert "SBATCH_SIGNAL=B:USR1@600 sbatch" in log, log  # how to make it known, with the recipe's lead
        warned = [
            line for line in log.splitlines() if "WARNING timealign.train.preemption:" in line and "lead" in line
        ]
        assert not warned, warned  # nothing asserted about a lead the trainer cannot see
    if form != "preempt-requeue":
        assert "USR1 to the batch shell (no time limit: sent by hand)" in log, log
    run_info = json.loads((out / "run_info.json").read_text())
    assert run_info["global_step"] == 12 and run_info["world_size"] == 2, run_info


@pytest.mark.slow
@real_slurm
def test_two_jobs_on_one_node_never_share_a_port(job_env, tmp_path):
    """Job J holds the rendezvous port the next job id prefers (20000 + (J + 1) % 12000), as a training or
    `vllm serve` of another job would: the next training job on the same node takes a free one and finishes."""
    held = tmp_path / "held"
    holder_code = (
        "import os, socket, time; s = socket.socket(); "
        "p = 20000 + (int(os.environ['SLURM_JOB_ID']) + 1) % 12000; s.bind(('', p)); s.listen(); "
        f"open({str(held)!r}, 'w').write(str(p)); time.sleep(900)"
    )
    holder = sbatch(
        job_env, "--gres=none", "--cpus-per-task=1", "--mem=500M", f'--wrap={sys.executable} -c "{holder_code}"'
    )
    try:
        wait_for("the port to be held", held.is_file, 120, job_env, holder)
        port = int(held.read_text())
        out = tmp_path / "out"
        job = submit(job_env, "task=dpo", *TRAIN, "training.max_steps=2", f"output_dir={out}")
        info = wait_done(job_env, job, 600)
        log = job_log(job_env, job)
        assert info["JobState"] == "COMPLETED", _describe(job_env, job)
        assert job_info(job_env, holder)["JobState"] == "RUNNING"  # both on the one node at once
        used = int(re.search(r"main 127\.0\.0\.1:(\d+)\)", log).group(1))
        if int(job) == int(holder) + 1:  # the usual: ids are consecutive
            assert used == port + 1, (used, port, log)
        assert used != port, log
    finally:
        _run(job_env, "scancel", holder, check=False)


@pytest.mark.slow
@real_slurm
def test_the_time_limit_signal_with_a_slow_save_requeues_then_stops_at_the_cap(job_env, tmp_path):
    """The real time limit: `--time=2 --signal=B:USR1@100`, every save slowed to 6 s. The first run checkpoints on the
    warning and is requeued; the requeued one resumes from that checkpoint, gets the warning again, checkpoints and,
    at TIMEALIGN_MAX_REQUEUES=1, says it is not requeued again and stops (exit 75) before the limit."""
    out = tmp_path / "out"
    env = {**job_env, "TIMEALIGN_TEST_SLOW_SAVE": str(SLOW_SAVE), "TIMEALIGN_MAX_REQUEUES": "1"}
    job = sbatch(
        env,
        "--gres=none",
        "--cpus-per-task=1",
        "--time=2",
        "--signal=B:USR1@100",
        "slurm/dpo.sbatch",
        *TRAIN,
        "training.max_steps=400",
        f"output_dir={out}",
    )
    info = wait_done(env, job, 600)
    log = job_log(env, job)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "75:0" and info["Restarts"] == "1", _describe(env, job)
    stopped = re.findall(r"preempted \(stop file \S+\) at step (\d+); checkpoint \S*checkpoint-(\d+)", log)
    resumed = re.findall(r"resuming from \S*checkpoint-(\d+)", log)
    assert len(stopped) == 2 and resumed == [stopped[0][1]], log  # resumed from the warning's checkpoint
    assert log.count(f"the batch script requeues job {job}") == 1 and log.count(f"requeueing job {job}") == 1, log
    assert f"job {job} was requeued 1 times already (TIMEALIGN_MAX_REQUEUES=1)" in log, log
    assert "reached its time limit" not in log and "SIGTERM" not in log, log  # all done before the limit
    # when the warning came, as the batch shell measured it (the --signal on sbatch's command line is visible to the
    # trainer only through sacct, which this cluster has not): within the 2 min limit, before it
    left = [int(s) for s in re.findall(r"USR1 to the batch shell \(the time limit is (-?\d+) s away\)", log)]
    assert len(left) == 2 and all(0 < s <= 120 for s in left), log
    # so the trainer never took the script's #SBATCH 120 s for the job's lead: unknown, in each run
    assert log.count(f"job {job}'s warning lead is unknown (its batch script's #SBATCH --signal=B:USR1@120") >= 2, log
    assert "120 s before its time limit" not in log and "more than the warning's lead" not in log, log
