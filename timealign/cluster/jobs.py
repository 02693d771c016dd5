"""What a cluster job runs: every node's training launch, the sbatch submission, and vLLM evaluation jobs.

Each function takes the user's recipe arguments (`recipe=NAME key=value ...`), loads the recipe once to fail early
(not in N x G processes), and returns the exact commands; `timealign.cluster.cli` prints or runs them.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import fields
from pathlib import Path
from typing import Mapping

import yaml

from timealign.cluster.accelerate import (
    accelerate_command,
    accelerate_config_path,
    venv_tool,
    with_accelerate_config,
    with_auto_resume,
)
from timealign.cluster.slurm import (
    Placement,
    SlurmQueryError,
    check_request,
    memory_mb,
    partition_info,
    placement,
)
from timealign.config import REPO_ROOT, Recipe, RecipeError, load_recipe
from timealign.config.cli import split_argv

logger = logging.getLogger(__name__)

TASK_SCRIPTS = {"dpo": "train/dpo.py", "sft": "train/sft.py"}
SBATCH_SCRIPTS = {"dpo": "slurm/dpo.sbatch", "sft": "slurm/sft.sbatch", "eval": "slurm/eval.sbatch"}


def log_dir() -> Path:
    """Where job logs and stop files go: $TIMEALIGN_LOG_DIR, else slurm/logs/ (as slurm/launch.sh)."""
    return Path(os.environ.get("TIMEALIGN_LOG_DIR") or REPO_ROOT / "slurm" / "logs")


def recipe_for(argv: list[str], task: str | None) -> Recipe:
    name, config, overrides = split_argv(argv)
    return load_recipe(name, overrides, task=task, config=config)


def eval_recipe(argv: list[str]) -> Recipe:
    """The recipe of an eval command line (eval/run.py's own keys and SUITE.KEY options left out)."""
    name, config, overrides = split_argv(argv)
    sections = {f.name for f in fields(Recipe)}
    return load_recipe(name, {k: v for k, v in overrides.items() if k.split(".", 1)[0] in sections}, config=config)


def training_commands(
    task: str,
    argv: list[str],
    env: Mapping[str, str],
    *,
    config: str | None = None,
    gpus_per_node: int | None = None,
    processes_per_node: int | None = None,
    port: int | None = None,
    all_nodes: bool = False,
) -> list[tuple[Placement, list[str], dict[str, str]]]:
    """[(placement, command, extra environment)] for this node, or for every node of the job with all_nodes."""
    if task not in TASK_SCRIPTS:
        raise RecipeError(f"unknown task {task!r}; known: {', '.join(TASK_SCRIPTS)}")
    recipe = recipe_for(argv, task)  # fail here, once, not in N x G processes
    config_path = accelerate_config_path(config or recipe.launch.accelerate_config)
    where = placement(
        env,
        gpus_per_node=gpus_per_node,
        processes_per_node=processes_per_node,
        port=port,
        recipe_gpus=recipe.launch.gpus_per_node,
        recipe_port=recipe.launch.main_process_port,
    )
    extra = launch_env(where, config_path)
    ranks = range(where.num_machines) if all_nodes else [where.machine_rank]
    return [
        (
            where.node(rank),
            accelerate_command(
                REPO_ROOT / TASK_SCRIPTS[task],
                with_accelerate_config(with_auto_resume(argv), config),
                config=config_path,
                where=where.node(rank),
            ),
            extra,
        )
        for rank in ranks
    ]


def launch_env(where: Placement, config_path: Path) -> dict[str, str]:
    """What the accelerate launch needs in its environment: on a CPU-only job, ACCELERATE_USE_CPU for DDP (gloo);
    without it N processes would each train alone. DeepSpeed runs on CPU as configured; FSDP needs GPUs."""
    if not where.use_cpu:
        return {}
    kind = str((yaml.safe_load(Path(config_path).read_text()) or {}).get("distributed_type", ""))
    if kind == "FSDP":
        raise RuntimeError(
            f"{config_path.name} is FSDP, which needs GPUs, and this job has none (CPU launch): use "
            "accelerate_config=ddp or zero2/zero3, or request GPUs"
        )
    return {} if kind == "DEEPSPEED" else {"ACCELERATE_USE_CPU": "true"}


def sbatch_command(
    task: str,
    argv: list[str],
    *,
    gpus: int | None = None,
    nodes: int | None = None,
    processes_per_node: int | None = None,
    mem: str | None = None,
    check: bool = True,
) -> tuple[dict[str, str], list[str]]:
    """(extra environment, sbatch argv) for slurm/<task>.sbatch from the recipe's launch section.

    GPUs per node: `gpus`, else launch.gpus_per_node (eval: eval.tensor_parallel_size), as `--gres=gpu[:TYPE]:N`;
    0 is a CPU-only job (`--gres=none`, processes_per_node CPU processes per node). Memory: `mem`, else processes
    per node x launch.mem_per_gpu (`--mem` per node). With `check` and `sinfo` on PATH,
    a request no node of the partition can hold fails here instead of pending forever.
    """
    if task not in SBATCH_SCRIPTS:
        raise RecipeError(f"unknown task {task!r}; known: {', '.join(SBATCH_SCRIPTS)}")
    recipe = eval_recipe(argv) if task == "eval" else recipe_for(argv, task)
    launch = recipe.launch
    if task == "eval":
        nodes = 1
        if gpus is None:
            gpus = 0 if launch.gpus_per_node == 0 else max(1, recipe.eval.tensor_parallel_size)
    nodes = nodes or launch.nodes
    gpus = launch.gpus_per_node if gpus is None else gpus
    if gpus < 0 or nodes < 1 or (processes_per_node is not None and processes_per_node < 1):
        raise RecipeError(
            f"nodes={nodes}, gpus per node={gpus}, processes_per_node={processes_per_node}: need >= 1, >= 0 and >= 1"
        )
    if gpus:
        gres = f"gpu:{launch.gpu_type}:{gpus}" if launch.gpu_type else f"gpu:{gpus}"
    else:
        gres = "none"  # `--gres=` (empty) is refused by sbatch
    processes = processes_per_node or gpus or 1
    cpus = processes * launch.cpus_per_gpu
    if mem is None and launch.mem_per_gpu:  # every process holds its own copy of the weights while loading
        mem = node_memory(launch.mem_per_gpu, processes)
    if check and shutil.which("sinfo"):
        try:
            info = partition_info(launch.partition)
        except SlurmQueryError as error:  # no controller reachable from here: sbatch will say more
            logger.warning("could not check the request against the partition's nodes: %s", error)
        else:
            check_request(
                info,
                nodes=nodes,
                gpus_per_node=gpus,
                gpu_type=launch.gpu_type,
                cpus_per_task=cpus,
                time=launch.time,
                mem=mem,
            )
    cmd = [
        "sbatch",
        f"--job-name=timealign-{task}-{recipe.name}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--gres={gres}",
        f"--cpus-per-task={cpus}",
        f"--time={launch.time}",
        f"--output={log_dir()}/%x-%j.out",
        "--open-mode=append",
    ]
    if mem:
        cmd.append(f"--mem={mem}")
    if launch.partition:
        cmd.append(f"--partition={launch.partition}")
    if launch.account:
        cmd.append(f"--account={launch.account}")
    if launch.requeue:
        cmd += ["--requeue", f"--signal=B:USR1@{launch.signal_seconds}"]
    else:
        cmd.append("--no-requeue")
    script_args = list(argv)
    if processes_per_node is not None and task != "eval":
        script_args.append(f"processes_per_node={processes_per_node}")
    if gpus == 0 and task == "eval":
        script_args.append("gpus=0")
    cmd += [str(REPO_ROOT / SBATCH_SCRIPTS[task]), *script_args]
    extra = {
        "TIMEALIGN_ROOT": str(REPO_ROOT),
        "TIMEALIGN_REQUEUE": "1" if launch.requeue else "0",
        "TIMEALIGN_MAX_REQUEUES": str(launch.max_requeues),
    }
    if launch.requeue:  # Slurm 22.05 shows a job's --signal nowhere but in sacct (accounting): tell the trainer
        extra["TIMEALIGN_SUBMIT_SIGNAL"] = f"B:USR1@{launch.signal_seconds}"
    if launch.setup:
        extra["TIMEALIGN_SETUP"] = launch.setup
    return extra, cmd


def node_memory(per_process: str, processes: int) -> str:
    """`processes` x a `--mem`-style size, as a `--mem` value (in G when whole gigabytes, else M)."""
    total = memory_mb(per_process) * processes
    return f"{total // 1024}G" if total % 1024 == 0 else f"{total}M"


def arg_value(argv: list[str], key: str) -> str | None:
    for arg in argv:
        if arg.startswith(key + "="):
            return arg.split("=", 1)[1]
    return None


VLLM_MISSING = (
    "vLLM is not installed for {python}: install it as docs/cluster.md says (`pip install -e '.[vllm]'`, "
    "or its own environment and TIMEALIGN_PYTHON=that/bin/python), or evaluate without it: "
    "eval.backend=hf"
)


def vllm_missing(serve: bool) -> str | None:
    """Why the vLLM path cannot run with this interpreter, or None when it can."""
    if serve:
        if shutil.which(venv_tool("vllm")):
            return None
        return VLLM_MISSING.format(python=sys.executable).replace("eval.backend=hf", "serve=false eval.backend=hf")
    return None if importlib.util.find_spec("vllm") else VLLM_MISSING.format(python=sys.executable)


def eval_commands(
    argv: list[str],
    *,
    gpus: int,
    serve: bool = False,
    port: int = 8000,
    served_name: str = "timealign",
    require_vllm: bool = True,
) -> tuple[list[str] | None, list[str]]:
    """(vllm serve command or None, eval/run.py command) for a vLLM evaluation with tensor parallelism `gpus`.

    gpus 0 (a CPU-only job): the recipe's eval.backend as it is (tiny: hf), nothing forced. Fails early, with the
    way out, when the chosen vLLM path is not installed.
    """
    recipe = eval_recipe(argv)
    run = [sys.executable, str(REPO_ROOT / "eval" / "run.py"), *argv]
    if not serve:
        backend = arg_value(argv, "eval.backend") or ("vllm" if gpus else recipe.eval.backend)
        if arg_value(argv, "eval.backend") is None and gpus:
            run.append("eval.backend=vllm")
        if arg_value(argv, "eval.tensor_parallel_size") is None and gpus:
            run.append(f"eval.tensor_parallel_size={gpus}")
        if require_vllm and backend == "vllm" and vllm_missing(serve=False):
            raise RuntimeError(vllm_missing(serve=False))
        return None, run
    checkpoint = arg_value(argv, "checkpoint") or recipe.model.name_or_path
    tp = arg_value(argv, "eval.tensor_parallel_size") or str(max(1, gpus))
    adapter = Path(checkpoint) / "adapter_config.json"
    server = [venv_tool("vllm"), "serve"]
    if require_vllm and vllm_missing(serve=True):
        raise RuntimeError(vllm_missing(serve=True))
    if adapter.is_file():  # LoRA: serve the base with the adapter under `served_name`
        info = json.loads(adapter.read_text())
        server += [
            info["base_model_name_or_path"],
            "--enable-lora",
            "--lora-modules",
            f"{served_name}={checkpoint}",
            "--max-lora-rank",
            str(info.get("r", 16)),
        ]
    else:
        server += [checkpoint, "--served-model-name", served_name]
    server += [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tensor-parallel-size",
        tp,
        "--gpu-memory-utilization",
        str(recipe.eval.gpu_memory_utilization),
    ]
    if recipe.eval.max_model_len:
        server += ["--max-model-len", str(recipe.eval.max_model_len)]
    if recipe.eval.enforce_eager:
        server.append("--enforce-eager")
    if recipe.model.trust_remote_code:
        server.append("--trust-remote-code")
    run += ["eval.backend=openai", f"eval.base_url=http://127.0.0.1:{port}/v1", f"eval.served_model={served_name}"]
    return server, run


def wait_for_server(url: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(5)
    raise RuntimeError(f"vllm serve not ready at {url} after {timeout:.0f} s")


def run_eval(argv: list[str], *, gpus: int, serve: bool, port: int, ready_timeout: float) -> int:
    server_cmd, eval_cmd = eval_commands(argv, gpus=gpus, serve=serve, port=port)
    if server_cmd is None:
        return subprocess.call(eval_cmd)
    server = subprocess.Popen(server_cmd, start_new_session=True)
    try:
        wait_for_server(f"http://127.0.0.1:{port}/health", server, ready_timeout)
        return subprocess.call(eval_cmd)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
