"""Cluster scale: accelerate configs, SLURM launch commands and scripts, preemption + resume, multi-process on CPU,
W&B.

Fast tests check the configs with accelerate's own loader and launcher, the per-node commands built from fake SLURM
env vars, and the sbatch plumbing (warning signal -> stop file -> requeue) with fake `srun`/`scontrol`. Slow tests
train the tiny model: an uninterrupted run (with W&B offline), a run stopped by SIGUSR1 and resumed (same losses),
and multi-process runs through `python -m timealign.cluster launch` on CPU (DDP 1 x 2, ZeRO-2 on 2 emulated nodes,
ZeRO-3 1 x 2; FSDP is skipped on CPU).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from helpers import REPO_ROOT, cluster_launch, launcher_env, run_checked

from timealign import cluster
from timealign.config import RecipeError, load_recipe
from timealign.render.checkpoint import CHECKPOINT_RECIPE
from timealign.train import preemption, resume

CONFIGS = ("ddp", "fsdp", "fsdp_offload", "zero2", "zero3", "zero3_offload")
SCRIPTS = ("slurm/dpo.sbatch", "slurm/sft.sbatch", "slurm/eval.sbatch", "slurm/launch.sh")
TWO_NODES = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "gpu-a100-[07-08]",
    "SLURM_NNODES": "2",
    "SLURM_GPUS_ON_NODE": "4",
}


# ---------------------------------------------------------------------------------------------- accelerate configs


def _launcher_env(path: Path, *extra: str):
    """What `accelerate launch --config_file PATH ...` would run with: (parsed args, config, worker env)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    argv = [
        "--config_file",
        str(path),
        "--num_processes",
        "8",
        "--num_machines",
        "2",
        "--machine_rank",
        "1",
        "--main_process_ip",
        "gpu-a100-07",
        "--main_process_port",
        "24242",
        *extra,
        "train/dpo.py",
        "recipe=x",
    ]
    args, defaults, mp_from_config = _validate_launch_command(launch_command_parser().parse_args(argv))
    if args.use_deepspeed:  # as accelerate's launch_command does before its DeepSpeed launcher
        args.deepspeed_fields_from_accelerate_config = ",".join(
            list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
        )
        _, env = prepare_deepspeed_cmd_env(args)
    else:
        env = prepare_multi_gpu_env(args)
    return args, defaults, env


@pytest.mark.parametrize("name", CONFIGS)
def test_accelerate_config_loads_and_launches(name):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    path = cluster.accelerate_config_path(name)
    assert path == REPO_ROOT / "recipes" / "accelerate" / f"{name}.yaml"
    config = load_config_from_file(str(path))
    assert isinstance(config, ClusterConfig) and config.compute_environment == "LOCAL_MACHINE"
    assert config.mixed_precision == "no" and config.use_cpu is False  # precision comes from the recipe
    expected = {"ddp": "MULTI_GPU", "fsdp": "FSDP", "fsdp_offload": "FSDP"}.get(name, "DEEPSPEED")
    assert config.distributed_type == expected
    if expected == "FSDP":
        fsdp = config.fsdp_config
        assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True  # full shard
        assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"  # one unit per decoder layer
        assert fsdp["fsdp_offload_params"] is (name == "fsdp_offload")
        assert fsdp["fsdp_cpu_ram_efficient_loading"] is True  # rank 0 reads; tests/test_fsdp_loading.py
    if expected == "DEEPSPEED":
        ds = config.deepspeed_config
        assert ds["zero_stage"] == (2 if name == "zero2" else 3)
        assert ds["deepspeed_multinode_launcher"] == "standard"  # torchrun per node under srun, no pdsh/ssh
        offload = "cpu" if name == "zero3_offload" else "none"
        assert ds["offload_optimizer_device"] == offload and ds["offload_param_device"] == offload
        if ds["zero_stage"] == 3:
            assert ds["zero3_init_flag"] is True and ds["zero3_save_16bit_model"] is True

    # accelerate's own launcher accepts the file with the flags our SLURM launcher passes, and sets the worker env.
    args, _, env = _launcher_env(path)
    assert args.num_processes == 8 and args.num_machines == 2 and args.machine_rank == 1 and not args.cpu
    assert env["ACCELERATE_MIXED_PRECISION"] == "no"
    if expected == "MULTI_GPU":
        assert args.multi_gpu and not args.use_fsdp and not args.use_deepspeed
    if expected == "FSDP":
        assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == "2"
        assert env["FSDP_OFFLOAD_PARAMS"] == str(name == "fsdp_offload").lower()
        from accelerate.utils import FullyShardedDataParallelPlugin

        with mock.patch.dict(os.environ, env):
            plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
        assert type(plugin.cpu_offload).__name__ == ("CPUOffloadPolicy" if name == "fsdp_offload" else "OffloadPolicy")
        assert "SHARDED_STATE_DICT" in str(plugin.state_dict_type)
    if expected == "DEEPSPEED":
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(config.deepspeed_config["zero_stage"])
        if importlib.util.find_spec("deepspeed"):
            from accelerate.utils import DeepSpeedPlugin

            with mock.patch.dict(os.environ, env):
                zero = DeepSpeedPlugin().deepspeed_config["zero_optimization"]
            assert zero["stage"] == config.deepspeed_config["zero_stage"]
            assert zero["offload_param"]["device"] == config.deepspeed_config["offload_param_device"]


def test_unknown_accelerate_config_lists_the_shipped_ones():
    with pytest.raises(RecipeError, match="fsdp_offload"):
        cluster.accelerate_config_path("fsdp3")
    assert set(cluster.accelerate_configs()) == set(CONFIGS)


def test_recipe_launch_section_is_checked():
    recipe = load_recipe("llama8b", {"launch.nodes": "2", "launch.gpu_type": "l40s", "launch.requeue": "false"})
    assert recipe.launch.nodes == 2 and recipe.launch.gpu_type == "l40s" and recipe.launch.requeue is False
    assert load_recipe("llama8b").launch.accelerate_config == "fsdp_offload"  # TicToc: FSDP + offload on 4 x L40s
    assert load_recipe("tiny").launch.accelerate_config == "ddp"
    with pytest.raises(RecipeError, match="gpus_per_node"):
        load_recipe("tiny", {"launch.gpus": "2"})


# ---------------------------------------------------------------------------------------------- SLURM env -> commands


def test_hostlist_parser():
    assert cluster.expand_hostlist("gpu-a100-[07-08]") == ["gpu-a100-07", "gpu-a100-08"]
    assert cluster.expand_hostlist("n[08-10,12],login1") == ["n08", "n09", "n10", "n12", "login1"]
    assert cluster.expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert cluster.expand_hostlist("node17") == ["node17"]


def test_gpus_and_port_from_env():
    assert cluster.gpus_on_node({"SLURM_GPUS_ON_NODE": "4"}) == 4
    assert cluster.gpus_on_node({"SLURM_GPUS_PER_NODE": "a100:8"}) == 8
    assert cluster.gpus_on_node({"SLURM_JOB_GPUS": "0,1,2"}) == 3
    assert cluster.gpus_on_node({}) is None
    assert cluster.default_port("4242") == 24242 and cluster.default_port(None) == 29500
    where = cluster.placement({**TWO_NODES, "SLURM_NODEID": "1", "MASTER_PORT": "31000"})
    assert (where.num_machines, where.num_processes, where.machine_rank, where.main_process_ip, where.port) == (
        2,
        8,
        1,
        "gpu-a100-07",
        31000,
    )
    with pytest.raises(RuntimeError, match="one launcher per node"):
        cluster.placement({**TWO_NODES, "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": "8"})


def test_ports_of_two_jobs_on_one_node_never_collide(capsys):
    """Rendezvous and `vllm serve` prefer ports in ranges of their own (job J's server used to take job J + 1's
    rendezvous port), and a port something already listens on is passed over (launch.sh asks `port` on the first
    node; eval serve=true asks the same way)."""
    import socket

    from timealign.cluster.slurm import default_serve_port, free_port

    jobs = range(100_000, 100_000 + 30_000, 7)
    assert not {default_serve_port(str(j)) for j in jobs} & {
        default_port for j in jobs for default_port in [cluster.default_port(str(j))]
    }
    assert default_serve_port("4242") == 14242 and default_serve_port(None) == 8000
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        assert free_port(taken) != taken and free_port(taken) > taken - taken % 10000
        rc, out, _ = _cli(["port", f"port={taken}"], {}, capsys)
        assert rc == 0 and int(out) != taken
    rc, out, _ = _cli(["port"], {"SLURM_JOB_ID": "4242"}, capsys)
    assert rc == 0 and 24242 <= int(out) < 30000
    # the launcher: launch.main_process_port and MASTER_PORT still win over the port launch.sh found
    env = {**TWO_NODES, "SLURM_NODEID": "0", "TIMEALIGN_MAIN_PORT": "24250"}
    assert cluster.placement(env).port == 24250 and cluster.placement(env, recipe_port=30001).port == 30001
    assert cluster.placement({**env, "MASTER_PORT": "31000"}).port == 31000


def _cli(args, env, capsys):
    rc = cluster.main(args, env=env)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _commands(stdout: str) -> list[list[str]]:
    import shlex

    return [shlex.split(line) for line in stdout.splitlines() if line and not line.startswith("#")]


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_dry_run_prints_every_node_command(capsys):
    """2 nodes x 4 GPUs from fake SLURM env: one accelerate launch per node, ranks 0 and 1, one address and port."""
    args = ["plan", "task=dpo", "recipe=llama8b", "launch.accelerate_config=zero3"]
    rc, out, _ = _cli(args, TWO_NODES, capsys)
    assert rc == 0
    commands = _commands(out)
    assert len(commands) == 2
    for rank, cmd in enumerate(commands):
        assert cmd[:2] == [str(Path(sys.executable).with_name("accelerate")), "launch"]
        assert _flag(cmd, "--config_file") == str(REPO_ROOT / "recipes/accelerate/zero3.yaml")
        assert _flag(cmd, "--num_machines") == "2" and _flag(cmd, "--num_processes") == "8"
        assert _flag(cmd, "--machine_rank") == str(rank)
        assert _flag(cmd, "--main_process_ip") == "gpu-a100-07" and _flag(cmd, "--main_process_port") == "24242"
        assert cmd[cmd.index(str(REPO_ROOT / "train/dpo.py")) + 1 :] == [
            "recipe=llama8b",
            "launch.accelerate_config=zero3",
            "training.resume_from_checkpoint=auto",
        ]

    # Inside the job step of node 1 (what srun runs there): only that node's command.
    rc, out, _ = _cli(
        ["launch", "dry_run=true", "task=dpo", "recipe=llama8b"], {**TWO_NODES, "SLURM_NODEID": "1"}, capsys
    )
    (cmd,) = _commands(out)
    assert _flag(cmd, "--machine_rank") == "1" and _flag(cmd, "--num_processes") == "8"
    assert _flag(cmd, "--config_file").endswith("fsdp_offload.yaml")  # llama8b's launch.accelerate_config

    # One node with 8 GPUs, explicit port and config, no SLURM needed for the plan.
    rc, out, _ = _cli(
        [
            "plan",
            "task=sft",
            "nodes=1",
            "gpus_per_node=8",
            "accelerate_config=ddp",
            "port=29600",
            "recipe=tiny-timer",
            "training.resume_from_checkpoint=false",
        ],
        {},
        capsys,
    )
    (cmd,) = _commands(out)
    assert _flag(cmd, "--num_machines") == "1" and _flag(cmd, "--num_processes") == "8"
    assert _flag(cmd, "--main_process_port") == "29600" and str(REPO_ROOT / "train/sft.py") in cmd
    assert cmd[-1] == "training.resume_from_checkpoint=false"  # the user's choice is kept

    rc, _, err = _cli(["plan", "recipe=tiny", "accelerate_config=nope"], TWO_NODES, capsys)
    assert rc == 2 and "unknown accelerate config 'nope'" in err


def test_submit_builds_sbatch_from_the_recipe(capsys):
    rc, out, _ = _cli(
        [
            "submit",
            "dry_run=true",
            "task=dpo",
            "recipe=llama8b",
            "launch.nodes=2",
            "launch.gpus_per_node=4",
            "launch.gpu_type=l40s",
            "launch.partition=gpu",
            "launch.time=2-00:00:00",
        ],
        {},
        capsys,
    )
    assert rc == 0
    line = out.strip().splitlines()[-1]
    for piece in (
        "sbatch ",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:l40s:4",
        "--partition=gpu",
        "--time=2-00:00:00",
        "--requeue",
        "--signal=B:USR1@600",
        "--cpus-per-task=32",
        "--mem=256G",  # 4 processes x llama8b's launch.mem_per_gpu 64G
        f"{REPO_ROOT}/slurm/dpo.sbatch recipe=llama8b launch.nodes=2",
        "TIMEALIGN_REQUEUE=1",
        "TIMEALIGN_SUBMIT_SIGNAL=B:USR1@600",  # the job's --signal, which Slurm 22.05 shows only through sacct
    ):
        assert piece in line, piece
    rc, out, _ = _cli(["submit", "dry_run=true", "task=dpo", "recipe=tiny", "processes_per_node=2"], {}, capsys)
    assert rc == 0 and "--signal=B:USR1@120" in out  # the schema's default lead; llama8b's recipe says 600
    assert rc == 0 and "--gres=none --cpus-per-task=2 " in out and "--mem=4G " in out  # 2 x tiny's 2G
    rc, out, _ = _cli(["submit", "dry_run=true", "task=dpo", "recipe=tiny", "mem=3000M"], {}, capsys)
    assert rc == 0 and "--mem=3000M " in out  # the option wins
    rc, out, _ = _cli(["submit", "dry_run=true", "task=dpo", "recipe=tiny", "launch.mem_per_gpu=null"], {}, capsys)
    assert rc == 0 and "--mem" not in out  # the cluster's default
    rc, out, _ = _cli(
        [
            "submit",
            "dry_run=true",
            "task=eval",
            "recipe=llama8b",
            "checkpoint=outputs/x",
            "eval.tensor_parallel_size=2",
            "suites=tictoc",
        ],
        {},
        capsys,
    )
    assert rc == 0 and "--nodes=1" in out and "--gres=gpu:2" in out and "slurm/eval.sbatch recipe=llama8b" in out


def test_eval_commands_use_tensor_parallelism(capsys, tmp_path):
    env = {"SLURM_GPUS_ON_NODE": "4"}
    rc, out, _ = _cli(["eval", "dry_run=true", "recipe=llama8b", "checkpoint=outputs/llama8b"], env, capsys)
    (run,) = _commands(out)
    assert run[1] == str(REPO_ROOT / "eval/run.py")
    assert "eval.backend=vllm" in run and "eval.tensor_parallel_size=4" in run
    rc, out, _ = _cli(
        ["eval", "dry_run=true", "serve=true", "port=8123", "recipe=llama8b", "checkpoint=outputs/llama8b"],
        env,
        capsys,
    )
    server, run = _commands(out)
    assert server[1:3] == ["serve", "outputs/llama8b"] and _flag(server, "--tensor-parallel-size") == "4"
    assert _flag(server, "--port") == "8123"
    assert "eval.backend=openai" in run and "eval.base_url=http://127.0.0.1:8123/v1" in run
    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "meta-llama/x", "r": 8}))
    server, _ = cluster.eval_commands(
        ["recipe=llama8b", f"checkpoint={adapter}"], gpus=2, serve=True, require_vllm=False
    )
    assert server[2] == "meta-llama/x" and f"timealign={adapter}" in server and _flag(server, "--max-lora-rank") == "8"


# ---------------------------------------------------------------------------------------------- sbatch scripts


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(REPO_ROOT / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_sbatch_headers():
    for task in ("dpo", "sft", "eval"):
        text = (REPO_ROOT / f"slurm/{task}.sbatch").read_text()
        for line in (
            "#SBATCH --requeue",
            "#SBATCH --signal=B:USR1@120",
            "#SBATCH --open-mode=append",
            "#SBATCH --ntasks-per-node=1",
        ):
            assert line in text, (task, line)
        # sizes come from the command line; --output would be relative to the submit directory (launch.sh moves the
        # log into the checkout's slurm/logs instead)
        for option in ("--gres", "--gpus", "--cpus-per-task", "--time", "--mem", "--output"):
            assert f"#SBATCH {option}" not in text, (task, option)
        assert (f"ta_train {task}" if task != "eval" else "ta_eval") in text
    assert (REPO_ROOT / "slurm/logs/.gitignore").is_file()  # sbatch needs the folder to exist


FAKE_SRUN = """#!/bin/bash
# fake srun: one task per node, sequentially, with the per-task SLURM variables; records its own options.
echo "$*" >> "$FAKE_DIR/srun.args"
n=1
while [[ $1 == -* ]]; do
  case $1 in --ntasks=*) n=${1#--ntasks=} ;; esac
  shift
done
if [[ -n ${FAKE_TRAINER:-} ]]; then   # stand-in trainer: checkpoint + marker once the stop file appears
  if [[ $FAKE_TRAINER == saved ]]; then echo '{"step": 2}' > "$TIMEALIGN_STOP_FILE.requeue"; fi
  touch "$FAKE_DIR/started"
  for _ in $(seq 200); do
    if [[ -f $TIMEALIGN_STOP_FILE ]]; then echo '{"step": 3}' > "$TIMEALIGN_STOP_FILE.requeue"; exit 75; fi
    sleep 0.1
  done
  exit 1
fi
for ((i = 0; i < n; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURM_STEP_NUM_TASKS=$n "$@" || exit $?
done
"""

FAKE_SCONTROL = """#!/bin/bash
echo "$*" >> "$FAKE_DIR/scontrol.args"
[[ $1 == requeue ]] || exit 1   # `show hostnames` fails: the launcher falls back to its own parser
"""


@pytest.fixture
def fake_slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        **TWO_NODES,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "SLURM_SUBMIT_DIR": str(REPO_ROOT),
        "SLURM_JOB_NAME": "timealign-dpo",
        "SLURM_CPUS_PER_TASK": "32",
        "TIMEALIGN_PYTHON": sys.executable,
        "TIMEALIGN_LOG_DIR": str(tmp_path / "logs"),
        "TIMEALIGN_MAIN_ADDR": "10.1.2.7",
    }  # resolved on the first node in a real job (tests/test_slurm_real.py)
    env.pop("TIMEALIGN_ROOT", None)
    return tmp_path, env


def test_sbatch_dry_run_prints_the_per_node_commands(fake_slurm):
    tmp, env = fake_slurm
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "slurm/dpo.sbatch"), "recipe=llama8b", "launch.accelerate_config=zero3_offload"],
        env={**env, "TIMEALIGN_DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    srun = (tmp / "srun.args").read_text()
    assert "--nodes=2 --ntasks=2 --ntasks-per-node=1" in srun and "--cpus-per-task=32" in srun
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    commands = _commands("\n".join(l for l in proc.stdout.splitlines() if l.startswith(accelerate + " ")))
    assert [_flag(c, "--machine_rank") for c in commands] == ["0", "1"]
    for cmd in commands:
        assert _flag(cmd, "--num_machines") == "2" and _flag(cmd, "--num_processes") == "8"
        assert _flag(cmd, "--main_process_ip") == "10.1.2.7" and _flag(cmd, "--main_process_port") == "24242"
        assert _flag(cmd, "--config_file").endswith("recipes/accelerate/zero3_offload.yaml")
    assert "requeue" not in (tmp / "scontrol.args").read_text()


SPOOL_SCONTROL = """#!/bin/bash
echo "$*" >> "$FAKE_DIR/scontrol.args"
if [[ $1 == show && $2 == job ]]; then   # as Slurm 22.05 prints it: the submitted script's own path
  echo "JobId=$3 JobName=timealign-dpo"
  echo "   Command=$FAKE_COMMAND"
  echo "   WorkDir=$SLURM_SUBMIT_DIR"
  exit 0
fi
[[ $1 == requeue ]] || exit 1
"""


def test_sbatch_from_another_directory_finds_the_checkout_and_logs_there(fake_slurm, tmp_path):
    """sbatch runs a spooled copy of the script in the submit directory: the checkout comes from the script's path
    as Slurm recorded it (scontrol show job: Command=), and Slurm's default slurm-JOBID.out there only names the log,
    which goes to the checkout's log folder (an absolute path)."""
    tmp, env = fake_slurm
    (tmp / "bin" / "scontrol").write_text(SPOOL_SCONTROL)
    elsewhere = tmp_path / "home" / "somewhere"
    spool = tmp_path / "spool" / "job4242"
    elsewhere.mkdir(parents=True)
    spool.mkdir(parents=True)
    (spool / "slurm_script").write_text((REPO_ROOT / "slurm/dpo.sbatch").read_text())
    default_log = elsewhere / "slurm-4242.out"
    env = {
        **env,
        "SLURM_SUBMIT_DIR": str(elsewhere),
        "TIMEALIGN_DRY_RUN": "1",
        "SLURM_JOB_NAME": "timealign-dpo",
        "FAKE_COMMAND": str(REPO_ROOT / "slurm/dpo.sbatch"),
    }
    with open(default_log, "w") as out:
        proc = subprocess.run(
            ["bash", str(spool / "slurm_script"), "recipe=llama8b"],
            cwd=elsewhere,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
        )
    log = Path(env["TIMEALIGN_LOG_DIR"]) / "timealign-dpo-4242.out"
    pointer = default_log.read_text()
    assert proc.returncode == 0, pointer + (log.read_text() if log.exists() else "")
    assert pointer.count("\n") == 1 and pointer.rstrip().endswith(f"] log: {log}")
    text = log.read_text()
    assert "--num_processes 8" in text and f"--config_file {REPO_ROOT}/recipes/accelerate/fsdp_offload.yaml" in text
    # Without a checkout anywhere in sight: one line naming the fix.
    (tmp / "bin" / "scontrol").write_text(FAKE_SCONTROL)
    proc = subprocess.run(
        ["bash", str(spool / "slurm_script"), "recipe=llama8b"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: cannot find the timealign checkout (tried the script's path and {elsewhere}): set "
        "TIMEALIGN_ROOT=/path/to/timealign"
    ]


def _run_batch(env, send=None, group=False):
    proc = subprocess.Popen(
        ["bash", str(REPO_ROOT / "slurm/dpo.sbatch"), "recipe=tiny"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if send is not None:
        started = Path(env["FAKE_DIR"]) / "started"
        for _ in range(200):
            if started.exists():
                break
            time.sleep(0.05)
        time.sleep(0.3)  # let bash reach `wait`
        (os.killpg if group else os.kill)(proc.pid, send)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def test_warning_signal_checkpoints_and_requeues(fake_slurm):
    """USR1 to the batch shell -> stop file -> trainer saves and leaves the marker -> scontrol requeue."""
    tmp, env = fake_slurm
    rc, out = _run_batch({**env, "FAKE_TRAINER": "wait"}, send=signal.SIGUSR1)
    assert rc == 0, out
    assert "requeue 4242" in (tmp / "scontrol.args").read_text(), out
    assert not list((tmp / "logs").glob("4242.stop*"))  # cleaned up for the next run


def test_cancel_or_max_requeues_do_not_requeue(fake_slurm):
    tmp, env = fake_slurm
    # scancel/preemption: SIGTERM to every process of the job. Even with a checkpoint marker the job must not requeue.
    rc, out = _run_batch({**env, "FAKE_TRAINER": "saved"}, send=signal.SIGTERM, group=True)
    assert rc == 128 + signal.SIGTERM and "no requeue from here" in out, out
    assert not (tmp / "scontrol.args").exists() or "requeue" not in (tmp / "scontrol.args").read_text()
    # Too many restarts: the warning is honoured (checkpoint) but the job is not requeued again.
    (tmp / "started").unlink()
    rc, out = _run_batch(
        {**env, "FAKE_TRAINER": "wait", "SLURM_RESTART_COUNT": "3", "TIMEALIGN_MAX_REQUEUES": "3"}, send=signal.SIGUSR1
    )
    assert rc == 75 and "not requeueing" in out, out


# ---------------------------------------------------------------------------------------------- resume + preemption


def _checkpoint(root: Path, step: int, complete: bool = True, recipe=None) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if complete:  # what resume checks: whole weights, optimizer, scheduler, RNG state and trainer state
        import torch
        from safetensors.torch import save_file

        save_file({"w": torch.zeros(2)}, str(path / "model.safetensors"))
        for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
            torch.save({"step": step}, path / name)
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if recipe is not None:
        import yaml

        (path / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(recipe.to_dict()))
    return path


def test_resolve_resume(tmp_path):
    assert resume.resolve_resume("auto", tmp_path / "missing") is None
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 12, complete=False)  # killed while saving: skipped
    assert resume.resolve_resume("auto", tmp_path) == str(tmp_path / "checkpoint-10")
    for off in (None, False, "false", "no", ""):
        assert resume.resolve_resume(off, tmp_path) is None
    assert resume.resolve_resume(str(tmp_path / "checkpoint-2"), tmp_path) == str(tmp_path / "checkpoint-2")
    with pytest.raises(RecipeError, match="not a checkpoint folder"):
        resume.resolve_resume(str(tmp_path / "checkpoint-12"), tmp_path)


def test_auto_resume_refuses_another_recipes_checkpoint(tmp_path):
    trained = load_recipe("tiny", {"training.learning_rate": "1e-4"})
    ckpt = _checkpoint(tmp_path, 4, recipe=trained)
    same = load_recipe(
        "tiny",
        {
            "training.learning_rate": "1e-4",
            "training.max_steps": "10",
            "output_dir": "x",
            "training.resume_from_checkpoint": "auto",
        },
    )
    resume.check_resume_compatible(same, ckpt)  # bookkeeping keys may change
    with pytest.raises(RecipeError, match="training.learning_rate"):
        resume.check_resume_compatible(load_recipe("tiny"), ckpt)


def test_preemption_callback_signal_and_stop_file(tmp_path):
    from transformers import TrainerControl, TrainerState

    class Args:
        device = "cpu"

    callback = preemption.PreemptionCallback()
    callback.install()
    try:
        state, control = TrainerState(global_step=3, max_steps=6), TrainerControl()
        callback.on_step_end(Args(), state, control)
        assert not control.should_save and not control.should_training_stop
        os.kill(os.getpid(), signal.SIGUSR1)  # would kill the process without the handler
        callback.on_step_end(Args(), state, control)
        assert control.should_save and control.should_training_stop and callback.stopped_at == 3
        assert callback.reason == "SIGUSR1"
    finally:
        callback.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL

    stop = tmp_path / "job.stop"
    callback = preemption.PreemptionCallback(stop_file=str(stop))
    control = TrainerControl()
    callback.on_step_end(Args(), TrainerState(global_step=1), control)
    assert not control.should_training_stop
    stop.touch()
    callback.on_step_end(Args(), TrainerState(global_step=2), control)
    assert control.should_training_stop and callback.stopped_at == 2 and "stop file" in callback.reason


def test_stop_outcome_says_what_slurm_will_do(tmp_path):
    """The trainer's last line after a preemption checkpoint, from the signal and from Slurm (scontrol show job):
    only a job that will be requeued is said to be."""
    stop_file = tmp_path / "77.stop"
    stop_file.touch()  # the batch shell got USR1 (B:USR1, --batch, --full): it made the stop file
    job = {"SLURM_JOB_ID": "77", preemption.STOP_FILE_ENV: str(stop_file)}

    def slurm(state, requeue="1", restarts="0", run="00:05:00", limit="UNLIMITED"):
        # the fields `scontrol show job` gives while Slurm ends a job (Slurm 22.05, tests/test_slurm_real.py)
        return lambda job_id: {
            "JobId": job_id,
            "JobState": state,
            "Requeue": requeue,
            "Reason": "None",
            "Restarts": restarts,
            "RunTime": run,
            "TimeLimit": limit,
        }

    cancelled = (
        False,
        "job 77 was cancelled (scancel): it is not requeued; resubmit the same command "
        "(training.resume_from_checkpoint=auto) to continue from it",
    )
    assert preemption.stop_outcome("SIGTERM", job, slurm("COMPLETING")) == cancelled  # what scancel shows
    assert preemption.stop_outcome("SIGTERM", job, slurm("CANCELLED", limit="01:00:00")) == cancelled
    for state in ("TIMEOUT", "COMPLETING"):
        requeued, line = preemption.stop_outcome("SIGTERM", job, slurm(state, run="1-00:00:03", limit="1-00:00:00"))
        assert not requeued and "reached its time limit" in line and "raise launch.signal_seconds" in line
    for fields in (slurm("PREEMPTED"), slurm("COMPLETING", restarts="1")):  # scontrol requeue: Restarts counted
        requeued, line = preemption.stop_outcome("SIGTERM", job, fields)
        assert requeued and "Slurm requeues job 77" in line and "BeginTime" in line
    assert not preemption.stop_outcome("SIGTERM", job, slurm("PREEMPTED", requeue="0"))[0]
    assert (
        preemption.stop_outcome("SIGTERM", {**job, "SLURM_RESTART_COUNT": "1"}, slurm("COMPLETING", restarts="1"))
        == cancelled
    )
    for reason in ("SIGUSR1", "stop file /logs/77.stop", "another rank"):  # the USR1 warning, however it came
        requeued, line = preemption.stop_outcome(reason, job, slurm("RUNNING"))
        assert requeued and "the batch script requeues job 77" in line, reason
    assert not preemption.stop_outcome("SIGUSR1", {**job, "TIMEALIGN_REQUEUE": "0"}, slurm("RUNNING"))[0]
    capped = {**job, "SLURM_RESTART_COUNT": "3", "TIMEALIGN_MAX_REQUEUES": "3"}
    assert "requeued 3 times already" in preemption.stop_outcome("SIGUSR1", capped, slurm("RUNNING"))[1]
    requeued, line = preemption.stop_outcome("SIGTERM", job, slurm("RUNNING"))  # a SIGTERM Slurm did not send
    assert not requeued and "requeued only if Slurm requeues it" in line
    assert preemption.stop_outcome("SIGUSR1", {}, slurm("RUNNING"))[1].startswith("not in a Slurm job")
    # USR1 to the job steps only (scancel --signal=USR1 JOB, no --batch/--full): no stop file, nothing requeues
    steps_only = {**job, preemption.STOP_FILE_ENV: str(tmp_path / "78.stop")}
    for reason in ("SIGUSR1", "another rank"):
        requeued, line = preemption.stop_outcome(reason, steps_only, slurm("RUNNING"))
        assert not requeued and "job 77 is not requeued: signal the batch shell (--batch or --full)" in line, line
        assert "requeues job" not in line
    assert not preemption.stop_outcome("SIGUSR1", {"SLURM_JOB_ID": "77"}, slurm("RUNNING"))[0]  # not our script


OUTLIVE = """
import os, signal, subprocess, sys
from timealign.cluster.accelerate import outlive_job_signals
outlive_job_signals()
os.kill(os.getpid(), signal.SIGUSR1)   # scancel --signal=USR1 --full: would kill the launcher
os.kill(os.getpid(), signal.SIGTERM)   # Slurm's SIGTERM: torchrun would re-signal and kill its workers
child = "import signal; print(int(signal.getsignal(signal.SIGUSR1)), int(signal.getsignal(signal.SIGTERM)))"
import torch.distributed.run as torchrun  # what accelerate's launcher hands torchrun's agent
print("alive", torchrun.get_args_parser().parse_args(["x.py"]).signals_to_handle,
      subprocess.check_output([sys.executable, "-c", child], text=True).strip())
"""


def test_launcher_outlives_the_jobs_signals():
    proc = subprocess.run(
        [sys.executable, "-c", OUTLIVE],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    # a trainer it starts ignores USR1 until its own handler is in (stop file), and dies on SIGTERM before training
    assert proc.stdout.split() == ["alive", "SIGINT,SIGHUP,SIGQUIT", "1", "0"]  # SIG_IGN, SIG_DFL
    assert "SIGTERM: Slurm signals every process of the job" in proc.stderr


def test_save_timing_warns_when_a_step_and_a_save_outgrow_the_signal_lead(monkeypatch, caplog):
    from transformers import TrainerControl, TrainerState

    class Args:
        device = "cpu"

    timing = preemption.SaveTimingCallback(signal_seconds=1, env={})  # not in a Slurm job: the recipe's lead
    state = TrainerState(global_step=4, max_steps=8)
    monkeypatch.setenv(preemption.SLOW_SAVE_ENV, "1.2")  # the test-only slow save: sleeps in on_save
    with caplog.at_level("INFO", logger="timealign.train.preemption"):
        timing.on_step_begin(Args(), state, TrainerControl())
        timing.on_step_end(Args(), state, TrainerControl())
        timing.on_save(Args(), state, TrainerControl())
    assert 1.2 <= timing.save_seconds < 5
    text = caplog.text
    assert re.search(r"checkpoint-4 saved in 1\.\d s", text), text
    assert "more than the warning's lead of 1 s (launch.signal_seconds, the recipe's: not in a Slurm job)" in text
    assert "resubmit with a lead of at least" in text and "SBATCH_SIGNAL=B:USR1@" in text
    caplog.clear()
    monkeypatch.delenv(preemption.SLOW_SAVE_ENV)
    preemption.SaveTimingCallback(signal_seconds=600, env={}).on_save(Args(), state, TrainerControl())  # no step yet
    timing = preemption.SaveTimingCallback(signal_seconds=600, env={})
    with caplog.at_level("INFO", logger="timealign.train.preemption"):
        timing.on_step_begin(Args(), state, TrainerControl())
        timing.on_step_end(Args(), state, TrainerControl())
        timing.on_save(Args(), state, TrainerControl())
    assert "saved in" in caplog.text and "lead" not in caplog.text


def _saved_once(timing, state, seconds=0.0) -> None:
    from transformers import TrainerControl

    class Args:
        device = "cpu"

    timing.on_train_begin(Args(), state, TrainerControl())
    timing.on_step_begin(Args(), state, TrainerControl())
    timing.on_step_end(Args(), state, TrainerControl())
    timing.step_ended -= seconds  # a step and save that took this long
    timing.on_save(Args(), state, TrainerControl())


def test_save_timing_checks_the_jobs_own_lead_not_the_recipes(caplog):
    """In a Slurm job the save check uses the --signal Slurm will act on (job_signal), and says where the recipe's
    launch.signal_seconds differs: the recipe's 1 s against a job's 120 s gives no false warning. Where Slurm cannot
    say which --signal the job has, nothing is asserted: the log says the lead is unknown and what the save needs."""
    from transformers import TrainerState

    state = TrainerState(global_step=2, max_steps=8)
    job = {"SLURM_JOB_ID": "88"}
    script = preemption.parse_signal("B:USR1@120", "#SBATCH --signal=B:USR1@120 of its batch script")
    with caplog.at_level("INFO", logger="timealign.train.preemption"):
        _saved_once(preemption.SaveTimingCallback(1, env=job, read_job_signal=lambda env: script), state, 6)
    text = caplog.text
    assert "launch.signal_seconds=1, but job 88's warning comes 120 s before its time limit (#SBATCH" in text, text
    assert "more than the warning's lead" not in text  # 6 s fits in the job's 120 s
    assert {r.levelname for r in caplog.records} == {"INFO"}  # a longer lead than the recipe's: no warning
    caplog.clear()
    short = preemption.parse_signal("B:USR1@5", "SBATCH_SIGNAL=B:USR1@5 where it was submitted")
    with caplog.at_level("INFO", logger="timealign.train.preemption"):
        _saved_once(preemption.SaveTimingCallback(120, env=job, read_job_signal=lambda env: short), state, 6)
    assert "more than the warning's lead of 5 s (SBATCH_SIGNAL=B:USR1@5 where it was submitted)" in caplog.text
    caplog.clear()
    steps = preemption.parse_signal("USR1@600", "--signal=USR1@600 on its sbatch command line")
    with caplog.at_level("INFO", logger="timealign.train.preemption"):
        _saved_once(preemption.SaveTimingCallback(600, env=job, read_job_signal=lambda env: steps), state)
    assert "to the job steps only" in caplog.text and "submit with SBATCH_SIGNAL=B:USR1@600" in caplog.text
    caplog.clear()
    none = preemption.JobSignal("", "", 0, False, "no --signal: no warning before its time limit")
    with caplog.at_level("INFO", logger="timealign.train.preemption"):
        _saved_once(preemption.SaveTimingCallback(120, env=job, read_job_signal=lambda env: none), state, 6)
    assert "job 88 has no warning signal" in caplog.text and "more than" not in caplog.text
    caplog.clear()
    # the documented 8B form typed as `sbatch --signal=B:USR1@600 ...` without accounting: Slurm cannot say, so the
    # script's #SBATCH 120 s is not asserted (no false warning), and the log says what the measured save needs
    why = "its batch script's #SBATCH --signal=B:USR1@120, but a --signal on the sbatch command line overrides that"
    unknown = preemption.unknown_signal(why)
    timing = preemption.SaveTimingCallback(600, env=job, read_job_signal=lambda env: unknown)
    with caplog.at_level("INFO", logger="timealign.train.preemption"):
        _saved_once(timing, state, 200)
        timing.on_step_begin(None, state, None)
        timing.on_step_end(None, state, None)
        timing.on_save(None, state, None)  # a quicker step + save: not said again
    text = caplog.text
    assert {r.levelname for r in caplog.records} == {"INFO"} and "120 s" not in text, text
    assert f"job 88's warning lead is unknown ({why}): checkpoint saves are timed, not checked" in text, text
    assert "SBATCH_SIGNAL=B:USR1@600 sbatch" in text  # how to make it known, with the recipe's lead
    assert re.search(
        r"one step \+ a checkpoint took 200\.\d s; job 88's warning lead is unknown .* more than 200\.\d s", text
    )
    assert text.count("one step + a checkpoint took") == 1 and "ask for 430" in text, text
    caplog.clear()
    with caplog.at_level(
        "INFO", logger="timealign.train.preemption"
    ):  # unreadable in a job: unknown, not the recipe's
        _saved_once(preemption.SaveTimingCallback(1, env=job, read_job_signal=lambda env: None), state, 3)
    assert "job 88's warning lead is unknown (Slurm could not say)" in caplog.text
    assert "more than the warning's lead" not in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="timealign.train.preemption"):  # requeue off: no check, nothing read
        _saved_once(preemption.SaveTimingCallback(None, env=job, read_job_signal=lambda env: 1 / 0), state, 3)
    assert "lead" not in caplog.text


def test_job_signal_reads_what_slurm_will_send():
    """The job's --signal from what Slurm 22.05 gives (it prints it in neither `scontrol show job` nor the job's
    environment): sacct's SubmitLine, submit's TIMEALIGN_SUBMIT_SIGNAL, SBATCH_SIGNAL, the batch script."""

    def parse(spec):
        found = preemption.parse_signal(spec)
        return found and (found.name, found.seconds, found.batch)

    assert parse("B:USR1@120") == ("USR1", 120, True)
    assert parse("USR1") == ("USR1", 60, False)  # sbatch's default sig_time; no B: the job steps only
    assert parse("B:10@600") == ("USR1", 600, True) and parse("R:SIGUSR2@30") == ("USR2", 30, False)
    assert parse("B:NOPE@5") is None and parse("B:USR1@") is None
    line = "sbatch --gres=gpu:4 --signal=B:USR1@600 --mem=256G slurm/dpo.sbatch recipe=llama8b"
    assert preemption.submit_line_signal(line) == "B:USR1@600"
    assert preemption.submit_line_signal("sbatch --signal USR1@90 x.sbatch") == "USR1@90"
    assert preemption.submit_line_signal("sbatch --gres=none slurm/dpo.sbatch recipe=tiny") is None
    shipped = (REPO_ROOT / "slurm/dpo.sbatch").read_text()
    assert preemption.batch_script_signal(shipped) == "B:USR1@120"
    assert preemption.batch_script_signal("#!/bin/bash\necho hi\n#SBATCH --signal=B:USR1@9\n") is None  # not read

    def slurm(sacct=None, script=shipped):  # what the two commands print (None: they fail)
        return lambda cmd: sacct if cmd[0] == "sacct" else script

    job = {"SLURM_JOB_ID": "5"}
    assert preemption.job_signal({}, slurm()) is None  # not a job: the recipe's
    found = preemption.job_signal(job, slurm())  # no accounting: the script's line is only a default, not the lead
    assert not found.known and found.source.startswith(
        "its batch script's #SBATCH --signal=B:USR1@120, but a --signal"
    )
    found = preemption.job_signal(job, slurm(sacct=line + "\n"))
    assert found.seconds == 600 and found.source == "--signal=B:USR1@600 on its sbatch command line"
    plain = "sbatch --gres=none slurm/dpo.sbatch\n"
    found = preemption.job_signal(job, slurm(sacct=plain))  # accounted, no option, no SBATCH_SIGNAL: the script's
    assert found.known and found.seconds == 120 and found.source == "#SBATCH --signal=B:USR1@120 of its batch script"
    found = preemption.job_signal({**job, "SLURM_EXPORT_ENV": "ALL,X=1"}, slurm(sacct=plain))
    assert found.known and found.seconds == 120
    found = preemption.job_signal({**job, "SLURM_EXPORT_ENV": "NONE"}, slurm(sacct=plain))  # an SBATCH_SIGNAL hidden
    assert not found.known and "--export=NONE keeps it from the job's environment" in found.source
    found = preemption.job_signal({**job, "SBATCH_SIGNAL": "B:USR1@5"}, slurm())
    assert found.seconds == 5 and found.source.startswith("SBATCH_SIGNAL=B:USR1@5 where it was submitted")
    found = preemption.job_signal(
        {**job, "SBATCH_SIGNAL": "B:USR1@5", preemption.SUBMIT_SIGNAL_ENV: "B:USR1@600"}, slurm()
    )
    assert found.seconds == 600 and "python -m timealign.cluster submit" in found.source  # its command line wins
    bare = "#!/bin/bash\n#SBATCH --nodes=1\nsrun x\n"
    found = preemption.job_signal(job, slurm(sacct=plain, script=bare))
    assert found.known and found.spec == "" and found.source.startswith("no --signal")
    found = preemption.job_signal(job, slurm(script=bare))  # without accounting a command line may have one
    assert not found.known and found.source.startswith("its batch script has no #SBATCH --signal, but a --signal")
    found = preemption.job_signal(job, slurm(script=None))  # not a batch job: unknown, never the recipe's
    assert not found.known and "scontrol write batch_script" in found.source


def _logical_lines(text: str) -> list[str]:
    """Command lines of a doc or a script header, `\\` continuations joined, comment marks dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.lstrip("#").strip()
        current = f"{current} {line}" if current else line
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        lines.append(current)
        current = ""
    return lines


def test_examples_carry_the_lead_memory_and_cpus_they_need():
    """Every hand-written 8B training sbatch (docs/cluster.md, the scripts' headers) passes the recipe's lead
    (the scripts' own #SBATCH --signal=B:USR1@120 is too short for it) as SBATCH_SIGNAL, the form the trainer sees
    without Slurm accounting (a --signal on the command line it cannot see); every eval example asks for memory and
    CPUs; both say where to submit from."""
    sources = {
        p: p.read_text() for p in [REPO_ROOT / "docs/cluster.md", *sorted((REPO_ROOT / "slurm").glob("*.sbatch"))]
    }
    checked = {"training": 0, "eval": 0}
    for path, text in sources.items():
        flat = " ".join(text.replace("#", " ").split())
        assert "a folder the compute nodes see, or pass --output=<shared path>" in flat.replace("`", ""), path
        assert "Submit from any" not in flat and "work from any submit" not in flat, path
        for line in _logical_lines(text):
            recipe = re.search(r"\bsbatch\b.*slurm/(dpo|sft|eval)\.sbatch.*\brecipe=([\w.-]+)", line)
            if not recipe:
                continue
            if recipe.group(1) == "eval":
                checked["eval"] += 1
                assert "--mem=" in line and "--cpus-per-task=" in line, (path.name, line)
                continue
            lead = load_recipe(recipe.group(2)).launch.signal_seconds
            if lead > 120:  # the scripts' own 120 s would do otherwise
                checked["training"] += 1
                assert f"SBATCH_SIGNAL=B:USR1@{lead} " in line and "--signal" not in line, (path.name, line)
    assert checked["training"] >= 5 and checked["eval"] >= 4, checked


# ---------------------------------------------------------------------------------------------- training (slow)

TRAIN = [
    "recipe=tiny",
    "data.synthetic_trajectories=8",
    "training.max_steps=6",
    "training.logging_steps=1",
    "training.save_strategy=steps",
    "training.save_steps=2",
    "training.per_device_train_batch_size=2",
]

PREEMPT_SCRIPT = """
import os, signal, sys
from transformers import TrainerCallback
from timealign.train import dpo

class SignalAt(TrainerCallback):  # a real SIGUSR1 to this process after step K, as the SLURM warning would be
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == int(os.environ["SIGNAL_AT_STEP"]):
            os.kill(os.getpid(), signal.SIGUSR1)

make = dpo.make_trainer
def make_with_signal(recipe, ready, data):
    trainer = make(recipe, ready, data)
    trainer.add_callback(SignalAt())
    return trainer

dpo.make_trainer = make_with_signal
sys.exit(dpo.main(sys.argv[1:]))
"""


def _log(out: Path, key: str = "loss") -> dict[int, float]:
    return {e["step"]: e[key] for e in json.loads((out / "train_log.json").read_text()) if key in e}


@pytest.fixture(scope="module")
def baseline(train_env, prepared, tmp_path_factory):
    """One uninterrupted 6-step run (1 process, global batch 2), reporting to W&B offline."""
    root = tmp_path_factory.mktemp("baseline")
    out = root / "run"
    run_checked(
        [
            sys.executable,
            str(REPO_ROOT / "train/dpo.py"),
            *TRAIN,
            f"data.prepared_dir={prepared}",
            f"output_dir={out}",
            "training.report_to=[wandb]",
            "wandb.tags=[ablation-a]",
        ],
        {**train_env, "WANDB_DIR": str(root)},
    )
    return out


@pytest.mark.slow
def test_wandb_run_has_tags_and_resolved_config(baseline, prepared):
    from timealign.train.tracking import data_fingerprint, git_revision

    runs = list((baseline.parent / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    info = json.loads((baseline / "run_info.json").read_text())
    assert runs[0].name.endswith(info["wandb_run_id"])
    blob = next(runs[0].glob("*.wandb")).read_bytes()
    fingerprint, commit = data_fingerprint(prepared), info["git"]["commit"]
    assert info["data_fingerprint"] == fingerprint
    if git_revision()["commit"] == "unknown":  # not a git checkout
        assert commit == "unknown"
    else:  # the commit the run was trained from (HEAD may have moved on since)
        assert re.fullmatch("[0-9a-f]{40}", commit)
        ancestor = subprocess.run(["git", "-C", str(REPO_ROOT), "merge-base", "--is-ancestor", commit, "HEAD"])
        assert ancestor.returncode == 0
    for tag in ("tiny", "task:dpo", f"data:{fingerprint}", f"git:{commit[:12]}", "ablation-a"):
        assert tag.encode() in blob, tag
    assert b"timealign-tiny" in blob  # wandb.project of the recipe
    for key, value in (("prepared_dir", str(prepared)), ("accelerate_config", "ddp"), ("project", "timealign-tiny")):
        assert re.search(f'"{key}": ?"{re.escape(value)}"'.encode(), blob), key  # the resolved recipe as config
    assert b"rewards/margins" in blob


@pytest.mark.slow
def test_preempted_run_resumes_with_identical_losses(baseline, train_env, prepared, tmp_path):
    out = tmp_path / "run"
    stop = tmp_path / "job.stop"
    args = [
        *TRAIN,
        f"data.prepared_dir={prepared}",
        f"output_dir={out}",
        "training.resume_from_checkpoint=auto",
        "training.report_to=[wandb]",
    ]
    env = {**train_env, "WANDB_DIR": str(tmp_path), "TIMEALIGN_STOP_FILE": str(stop)}
    script = tmp_path / "preempt.py"
    script.write_text(PREEMPT_SCRIPT)
    proc = run_checked([sys.executable, str(script), *args], {**env, "SIGNAL_AT_STEP": "3"}, check=False)
    assert proc.returncode == preemption.EXIT_REQUEUE, proc.stderr[-3000:]
    marker = json.loads((out / "preempted.json").read_text())
    assert marker == {"checkpoint": str(out / "checkpoint-3"), "step": 3, "reason": "SIGUSR1"}
    assert json.loads((tmp_path / "job.stop.requeue").read_text())["step"] == 3  # what the sbatch script requeues on
    assert (out / "checkpoint-3" / "optimizer.pt").is_file() and not (out / "model.safetensors").exists()
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3 and [e["step"] for e in state["log_history"]] == [1, 2, 3]

    run_checked([sys.executable, str(REPO_ROOT / "train/dpo.py"), *args], env)  # the requeued job: same command
    info = json.loads((out / "run_info.json").read_text())
    assert info["resumed_from"] == str(out / "checkpoint-3") and info["global_step"] == 6 and not info["preempted"]
    assert not (out / "preempted.json").exists()
    for key in ("loss", "grad_norm", "rewards/margins"):
        expected, got = _log(baseline, key), _log(out, key)
        assert sorted(got) == [1, 2, 3, 4, 5, 6]
        assert got == pytest.approx(expected, abs=1e-5), key
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and {r.name.rsplit("-", 1)[1] for r in runs} == {info["wandb_run_id"]}  # one W&B run


def _check_distributed(out: Path, baseline: Path, steps: int, wrapper: str, world_size: int = 2):
    info = json.loads((out / "run_info.json").read_text())
    assert info["world_size"] == world_size and info["model_wrapper"] == wrapper, info
    expected = {k: v for k, v in _log(baseline).items() if k <= steps}
    assert _log(out) == pytest.approx(expected, abs=1e-5)  # one training over both ranks, global batch 2
    return info


@pytest.mark.slow
def test_ddp_two_processes_on_one_node(baseline, train_env, prepared, tmp_path):
    """1 node x 2 "GPUs" through the SLURM launcher: accelerate launch --num_processes 2 with ddp.yaml on CPU."""
    out = tmp_path / "ddp"
    env, args = cluster_launch(train_env, prepared, out, "training.max_steps=2")
    run_checked(args, env)
    info = _check_distributed(out, baseline, 2, "DistributedDataParallel")
    assert info["distributed_type"] == "DistributedType.MULTI_CPU"


@pytest.mark.slow
def test_two_nodes_zero2_rendezvous_on_cpu(baseline, train_env, prepared, tmp_path):
    """2 emulated nodes x 1 process with zero2.yaml: each node its own launcher (SLURM_NODEID 0/1), meeting at the
    first host of the nodelist; DeepSpeed's `standard` multinode launcher is torchrun per node, as under srun."""
    pytest.importorskip("deepspeed", reason="DeepSpeed not installed (pip install -e '.[deepspeed]')")
    out = tmp_path / "multinode"
    procs = []
    for rank in (0, 1):
        # No ACCELERATE_USE_CPU for DeepSpeed: with it accelerate builds a MULTI_CPU state and silently drops
        # DeepSpeed.
        env, args = cluster_launch(
            train_env,
            prepared,
            out,
            "training.max_steps=2",
            "accelerate_config=zero2",
            nodes=2,
            gpus=1,
            rank=rank,
            job="778",
            cpu_env=False,
        )
        procs.append(
            subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    info = _check_distributed(out, baseline, 2, "DeepSpeedEngine")
    assert info["zero_stage"] == 2


@pytest.mark.slow
def test_deepspeed_zero3_two_processes(baseline, train_env, prepared, tmp_path):
    pytest.importorskip("deepspeed", reason="DeepSpeed not installed (pip install -e '.[deepspeed]')")
    out = tmp_path / "zero3"
    env, args = cluster_launch(
        train_env, prepared, out, "training.max_steps=2", "accelerate_config=zero3", job="779", cpu_env=False
    )
    run_checked(args, env)
    info = _check_distributed(out, baseline, 2, "DeepSpeedEngine")
    assert info["zero_stage"] == 3 and info["distributed_type"] == "DistributedType.DEEPSPEED"


@pytest.mark.slow
def test_fsdp_two_processes(baseline, train_env, prepared, tmp_path):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(
            "FSDP needs 2 GPUs: on CPU, accelerate 1.15 ignores the FSDP plugin (fsdp.yaml with "
            "ACCELERATE_USE_CPU gives distributed_type MULTI_CPU, model_wrapper DistributedDataParallel) and "
            "`accelerate launch --cpu` runs a single process; fsdp.yaml is checked by "
            "test_accelerate_config_loads_and_launches, and FSDP2 training on 2 CPU processes by "
            "tests/test_fsdp_loading.py (gloo state marked as GPUs)"
        )
    out = tmp_path / "fsdp"
    env, args = cluster_launch(
        train_env, prepared, out, "training.max_steps=2", "accelerate_config=fsdp", cpu_env=False
    )
    run_checked(args, env)
    info = json.loads((out / "run_info.json").read_text())
    assert info["distributed_type"] == "DistributedType.FSDP" and info["model_wrapper"].startswith("FSDP")


# ---------------------------------------------------------------------------------------------- failed launches


def _one_core():
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def test_launch_refuses_more_processes_than_cores_before_spawning(tmp_path):
    """A CPU job step with one core asked for 2 processes per node: one line, exit 2, no accelerate launch."""
    slurm = {"SLURM_JOB_ID": "812", "SLURM_JOB_NODELIST": "127.0.0.1", "SLURM_NNODES": "1", "SLURM_NODEID": "0"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "timealign.cluster",
            "launch",
            "task=dpo",
            "recipe=tiny",
            "processes_per_node=2",
            f"output_dir={tmp_path / 'run'}",
        ],
        cwd=REPO_ROOT,
        env=launcher_env(**slurm),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_one_core,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "error: 2 processes per node but this node has 1 CPU cores (this step's affinity): pass processes_per_node=1 "
        "or fewer (batch.global_size keeps the global batch), or ask Slurm for more (--cpus-per-task / --gres=gpu:N)"
    ]


@pytest.mark.slow
def test_failed_child_launch_ends_with_the_childs_error(tmp_path):
    """Issue 21/22: the cluster launcher's accelerate launch whose training stops (here the launch check: 2 "GPUs" on
    a CPU machine without use_cpu) ends with the child's one error, exit 2: no CalledProcessError / ChildFailedError
    traceback, no torchrun failure table, one message for two ranks."""
    slurm = {
        "SLURM_JOB_ID": "813",
        "SLURM_JOB_NODELIST": "127.0.0.1",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_GPUS_ON_NODE": "2",
    }
    args = ["recipe=tiny", "training.use_cpu=false", "data.synthetic_trajectories=8", f"output_dir={tmp_path / 'run'}"]
    proc = subprocess.run(
        [sys.executable, "-m", "timealign.cluster", "launch", "task=dpo", *args],
        cwd=REPO_ROOT,
        env=launcher_env(**slurm),
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-4000:]
    for noise in ("Traceback", "CalledProcessError", "ChildFailedError", "failed (exitcode"):
        assert noise not in text, (noise, text[-4000:])
    assert text.count("error: launch check (before loading the model)") == 1
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "To go on anyway: launch.check=warn (log this and train) or launch.check=off."
    )
