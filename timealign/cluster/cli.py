"""`python -m timealign.cluster ACTION recipe=NAME [key=value ...]`: launch, plan, submit or evaluate on SLURM.

Inside a SLURM job (slurm/dpo.sbatch and slurm/sft.sbatch run this once per node through `srun`):

    python -m timealign.cluster launch task=dpo recipe=llama8b [key=value ...] [accelerate_config=fsdp] [dry_run=true]

builds and runs (execs) this node's `accelerate launch --config_file recipes/accelerate/<config>.yaml
--num_machines N --num_processes N*G --machine_rank R --main_process_ip <first host> --main_process_port P
train/<task>.py recipe=... training.resume_from_checkpoint=auto`, where N, R and the first host come from
SLURM_JOB_NODELIST (`scontrol show hostnames`, else a built-in parser), SLURM_NNODES and SLURM_NODEID
(SLURM_PROCID), G from the allocation's GPUs on the node (SLURM_GPUS_ON_NODE, ...) and P from port=, MASTER_PORT,
`launch.main_process_port` or 20000 + job id % 12000.

    python -m timealign.cluster plan task=dpo nodes=2 gpus_per_node=4 recipe=llama8b   # every node's command
    python -m timealign.cluster submit task=dpo recipe=llama8b [launch.nodes=2 ...] [dry_run=true]   # sbatch
    python -m timealign.cluster eval recipe=llama8b checkpoint=outputs/llama8b [serve=true] [dry_run=true]

`submit` turns the recipe's `launch` section (nodes, gpus_per_node, gpu_type, partition, account, time, requeue,
signal_seconds) into an `sbatch` command line for slurm/<task>.sbatch. `eval` runs eval/run.py on vLLM with tensor
parallelism over the node's GPUs: the offline engine (eval.backend=vllm), or with `serve=true` a `vllm serve`
process plus the OpenAI-compatible backend.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping

from timealign.cluster.jobs import (
    LOG_DIR,
    eval_commands,
    recipe_for,
    run_eval,
    sbatch_command,
    training_commands,
)
from timealign.cluster.slurm import gpus_on_node, plan_placement_env
from timealign.config import REPO_ROOT, RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt

logger = logging.getLogger("timealign.cluster")

DEFAULT_SERVE_PORT = 8000


@dataclass
class ClusterOptions:
    task: str = opt("dpo", "launch/plan: dpo | sft; submit: dpo | sft | eval")
    dry_run: bool = opt(False, "print the commands, run nothing")
    accelerate_config: str | None = opt(None, "launch/plan: accelerate config name (recipes/accelerate/) or path; "
                                              "default: the recipe's launch.accelerate_config")
    gpus_per_node: int | None = opt(None, "processes per node (launch/plan: default the allocation's GPUs; "
                                          "submit: default launch.gpus_per_node)")
    nodes: int | None = opt(None, "plan/submit: node count (default: the job's, else launch.nodes)")
    nodelist: str | None = opt(None, "plan: hostlist for the printout, e.g. gpu[01-02] (default: the job's, "
                                     "else node0..nodeN-1)")
    port: int | None = opt(None, "launch/plan: rendezvous port (default: MASTER_PORT, launch.main_process_port, "
                                 f"job id); eval with serve=true: the server's port (default {DEFAULT_SERVE_PORT})")
    serve: bool = opt(False, "eval: start `vllm serve` and evaluate through the OpenAI-compatible backend")
    gpus: int | None = opt(None, "eval: tensor parallel size (default: the node's GPUs)")
    ready_timeout: float = opt(1800.0, "eval with serve=true: seconds to wait for the server")


COMMAND = Command(
    prog="python -m timealign.cluster",
    summary=__doc__.split("\n\n", 1)[0],
    options=ClusterOptions,
    forward=True,
    actions={
        "launch": "this node's accelerate launch (inside a SLURM job step, one per node)",
        "plan": "print every node's launch command (no SLURM needed)",
        "submit": "sbatch slurm/<task>.sbatch with the recipe's launch section",
        "eval": "eval/run.py on vLLM with tensor parallelism over this node's GPUs",
    },
    examples="\n".join(line for line in __doc__.splitlines() if line.startswith("    python -m")),
)


def _print_env(extra: dict[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items())


def _launch_or_plan(opts: ClusterOptions, args: list[str], env: Mapping[str, str], plan: bool) -> int:
    if plan:
        nodes = opts.nodes
        if not nodes and not env.get("SLURM_JOB_NODELIST"):
            nodes = recipe_for(args, opts.task).launch.nodes
        env = plan_placement_env(nodes, opts.gpus_per_node, opts.nodelist, env)
    commands = training_commands(opts.task, args, env, config=opts.accelerate_config,
                                 gpus_per_node=opts.gpus_per_node, port=opts.port, all_nodes=plan)
    if plan or opts.dry_run:
        first = commands[0][0]
        print(f"# {first.num_machines} node(s) x {first.gpus_per_node} GPU(s) = {first.num_processes} "
              f"processes; main process {first.main_process_ip}:{first.port}")
        for where, cmd in commands:
            print(f"# node {where.machine_rank} ({where.hosts[where.machine_rank]})")
            print(shlex.join(cmd))
        sys.stdout.flush()
        return 0
    where, cmd = commands[0]
    logger.info("node %d/%d: %s", where.machine_rank, where.num_machines, shlex.join(cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(cmd[0], cmd)
    return 0  # not reached


def _submit(opts: ClusterOptions, args: list[str]) -> int:
    extra, cmd = sbatch_command(opts.task, args, gpus=opts.gpus_per_node, nodes=opts.nodes)
    print(f"{_print_env(extra)} {shlex.join(cmd)}")
    if opts.dry_run:
        return 0
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return subprocess.call(cmd, env={**os.environ, **extra}, cwd=REPO_ROOT)


def _eval(opts: ClusterOptions, args: list[str], env: Mapping[str, str]) -> int:
    gpus = opts.gpus or gpus_on_node(env) or 1
    port = opts.port or DEFAULT_SERVE_PORT
    if opts.dry_run:
        server, run = eval_commands(args, gpus=gpus, serve=opts.serve, port=port)
        if server:
            print(shlex.join(server))
        print(shlex.join(run))
        return 0
    return run_eval(args, gpus=gpus, serve=opts.serve, port=port, ready_timeout=opts.ready_timeout)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env

    def dispatch(inv: Invocation) -> int:
        opts, args = inv.options, inv.forwarded
        if inv.action in ("launch", "plan"):
            return _launch_or_plan(opts, args, env, plan=inv.action == "plan")
        if inv.action == "submit":
            return _submit(opts, args)
        return _eval(opts, args, env)

    return run_command(COMMAND, argv, dispatch, errors={RecipeError: 2, RuntimeError: 2})
