"""The launch check: a training run stops before data prep and the model when it does not run as the recipe asks.

Each silent launch path of ../shared/NOTES.md is started with the real launcher (accelerate launch, torchrun) and 2
CPU processes: the run must exit with the recipe error code (2) and a message naming what differs and the right
command, before it prepares data. The cluster launcher's own command must pass and train as one DDP group.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from timealign.config import RecipeError, load_recipe
from timealign.train import launch_check
from timealign.train.launch_check import (
    Asked,
    Running,
    asked_launch,
    asked_precision,
    launcher_request,
    mismatches,
)

BIN = Path(sys.executable).parent
ACCELERATE, TORCHRUN = str(BIN / "accelerate"), str(BIN / "torchrun")
DPO = str(REPO_ROOT / "train/dpo.py")
# Small enough that a run the check fails to stop ends in seconds (as it would on a main without the check).
QUICK = [
    "training.max_steps=1",
    "data.synthetic_trajectories=8",
    "training.per_device_train_batch_size=1",
    "training.save_strategy=no",
    "training.report_to=[none]",
]
DDP_DEFAULT_CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
mixed_precision: 'no'
num_machines: 1
num_processes: 2
machine_rank: 0
use_cpu: true
rdzv_backend: static
same_network: true
"""


# ---------------------------------------------------------------------------------------------- the comparison


def test_shipped_configs_read_as_accelerate_defines_them():
    expected = {
        "ddp": ("ddp", {}),
        "fsdp": ("fsdp", {"fsdp_version": "2", "offload_params": "false", "reshard_after_forward": "true"}),
        "fsdp_offload": ("fsdp", {"fsdp_version": "2", "offload_params": "true", "reshard_after_forward": "true"}),
        "zero2": (
            "deepspeed",
            {"zero_stage": "2", "offload_optimizer_device": "none", "offload_param_device": "none"},
        ),
        "zero3": (
            "deepspeed",
            {"zero_stage": "3", "offload_optimizer_device": "none", "offload_param_device": "none"},
        ),
        "zero3_offload": (
            "deepspeed",
            {"zero_stage": "3", "offload_optimizer_device": "cpu", "offload_param_device": "cpu"},
        ),
    }
    for name, (family, settings) in expected.items():
        asked = asked_launch(load_recipe("tiny", {"launch.accelerate_config": name}), ("no", "training.bf16=false"))
        assert (asked.family, asked.settings) == (family, settings), name
        assert asked.path == REPO_ROOT / "recipes" / "accelerate" / f"{name}.yaml"


def test_precision_asked_follows_trl_defaults():
    from trl import DPOConfig

    assert asked_precision({}, DPOConfig) == ("bf16", "TRL's default")  # TRL: bf16 unless fp16
    assert asked_precision({"bf16": False}, DPOConfig) == ("no", "training.bf16=false")
    assert asked_precision({"fp16": True}, DPOConfig)[0] == "fp16"
    assert asked_precision(load_recipe("tiny").training, DPOConfig)[0] == "no"


def test_launcher_request_read_from_the_environment():
    torchrun = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "x"}
    assert launcher_request(torchrun) == ("torchrun (WORLD_SIZE=2)", 2, True, False)
    accelerate_multi = {"WORLD_SIZE": "4", "ACCELERATE_DYNAMO_BACKEND": "NO"}
    assert launcher_request(accelerate_multi)[1:3] == (4, True)
    one_process = {"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_USE_CPU": "True", "MASTER_PORT": "29500"}
    assert launcher_request(one_process) == ("accelerate launch (MASTER_ADDR/PORT set)", None, False, True)
    assert launcher_request({}) == ("no launcher", None, False, False)


def _asked(family: str, settings: dict | None = None, precision: str = "no", dtype: str = "float32") -> Asked:
    name = {"ddp": "ddp", "single": "ddp", "fsdp": "fsdp", "deepspeed": "zero2"}[family]
    return Asked(
        name,
        REPO_ROOT / "recipes" / "accelerate" / f"{name}.yaml",
        family,
        settings or {},
        precision,
        "training.bf16=false",
        dtype,
    )


def test_mismatches_name_asked_and_running():
    one = Running("single", "DistributedType.NO", 1, "no launcher")
    assert mismatches(_asked("ddp"), one) == []  # DDP over one process is a plain run
    ddp = Running("ddp", "DistributedType.MULTI_CPU", 2, "accelerate launch (WORLD_SIZE=2)", 2, True)
    assert mismatches(_asked("ddp"), ddp) == []
    found = mismatches(_asked("fsdp", {"offload_params": "true"}), ddp)
    assert found == [
        (
            "distributed: asked FSDP (recipes/accelerate/fsdp.yaml: offload_params true), running DDP over "
            "2 processes (DistributedType.MULTI_CPU)"
        )
    ]
    alone = Running("single", "DistributedType.NO", 1, "torchrun (WORLD_SIZE=2)", 2, True)
    assert mismatches(_asked("ddp"), alone) == [
        (
            "processes: asked 2 by torchrun (WORLD_SIZE=2), running 2 separate trainings of 1 process "
            "(DistributedType.NO on every rank: no shared process group)"
        )
    ]
    fsdp = Running("fsdp", "DistributedType.FSDP", 4, "x", 4, True, settings={"offload_params": "false"})
    assert mismatches(_asked("fsdp", {"offload_params": "true"}), fsdp) == [
        "FSDP offload_params: asked true (recipes/accelerate/fsdp.yaml), running false"
    ]
    autocast = Running("single", "DistributedType.NO", 1, "x", mixed_precision="bf16", precision_source="launcher")
    assert mismatches(_asked("ddp"), autocast) == [
        "mixed precision: asked no (training.bf16=false), running bf16 (launcher)"
    ]
    half = Running("single", "DistributedType.NO", 1, "x", mixed_precision="fp16", precision_source="recipe")
    assert any(
        "model.dtype=bfloat16 weights under fp16 autocast" in m
        for m in mismatches(_asked("ddp", precision="fp16", dtype="bfloat16"), half)
    )


def test_check_modes(caplog):
    from trl import DPOConfig

    with pytest.raises(RecipeError, match="launch.check='maybe' is not one of: error, warn, off"):
        launch_check.check_launch(load_recipe("tiny", {"launch.check": "maybe"}), DPOConfig, env={})
    assert (
        launch_check.check_launch(
            load_recipe("tiny", {"launch.accelerate_config": "fsdp", "launch.check": "off"}), DPOConfig, env={}
        )
        is None
    )
    recipe = load_recipe("tiny", {"launch.accelerate_config": "fsdp", "launch.check": "warn"})
    with caplog.at_level(logging.WARNING, logger="timealign.train.launch_check"):
        running = launch_check.check_launch(recipe, DPOConfig, env={})
    assert running is not None and running.family == "single"
    assert "distributed: asked FSDP" in caplog.text and "launch.check=warn: going on" in caplog.text
    with pytest.raises(RecipeError, match="distributed: asked FSDP"):
        launch_check.check_launch(load_recipe("tiny", {"launch.accelerate_config": "fsdp"}), DPOConfig, env={})


def test_cluster_launcher_tells_the_script_which_config_it_launches():
    """`accelerate_config=` of the cluster launcher overrides the recipe's: the script is told, so its check compares
    against the config it really runs with."""
    from timealign.cluster import training_commands

    env = {
        "SLURM_JOB_ID": "9",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_GPUS_ON_NODE": "2",
    }
    cmd = training_commands(
        "dpo", ["recipe=tiny", "launch.accelerate_config=fsdp", "training.beta=0.2"], env, config="zero2"
    )[0][1]
    assert cmd[cmd.index("--config_file") + 1] == str(REPO_ROOT / "recipes/accelerate/zero2.yaml")
    assert cmd[cmd.index(DPO) + 1 :] == [
        "recipe=tiny",
        "launch.accelerate_config=zero2",
        "training.beta=0.2",
        "training.resume_from_checkpoint=auto",
    ]
    plain = training_commands("dpo", ["recipe=tiny"], env)[0][1]
    assert plain[plain.index(DPO) + 1 :] == ["recipe=tiny", "training.resume_from_checkpoint=auto"]


# ---------------------------------------------------------------------------------------------- real launchers


@pytest.fixture
def launch_env(tmp_path):
    """The environment of a user's shell: no accelerate default config, offline, nothing of an outer launcher."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "ACCELERATE_",
                "SLURM_",
                "WORLD_SIZE",
                "RANK",
                "LOCAL_RANK",
                "MASTER_",
                "FSDP_",
                "TORCHELASTIC_",
                "WANDB_RUN_ID",
                "TIMEALIGN_STOP",
            )
        )
    }
    env.update(
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        WANDB_MODE="offline",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        TIMEALIGN_CACHE=str(tmp_path / "cache"),
    )
    return env


def _launch(cmd: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _refused(proc: subprocess.CompletedProcess, out: Path, *expected: str) -> str:
    """The run stopped with the recipe error (exit 2 in each rank), before data prep, saying `expected` once (rank 0
    says it; the other ranks find the same and exit quietly)."""
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"the run was not stopped:\n{text[-4000:]}"
    said = "error: launch check (before loading the model)"
    # accelerate >= 1.16's one-process launcher repeats the child's stderr tail in its own traceback ("RuntimeError:
    # <tail>", the cause of its CalledProcessError): a copy of what rank 0 said, not a second refusal
    assert text.count(said) - text.count(f"RuntimeError: {said}") == 1, text[-4000:]
    for line in expected:
        assert line in text, f"{line!r} not in:\n{text[-4000:]}"
    assert "To go on anyway: launch.check=warn (log this and train) or launch.check=off." in text
    assert not (out / "data").exists() and not (out / "run_info.json").exists()  # stopped before data prep
    return text


def test_default_accelerate_config_is_ddp_while_the_recipe_asks_fsdp(launch_env, tmp_path):
    """`accelerate launch train/dpo.py ...` (the README's command) with the user's default config: DDP, 2 processes."""
    config = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(DDP_DEFAULT_CONFIG)
    out = tmp_path / "run"
    proc = _launch(
        [ACCELERATE, "launch", DPO, "recipe=tiny", "launch.accelerate_config=fsdp", f"output_dir={out}", *QUICK],
        launch_env,
    )
    _refused(
        proc,
        out,
        "(launch.accelerate_config=fsdp):",
        "distributed: asked FSDP (recipes/accelerate/fsdp.yaml: fsdp_version 2, offload_params false, "
        "reshard_after_forward true), running DDP over 2 processes (DistributedType.MULTI_CPU)",
        "accelerate launch --config_file recipes/accelerate/fsdp.yaml --num_processes 2 train/dpo.py "
        "recipe=tiny launch.accelerate_config=fsdp",
        "python -m timealign.cluster launch task=dpo recipe=tiny launch.accelerate_config=fsdp",
    )


def test_accelerate_cpu_launch_starts_one_process_when_two_were_asked(launch_env, tmp_path):
    out = tmp_path / "run"
    proc = _launch(
        [ACCELERATE, "launch", "--cpu", "--num_processes", "2", DPO, "recipe=tiny", f"output_dir={out}", *QUICK],
        launch_env,
    )
    _refused(
        proc,
        out,
        "processes: asked 2 by accelerate launch --num_processes 2, running 1",
        "ACCELERATE_USE_CPU=true accelerate launch --config_file recipes/accelerate/ddp.yaml --num_processes 2 "
        "train/dpo.py recipe=tiny",
    )


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate --multi_gpu"])
def test_every_rank_alone_without_a_cpu_process_group(launch_env, tmp_path, launcher):
    """No GPU and no use_cpu: accelerate says DistributedType.NO on every rank, two independent trainings."""
    out = tmp_path / "run"
    start = (
        [TORCHRUN, "--nproc_per_node", "2"]
        if launcher == "torchrun"
        else [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2"]
    )
    proc = _launch([*start, DPO, "recipe=tiny", "training.use_cpu=false", f"output_dir={out}", *QUICK], launch_env)
    name = "torchrun" if launcher == "torchrun" else "accelerate launch"
    _refused(
        proc,
        out,
        f"processes: asked 2 by {name} (WORLD_SIZE=2), running 2 separate trainings of 1 process "
        "(DistributedType.NO on every rank: no shared process group) (no GPU in use and no use_cpu: "
        "accelerate forms no process group on CPU)",
    )


def test_fsdp_config_ignored_on_cpu(launch_env, tmp_path):
    """fsdp.yaml with use_cpu: accelerate builds a MULTI_CPU state and silently trains DDP."""
    out = tmp_path / "run"
    proc = _launch(
        [
            ACCELERATE,
            "launch",
            "--config_file",
            "recipes/accelerate/fsdp.yaml",
            "--num_processes",
            "2",
            DPO,
            "recipe=tiny",
            "launch.accelerate_config=fsdp",
            f"output_dir={out}",
            *QUICK,
        ],
        {**launch_env, "ACCELERATE_USE_CPU": "true"},
    )
    _refused(
        proc,
        out,
        "running DDP over 2 processes (DistributedType.MULTI_CPU) (accelerate ignores FSDP under "
        "DistributedType.MULTI_CPU (FSDP runs on GPUs only))",
        "(no GPU here: accelerate runs FSDP on GPUs only; on CPU use launch.accelerate_config=ddp)",
    )


def test_deepspeed_dropped_by_use_cpu(launch_env, tmp_path):
    pytest.importorskip("deepspeed", reason="DeepSpeed not installed")
    out = tmp_path / "run"
    proc = _launch(
        [
            ACCELERATE,
            "launch",
            "--config_file",
            "recipes/accelerate/zero2.yaml",
            "--num_processes",
            "2",
            DPO,
            "recipe=tiny",
            "launch.accelerate_config=zero2",
            f"output_dir={out}",
            *QUICK,
        ],
        {**launch_env, "ACCELERATE_USE_CPU": "true"},
    )
    _refused(
        proc,
        out,
        "distributed: asked DeepSpeed (recipes/accelerate/zero2.yaml: zero_stage 2",
        "running DDP over 2 processes (DistributedType.MULTI_CPU) (ACCELERATE_USE_CPU=true makes accelerate "
        "drop DeepSpeed)",
    )


def test_fsdp_launcher_config_on_cpu_is_said_for_a_ddp_recipe(launch_env, tmp_path):
    """Issue 22: `accelerate launch --config_file fsdp.yaml` on CPU for tiny (which asks DDP): accelerate silently runs
    DDP. What runs is what the recipe asks, but the launcher's config was dropped: say so, once."""
    out = tmp_path / "run"
    proc = _launch(
        [
            ACCELERATE,
            "launch",
            "--config_file",
            "recipes/accelerate/fsdp.yaml",
            "--num_processes",
            "2",
            DPO,
            "recipe=tiny",
            f"output_dir={out}",
            *QUICK,
        ],
        {**launch_env, "ACCELERATE_USE_CPU": "true"},
    )
    text = _refused(
        proc,
        out,
        "  launcher: FSDP (ACCELERATE_USE_FSDP=true from the launcher's accelerate config) "
        "is ignored by accelerate under DistributedType.MULTI_CPU: FSDP runs on GPUs only; "
        "running DDP over 2 processes (DistributedType.MULTI_CPU) (launch with the recipe's "
        "recipes/accelerate/ddp.yaml, or on CPU without that config)",
    )
    assert "Traceback" not in text.split("error: launch check", 1)[0]


def test_ignored_launcher_config_warns_once_in_warn_mode(caplog, monkeypatch):
    """launch.check=warn: the same text as one warning, from rank 0 only."""
    ignored = "FSDP (ACCELERATE_USE_FSDP=true from the launcher's accelerate config) is ignored by accelerate"
    run = Running(
        "ddp", "DistributedType.MULTI_CPU", 2, "accelerate launch (WORLD_SIZE=2)", 2, True, ignored=[ignored]
    )
    assert mismatches(_asked("ddp"), run) == [
        f"launcher: {ignored}; running DDP over 2 processes (DistributedType.MULTI_CPU) (launch with the recipe's "
        "recipes/accelerate/ddp.yaml, or on CPU without that config)"
    ]
    recipe = load_recipe("tiny", {"launch.check": "warn"})
    asked = asked_launch(recipe, ("no", "training.bf16=false"))
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        with caplog.at_level(logging.WARNING, logger="timealign.train.launch_check"):
            launch_check._decide(recipe, asked, run)
    assert caplog.text.count("launcher: FSDP") == 1 and "launch.check=warn: going on" in caplog.text


def _one_core():
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def test_more_processes_than_cores_stop_once_before_the_process_group(launch_env, tmp_path):
    """Plain `accelerate launch --num_processes 2` on a machine (here: an affinity) of one core: rank 0 says it in one
    line, rank 1 exits quietly, nothing is prepared."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            ACCELERATE,
            "launch",
            "--config_file",
            "recipes/accelerate/ddp.yaml",
            "--num_processes",
            "2",
            DPO,
            "recipe=tiny",
            f"output_dir={out}",
            *QUICK,
        ],
        cwd=REPO_ROOT,
        env={**launch_env, "ACCELERATE_USE_CPU": "true"},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_one_core,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    line = (
        "error: launch check: 2 processes on this machine but it has 1 CPU cores: start at most 1 "
        "(--num_processes 1, or processes_per_node= with python -m timealign.cluster); batch.global_size keeps "
        "the global batch whatever the count\n"
    )
    assert text.count(line) == 1 and text.count("error:") == 1, text[-4000:]
    assert not (out / "data").exists()


@pytest.mark.parametrize("master", [True, False])
def test_distributed_environment_without_a_launcher_stops_in_seconds(launch_env, tmp_path, master):
    """Issue 22: WORLD_SIZE=2 (and MASTER_ADDR) left in the shell, one plain python process: it used to wait for the
    second rank forever (or end in accelerate's traceback without MASTER_ADDR). One line, exit 2, the command."""
    env = {**launch_env, "WORLD_SIZE": "2", **({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29591"} if master else {})}
    out = tmp_path / "run"
    proc = _launch([sys.executable, DPO, "recipe=tiny", f"output_dir={out}"], env, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    unset = "WORLD_SIZE, MASTER_ADDR, MASTER_PORT" if master else "WORLD_SIZE"
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: WORLD_SIZE=2 is set but no launcher started this process (RANK and LOCAL_RANK are unset): it would "
        f"wait for 1 more process(es) that nobody starts. Unset {unset} to train in one process, or start all 2: "
        f"ACCELERATE_USE_CPU=true accelerate launch --config_file recipes/accelerate/ddp.yaml --num_processes 2 "
        f"train/dpo.py recipe=tiny output_dir={out}"
    )
    assert "Traceback" not in proc.stderr and not (out / "data").exists()


def test_rank_without_master_addr_is_one_line():
    """WORLD_SIZE and RANK set by hand without MASTER_ADDR: accelerate's traceback before; now one RecipeError."""
    env = {"WORLD_SIZE": "2", "RANK": "1"}
    with pytest.raises(
        RecipeError,
        match=r"^WORLD_SIZE=2 and RANK=1 are set but MASTER_ADDR is not: torch cannot "
        r"find rank 0\. .*accelerate launch --config_file "
        r"recipes/accelerate/ddp.yaml --num_processes 2 train/dpo.py recipe=tiny$",
    ):
        launch_check.check_launcher_present(load_recipe("tiny"), env)
    # every rank started by hand, on purpose: launch.check=warn lets it wait for them
    launch_check.check_launcher_present(load_recipe("tiny", {"launch.check": "warn"}), {**env, "MASTER_ADDR": "x"})


HAND_SET = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"}


def test_ranks_set_by_hand_without_a_launcher_stop_in_seconds(launch_env, tmp_path):
    """Issue 35: the issue's environment (an salloc shell's leftovers, a copied job script), one plain python
    process: it waited in the rendezvous until the DDP timeout, printing nothing. Now one line, exit 2, in seconds,
    before data prep."""
    out = tmp_path / "run"
    started = time.monotonic()
    proc = _launch([sys.executable, DPO, "recipe=tiny", f"output_dir={out}"], {**launch_env, **HAND_SET}, timeout=120)
    assert time.monotonic() - started < 60
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: WORLD_SIZE=2 and RANK=0, LOCAL_RANK=0 are set but no launcher started this process (no torchrun, "
        "accelerate launch, deepspeed, mpirun or srun step): it would wait up to training.ddp_timeout for 1 other "
        "rank(s) that nobody may start. Unset WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT to train in "
        "one process, or start all 2: ACCELERATE_USE_CPU=true accelerate launch --config_file "
        f"recipes/accelerate/ddp.yaml --num_processes 2 train/dpo.py recipe=tiny output_dir={out} (starting every "
        "rank yourself: launch.check=warn)"
    ], proc.stderr[-3000:]
    assert not out.exists()


def test_a_rank_alone_without_a_launcher_is_one_line(launch_env, tmp_path):
    """Issue 42: LOCAL_RANK=0 left in the shell, no launcher, one plain python process: accelerate took it for a
    distributed launch and torch's rendezvous ended in a traceback (ValueError: MASTER_ADDR expected). Now one line,
    exit 2, before data prep; a launcher's rank, or a complete one-process group set by hand, still passes."""
    import torch

    out = tmp_path / "run"
    proc = _launch([sys.executable, DPO, "recipe=tiny", f"output_dir={out}"], {**launch_env, "LOCAL_RANK": "0"}, 120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    gpu = torch.cuda.is_available()  # env:// on a GPU reads MASTER_PORT, RANK and WORLD_SIZE too
    lacking = "MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE are" if gpu else "MASTER_ADDR is"
    assert lines == [
        f"error: LOCAL_RANK=0 is set but no launcher started this process and {lacking} not: accelerate would start "
        "a distributed run that torch cannot join. Unset LOCAL_RANK to train in one process, or let a launcher set "
        f"them all: {'' if gpu else 'ACCELERATE_USE_CPU=true '}accelerate launch --config_file "
        f"recipes/accelerate/ddp.yaml --num_processes 2 train/dpo.py recipe=tiny output_dir={out}"
    ], proc.stderr[-3000:]
    assert not out.exists()
    recipe = load_recipe("tiny", {"launch.check": "off"})  # refused whatever launch.check says: it would crash
    with pytest.raises(RecipeError, match=r"^RANK=0, LOCAL_RANK=0 are set but no launcher started this process"):
        launch_check.check_launcher_present(recipe, {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    launch_check.check_launcher_present(recipe, {"LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "x"})  # torchrun's
    launch_check.check_launcher_present(recipe, {"LOCAL_RANK": "0", "ACCELERATE_DYNAMO_BACKEND": "NO"})
    complete = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    launch_check.check_launcher_present(recipe, complete)
    launch_check.check_launcher_present(recipe, {"RANK": "0"})  # RANK alone: accelerate starts no process group


def test_world_size_set_by_hand_is_no_launcher(launch_env, tmp_path):
    """Issue 42: WORLD_SIZE=1 set by hand logged "by a launcher (WORLD_SIZE=1)" though none was used. The launch check
    now names the launcher only from the variables a launcher sets."""
    assert launcher_request({"WORLD_SIZE": "1"}) == ("no launcher (WORLD_SIZE=1 set by hand)", 1, True, False)
    assert launcher_request({"WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "x"})[0] == "torchrun (WORLD_SIZE=1)"
    assert launcher_request({"WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"})[0] == "mpirun (WORLD_SIZE=1)"
    out = tmp_path / "run"
    env = {**launch_env, "WORLD_SIZE": "1"}
    proc = _launch([sys.executable, DPO, "recipe=tiny", f"output_dir={out}", *QUICK], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    passed = (
        "launch check passed (before loading the model): one process (DistributedType.NO), mixed precision no, by "
        "no launcher (WORLD_SIZE=1 set by hand)"
    )
    assert passed in proc.stderr and "by a launcher" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize(
    "launcher, marks",
    [
        ("torchrun", {"TORCHELASTIC_RUN_ID": "none"}),  # torchrun's agent; accelerate's multi-process launchers too
        ("deepspeed", {"CROSS_RANK": "0"}),
        ("mpirun", {"OMPI_COMM_WORLD_RANK": "0"}),
        ("srun", {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}),
        (None, {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}),  # an salloc shell or batch script: no job step
        (None, {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1"}),  # a step's task 1 claiming rank 0: a copied RANK
        (None, {"ACCELERATE_USE_CPU": "true"}),  # set in shells by hand too: no launcher's mark
    ],
)
def test_which_launcher_set_the_ranks(launcher, marks):
    recipe = load_recipe("tiny")
    env = {**HAND_SET, **marks}
    assert launch_check.started_by(env) == launcher
    if launcher:
        launch_check.check_launcher_present(recipe, env)
    else:
        with pytest.raises(RecipeError, match=r"^WORLD_SIZE=2 and RANK=0, LOCAL_RANK=0 are set but no launcher"):
            launch_check.check_launcher_present(recipe, env)
        launch_check.check_launcher_present(load_recipe("tiny", {"launch.check": "off"}), env)


def test_launcher_mixed_precision_over_an_fp32_recipe(launch_env, tmp_path):
    """A launcher config with mixed_precision bf16 would turn autocast on for tiny (bf16: false)."""
    out = tmp_path / "run"
    proc = _launch(
        [ACCELERATE, "launch", "--cpu", "--mixed_precision", "bf16", DPO, "recipe=tiny", f"output_dir={out}", *QUICK],
        launch_env,
    )
    _refused(
        proc,
        out,
        "mixed precision: asked no (training.bf16=false), running bf16 (ACCELERATE_MIXED_PRECISION="
        "bf16, set by the launcher from its accelerate config's mixed_precision)",
    )


def test_sft_checks_too(launch_env, tmp_path):
    out = tmp_path / "run"
    proc = _launch(
        [
            sys.executable,
            str(REPO_ROOT / "train/sft.py"),
            "recipe=tiny-timer",
            "launch.accelerate_config=zero3",
            f"output_dir={out}",
            "training.max_steps=1",
        ],
        launch_env,
    )
    _refused(
        proc,
        out,
        "distributed: asked DeepSpeed (recipes/accelerate/zero3.yaml: zero_stage 3",
        "running one process (DistributedType.NO)",
        "train/sft.py recipe=tiny-timer launch.accelerate_config=zero3",
    )


@pytest.mark.slow
def test_cluster_launcher_command_passes_and_trains_one_ddp_group(launch_env, tmp_path):
    """`python -m timealign.cluster launch` (1 node x 2 processes): its printed command, run as printed, passes the
    check, trains one DDP group over gloo, and only rank 0 logs INFO."""
    from timealign.data.prepared import ensure_prepared

    out = tmp_path / "run"
    data = ["data.synthetic_trajectories=8", f"data.prepared_dir={tmp_path / 'prepared'}"]
    ensure_prepared(load_recipe("tiny", dict(a.split("=", 1) for a in data)))
    slurm = {
        "SLURM_JOB_ID": "4711",
        "SLURM_JOB_NODELIST": "127.0.0.1",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_GPUS_ON_NODE": "2",
    }
    args = [
        "recipe=tiny",
        f"output_dir={out}",
        *data,
        "training.max_steps=2",
        "training.logging_steps=1",
        "training.per_device_train_batch_size=1",
        "training.save_strategy=no",
    ]
    plan = _launch(
        [sys.executable, "-m", "timealign.cluster", "launch", "task=dpo", "dry_run=true", *args],
        {**launch_env, **slurm},
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    command = next(shlex.split(line) for line in plan.stdout.splitlines() if line.startswith(ACCELERATE + " "))
    assert command[command.index("--num_processes") + 1] == "2"
    proc = _launch(command, {**launch_env, **slurm})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    info = json.loads((out / "run_info.json").read_text())
    assert info["world_size"] == 2 and info["distributed_type"] == "DistributedType.MULTI_CPU"
    assert info["model_wrapper"] == "DistributedDataParallel"
    assert (
        text.count(
            "INFO timealign.train.launch_check: launch check passed (before loading the model): DDP over "
            "2 processes (DistributedType.MULTI_CPU)"
        )
        == 1
    )  # rank 0 only: rank 1 logs warnings only
    assert text.count("launch check passed (after building the trainer)") == 1
    assert text.count("INFO timealign.train.dpo: saved model to") == 1
