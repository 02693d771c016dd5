"""What a cluster job runs: every node's training launch, the sbatch submission, and vLLM evaluation jobs.

Each function takes the user's recipe arguments (`recipe=NAME key=value ...`), loads the recipe once to fail early
(not in N x G processes), and returns the exact commands; `timealign.cluster.cli` prints or runs them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import fields
from pathlib import Path
from typing import Mapping

from timealign.cluster.accelerate import accelerate_command, accelerate_config_path, venv_tool, with_auto_resume
from timealign.cluster.slurm import Placement, placement
from timealign.config import REPO_ROOT, Recipe, RecipeError, load_recipe
from timealign.config.cli import split_argv

TASK_SCRIPTS = {"dpo": "train/dpo.py", "sft": "train/sft.py"}
SBATCH_SCRIPTS = {"dpo": "slurm/dpo.sbatch", "sft": "slurm/sft.sbatch", "eval": "slurm/eval.sbatch"}
LOG_DIR = REPO_ROOT / "slurm" / "logs"


def recipe_for(argv: list[str], task: str | None) -> Recipe:
    name, config, overrides = split_argv(argv)
    return load_recipe(name, overrides, task=task, config=config)


def eval_recipe(argv: list[str]) -> Recipe:
    """The recipe of an eval command line (eval/run.py's own keys and SUITE.KEY options left out)."""
    name, config, overrides = split_argv(argv)
    sections = {f.name for f in fields(Recipe)}
    return load_recipe(name, {k: v for k, v in overrides.items() if k.split(".", 1)[0] in sections},
                       config=config)


def training_commands(task: str, argv: list[str], env: Mapping[str, str], *, config: str | None = None,
                      gpus_per_node: int | None = None, port: int | None = None,
                      all_nodes: bool = False) -> list[tuple[Placement, list[str]]]:
    """[(placement, command)] for this node, or for every node of the job with all_nodes."""
    if task not in TASK_SCRIPTS:
        raise RecipeError(f"unknown task {task!r}; known: {', '.join(TASK_SCRIPTS)}")
    recipe = recipe_for(argv, task)  # fail here, once, not in N x G processes
    config_path = accelerate_config_path(config or recipe.launch.accelerate_config)
    where = placement(env, gpus_per_node=gpus_per_node, port=port, recipe_gpus=recipe.launch.gpus_per_node,
                      recipe_port=recipe.launch.main_process_port)
    ranks = range(where.num_machines) if all_nodes else [where.machine_rank]
    out = []
    for rank in ranks:
        node = Placement(where.hosts, rank, where.gpus_per_node, where.port, where.job_id)
        out.append((node, accelerate_command(REPO_ROOT / TASK_SCRIPTS[task], with_auto_resume(argv),
                                             config=config_path, where=node)))
    return out


def sbatch_command(task: str, argv: list[str], *, gpus: int | None = None, nodes: int | None = None
                   ) -> tuple[dict[str, str], list[str]]:
    """(extra environment, sbatch argv) for slurm/<task>.sbatch from the recipe's launch section."""
    if task not in SBATCH_SCRIPTS:
        raise RecipeError(f"unknown task {task!r}; known: {', '.join(SBATCH_SCRIPTS)}")
    recipe = eval_recipe(argv) if task == "eval" else recipe_for(argv, task)
    launch = recipe.launch
    if task == "eval":
        nodes = 1
        gpus = gpus or max(1, recipe.eval.tensor_parallel_size)
    nodes = nodes or launch.nodes
    gpus = gpus or launch.gpus_per_node
    gres = f"gpu:{launch.gpu_type}:{gpus}" if launch.gpu_type else f"gpu:{gpus}"
    cmd = ["sbatch", f"--job-name=timealign-{task}-{recipe.name}", f"--nodes={nodes}", "--ntasks-per-node=1",
           f"--gres={gres}", f"--cpus-per-task={gpus * launch.cpus_per_gpu}", f"--time={launch.time}",
           f"--output={LOG_DIR}/%x-%j.out", "--open-mode=append"]
    if launch.partition:
        cmd.append(f"--partition={launch.partition}")
    if launch.account:
        cmd.append(f"--account={launch.account}")
    if launch.requeue:
        cmd += ["--requeue", f"--signal=B:USR1@{launch.signal_seconds}"]
    else:
        cmd.append("--no-requeue")
    cmd += [str(REPO_ROOT / SBATCH_SCRIPTS[task]), *argv]
    extra = {"TIMEALIGN_ROOT": str(REPO_ROOT), "TIMEALIGN_REQUEUE": "1" if launch.requeue else "0",
             "TIMEALIGN_MAX_REQUEUES": str(launch.max_requeues)}
    if launch.setup:
        extra["TIMEALIGN_SETUP"] = launch.setup
    return extra, cmd


def arg_value(argv: list[str], key: str) -> str | None:
    for arg in argv:
        if arg.startswith(key + "="):
            return arg.split("=", 1)[1]
    return None


def eval_commands(argv: list[str], *, gpus: int, serve: bool = False, port: int = 8000,
                  served_name: str = "timealign") -> tuple[list[str] | None, list[str]]:
    """(vllm serve command or None, eval/run.py command) for a vLLM evaluation with tensor parallelism `gpus`."""
    recipe = eval_recipe(argv)
    run = [sys.executable, str(REPO_ROOT / "eval" / "run.py"), *argv]
    if not serve:
        if arg_value(argv, "eval.backend") is None:
            run.append("eval.backend=vllm")
        if arg_value(argv, "eval.tensor_parallel_size") is None:
            run.append(f"eval.tensor_parallel_size={gpus}")
        return None, run
    checkpoint = arg_value(argv, "checkpoint") or recipe.model.name_or_path
    tp = arg_value(argv, "eval.tensor_parallel_size") or str(gpus)
    adapter = Path(checkpoint) / "adapter_config.json"
    server = [venv_tool("vllm"), "serve"]
    if adapter.is_file():  # LoRA: serve the base with the adapter under `served_name`
        info = json.loads(adapter.read_text())
        server += [info["base_model_name_or_path"], "--enable-lora", "--lora-modules", f"{served_name}={checkpoint}",
                   "--max-lora-rank", str(info.get("r", 16))]
    else:
        server += [checkpoint, "--served-model-name", served_name]
    server += ["--host", "127.0.0.1", "--port", str(port), "--tensor-parallel-size", tp,
               "--gpu-memory-utilization", str(recipe.eval.gpu_memory_utilization)]
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
