"""`python -m timealign.cluster ACTION recipe=NAME [key=value ...]`: launch, plan, submit or evaluate on SLURM.

Inside a SLURM job (slurm/dpo.sbatch and slurm/sft.sbatch run this once per node through `srun`):

    python -m timealign.cluster launch task=dpo recipe=llama8b [key=value ...] [accelerate_config=fsdp] [dry_run=true]

builds and runs (accelerate's launcher, in this process: a failed training ends with its own one-line error) this
node's `accelerate launch --config_file recipes/accelerate/<config>.yaml
--num_machines N --num_processes N*P --machine_rank R --main_process_ip A --main_process_port PORT
train/<task>.py recipe=... training.resume_from_checkpoint=auto`, where N and R come from SLURM_JOB_NODELIST
(`scontrol show hostnames`, else a built-in parser), SLURM_NNODES and SLURM_NODEID (SLURM_PROCID); P is one process
per GPU that Slurm allocated on the node (SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES), or
processes_per_node=; A is the first node's address as slurm/launch.sh resolved it there (TIMEALIGN_MAIN_ADDR), never
a bare node name that may not resolve; PORT is port=, MASTER_PORT, `launch.main_process_port`, or
the first port free on the first node from 20000 + job id % 12000 up (slurm/launch.sh asks `port` there).
A job without GPUs is refused unless the recipe asks for none (launch.gpus_per_node=0): then it is a CPU launch
(DDP over gloo) with processes_per_node processes per node (default 1).

    python -m timealign.cluster plan task=dpo nodes=2 gpus_per_node=4 recipe=llama8b   # every node's command
    python -m timealign.cluster plan recipe=llama8b gpu=l40s   # + memory per GPU / node: fits, or what would fit
    python -m timealign.cluster submit task=dpo recipe=llama8b [launch.nodes=2 ...] [dry_run=true]   # sbatch
    python -m timealign.cluster submit task=dpo recipe=tiny processes_per_node=2   # CPU-only (gpus_per_node 0)
    python -m timealign.cluster eval recipe=llama8b checkpoint=outputs/llama8b [serve=true] [dry_run=true]

`submit` turns the recipe's `launch` section (nodes, gpus_per_node, gpu_type, cpus_per_gpu, mem_per_gpu, partition,
account, time, requeue, signal_seconds) into an `sbatch` command line for slurm/<task>.sbatch
(`--gres=gpu[:TYPE]:N`, or `--gres=none` for 0 GPUs; `--mem` = processes per node x mem_per_gpu), after checking with
`sinfo` that nodes of the partition can hold it: Slurm would accept a job larger than any node and leave it PENDING
forever. Its `--signal=B:USR1@<signal_seconds>` also goes to the job as TIMEALIGN_SUBMIT_SIGNAL: Slurm 22.05 shows a
job's --signal only through sacct (accounting), and the trainer checks its saves against it. `eval` runs
eval/run.py on vLLM with tensor parallelism over the node's GPUs: the offline engine (eval.backend=vllm), or with
`serve=true` a `vllm serve` process plus the OpenAI-compatible backend; a job without GPUs uses the recipe's
eval.backend.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from timealign.cluster.accelerate import run_accelerate
from timealign.cluster.jobs import (
    eval_commands,
    log_dir,
    recipe_for,
    run_eval,
    sbatch_command,
    training_commands,
    vllm_missing,
)
from timealign.cluster.slurm import (
    DEFAULT_SERVE_PORT,
    check_devices,
    default_port,
    default_serve_port,
    free_port,
    gpus_on_node,
    node_address,
    plan_placement_env,
)
from timealign.config import REPO_ROOT, RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt

logger = logging.getLogger("timealign.cluster")


@dataclass
class ClusterOptions:
    task: str = opt("dpo", "launch/plan: dpo | sft; submit: dpo | sft | eval")
    dry_run: bool = opt(False, "print the commands, run nothing")
    accelerate_config: str | None = opt(
        None,
        "launch/plan: accelerate config name (recipes/accelerate/) or path; "
        "default: the recipe's launch.accelerate_config",
    )
    gpus_per_node: int | None = opt(
        None,
        "GPUs per node (launch: default what Slurm allocated; plan/submit: default "
        "launch.gpus_per_node); 0: a CPU-only job (submit: --gres=none)",
    )
    processes_per_node: int | None = opt(
        None, "launch/plan/submit: processes per node (default: one per GPU; on a CPU-only job 1)"
    )
    mem: str | None = opt(
        None,
        "submit: --mem per node, e.g. 200G (default: processes per node x the recipe's "
        "launch.mem_per_gpu), checked against the partition's nodes",
    )
    nodes: int | None = opt(None, "plan/submit: node count (default: the job's, else launch.nodes)")
    nodelist: str | None = opt(
        None, "plan: hostlist for the printout, e.g. gpu[01-02] (default: the job's, else node0..nodeN-1)"
    )
    port: int | None = opt(
        None,
        "launch/plan: rendezvous port (default: MASTER_PORT, launch.main_process_port, "
        "the first free from 20000 + job id % 12000); eval with serve=true: the "
        f"server's port (default: the first free from 10000 + job id % 10000, {DEFAULT_SERVE_PORT} "
        "outside a job)",
    )
    serve: bool = opt(False, "eval: start `vllm serve` and evaluate through the OpenAI-compatible backend")
    gpus: int | None = opt(None, "eval: tensor parallel size (default: the node's GPUs)")
    ready_timeout: float = opt(1800.0, "eval with serve=true: seconds to wait for the server")
    gpu: str | None = opt(
        None,
        "plan/submit/launch: the memory planner on this GPU (l40s | a100-40 | a100-80 | "
        "h100 | h200): per GPU and per node memory, fits or the change that fits; submit/launch "
        "stop (exit 2) when it does not fit",
    )
    memory_json: str | None = opt(
        None,
        "plan with gpu=: also write the estimate as JSON (per_gpu_bytes, host_bytes, fits, the parts) to this file",
    )


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
        "address": "print this node's address for the rendezvous (slurm/launch.sh runs it on the first node)",
        "port": "print a free rendezvous port on this node, from 20000 + job id % 12000 up (slurm/launch.sh)",
    },
    examples="\n".join(line for line in __doc__.splitlines() if line.startswith("    python -m")),
)


def _print_env(extra: dict[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items())


def _memory_plan(opts: ClusterOptions, args: list[str], *, nodes: int | None, gpus: int | None, check: bool) -> None:
    """gpu=: print the memory plan; with `check` (submit, launch) a plan that does not fit stops here."""
    if not opts.gpu:
        return
    from timealign.cluster.memory import plan_recipe, report

    est, fix = plan_recipe(
        recipe_for(args, opts.task),
        gpu=opts.gpu,
        nodes=nodes,
        gpus_per_node=gpus,
        accelerate_config=opts.accelerate_config,
        mem=opts.mem,
    )
    print(report(est, fix))
    if opts.memory_json:
        Path(opts.memory_json).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.memory_json).write_text(json.dumps(est.to_dict(), indent=2) + "\n")
    sys.stdout.flush()
    if check and not est.fits:
        raise RecipeError(
            f"gpu={opts.gpu}: the memory planner says this does not fit "
            f"({est.per_gpu_bytes / 2**30:.1f} GiB per GPU of {est.gpu_capacity / 2**30:.1f}, "
            f"host {est.host_bytes / 2**30:.0f} "
            f"GiB): "
            + (f"add {fix}" if fix else "use more GPUs or a smaller max_length")
            + ", or leave gpu= out to submit anyway"
        )


def _launch_or_plan(opts: ClusterOptions, args: list[str], env: Mapping[str, str], plan: bool) -> int:
    gpus = opts.gpus_per_node
    if plan:
        nodes = opts.nodes
        in_job = bool(env.get("SLURM_JOB_NODELIST"))
        if not (nodes and gpus is not None) and not in_job:
            launch = recipe_for(args, opts.task).launch
            nodes = nodes or launch.nodes
            gpus = launch.gpus_per_node if gpus is None else gpus
        env = plan_placement_env(nodes, gpus, opts.nodelist, env)
    if opts.gpu:
        _memory_plan(
            opts,
            args,
            nodes=int(env.get("SLURM_NNODES") or 0) or None,
            gpus=gpus if gpus is not None else gpus_on_node(env),
            check=not plan,
        )
    commands = training_commands(
        opts.task,
        args,
        env,
        config=opts.accelerate_config,
        gpus_per_node=gpus,
        processes_per_node=opts.processes_per_node,
        port=opts.port,
        all_nodes=plan,
    )
    if plan or opts.dry_run:
        first, _, extra = commands[0]
        kind = f"{first.gpus_per_node} GPU(s)" if first.gpus_per_node else "CPU only"
        print(
            f"# {first.num_machines} node(s) x {first.processes_per_node} process(es) ({kind}) = "
            f"{first.num_processes} processes; main process {first.main_process_ip}:{first.port}"
        )
        for where, cmd, extra in commands:
            print(f"# node {where.machine_rank} ({where.hosts[where.machine_rank]})")
            print(" ".join([*(f"{k}={shlex.quote(v)}" for k, v in extra.items()), shlex.join(cmd)]))
        sys.stdout.flush()
        return 0
    where, cmd, extra = commands[0]
    check_devices(where)  # before spawning: accelerate would start them all, each failing on its own
    kind = f"{where.gpus_per_node} GPU(s)" if where.gpus_per_node else "CPU only"
    logger.info(
        "node %d/%d (%s, %d process(es), main %s:%d): %s%s",
        where.machine_rank,
        where.num_machines,
        kind,
        where.processes_per_node,
        where.main_process_ip,
        where.port,
        _print_env(extra) + " " if extra else "",
        shlex.join(cmd),
    )
    sys.stdout.flush()
    sys.stderr.flush()
    return run_accelerate(cmd, {**env, **extra})  # a failed child ends with its own error line, no traceback


def _submit(opts: ClusterOptions, args: list[str]) -> int:
    _memory_plan(opts, args, nodes=opts.nodes, gpus=opts.gpus_per_node, check=True)
    extra, cmd = sbatch_command(
        opts.task,
        args,
        gpus=opts.gpus_per_node if opts.gpus is None else opts.gpus,
        nodes=opts.nodes,
        processes_per_node=opts.processes_per_node,
        mem=opts.mem,
    )
    print(f"{_print_env(extra)} {shlex.join(cmd)}")
    sys.stdout.flush()
    if opts.dry_run:
        return 0
    log_dir().mkdir(parents=True, exist_ok=True)
    return subprocess.call(cmd, env={**os.environ, **extra}, cwd=REPO_ROOT)


def _eval(opts: ClusterOptions, args: list[str], env: Mapping[str, str]) -> int:
    gpus = opts.gpus if opts.gpus is not None else gpus_on_node(env)
    if gpus is None:  # a Slurm job without GPUs is a CPU job; outside Slurm: one GPU, as before
        gpus = 0 if env.get("SLURM_JOB_ID") else 1
    if opts.port:
        port = opts.port
    elif opts.serve and not opts.dry_run:  # free now, on this node: never another job's rendezvous or server
        port = free_port(default_serve_port(env.get("SLURM_JOB_ID")))
    else:
        port = default_serve_port(env.get("SLURM_JOB_ID"))
    if opts.dry_run:
        server, run = eval_commands(args, gpus=gpus, serve=opts.serve, port=port, require_vllm=False)
        missing = vllm_missing(opts.serve) if server or "eval.backend=vllm" in run else None
        if missing:
            print(f"# warning: {missing}")
        if server:
            print(shlex.join(server))
        print(shlex.join(run))
        return 0
    if not gpus:
        logger.info("no GPUs in this job: evaluating with the recipe's eval.backend on CPU")
    return run_eval(args, gpus=gpus, serve=opts.serve, port=port, ready_timeout=opts.ready_timeout)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env

    def dispatch(inv: Invocation) -> int:
        opts, args = inv.options, inv.forwarded
        if inv.action in ("launch", "plan"):
            return _launch_or_plan(opts, args, env, plan=inv.action == "plan")
        if inv.action == "submit":
            return _submit(opts, args)
        if inv.action == "address":
            print(node_address(env.get("SLURMD_NODENAME")))
            return 0
        if inv.action == "port":
            print(free_port(opts.port or default_port(env.get("SLURM_JOB_ID"))))
            return 0
        return _eval(opts, args, env)

    return run_command(COMMAND, argv, dispatch, errors={RecipeError: 2, RuntimeError: 2})
