"""The SLURM environment: hostlists, GPUs on the node, the rendezvous port, and this node's place in the job."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

DEFAULT_PORT = 29500


def _split_top_level(expr: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _expand_one(part: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", part)
    if not match:
        return [part]
    prefix, body, rest = part[:match.start()], match.group(1), part[match.end():]
    tails = _expand_one(rest)
    out = []
    for item in body.split(","):
        item = item.strip()
        if "-" in item:
            lo, hi = item.split("-", 1)
            values = [str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1)]
        else:
            values = [item]
        out += [prefix + value + tail for value in values for tail in tails]
    return out


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist expression -> host names, in order: `gpu[01-03,07],login1` -> gpu01 gpu02 gpu03 gpu07 login1.

    Zero padding is kept (`n[08-10]` -> n08 n09 n10); several bracket groups expand as a product (`r[1-2]n[1-2]`).
    """
    hosts: list[str] = []
    for part in _split_top_level(expr):
        hosts += _expand_one(part)
    return hosts


def hostnames(nodelist: str) -> list[str]:
    """`scontrol show hostnames NODELIST` where scontrol works, else the built-in parser."""
    if shutil.which("scontrol"):
        try:
            proc = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                                  timeout=30)
            names = proc.stdout.split()
            if proc.returncode == 0 and names:
                return names
        except (OSError, subprocess.SubprocessError):
            pass
    return expand_hostlist(nodelist)


def _count_list(value: str | None) -> int | None:
    if not value or value.strip() in ("", "NoDevFiles"):
        return None
    return len([v for v in value.split(",") if v.strip()])


def gpus_on_node(env: Mapping[str, str]) -> int | None:
    """GPUs allocated on this node: SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE (`a100:4`), SLURM_JOB_GPUS,
    CUDA_VISIBLE_DEVICES; None when nothing says."""
    value = env.get("SLURM_GPUS_ON_NODE", "").strip()
    if value.isdigit():
        return int(value)
    match = re.match(r"^(?:[^:,(]*:)*(\d+)", env.get("SLURM_GPUS_PER_NODE", "").strip())
    if match:
        return int(match.group(1))
    for key in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        count = _count_list(env.get(key))
        if count:
            return count
    return None


def default_port(job_id: str | None) -> int:
    """20000 + job id % 12000: two jobs sharing a node rarely collide, and it stays below the ephemeral range."""
    if job_id and str(job_id).isdigit():
        return 20000 + int(job_id) % 12000
    return DEFAULT_PORT


@dataclass
class Placement:
    """Where this launcher runs: the job's hosts, this node's rank, GPUs per node, the rendezvous port."""

    hosts: list[str]
    machine_rank: int
    gpus_per_node: int
    port: int
    job_id: str | None = None

    @property
    def num_machines(self) -> int:
        return len(self.hosts)

    @property
    def num_processes(self) -> int:
        return self.num_machines * self.gpus_per_node

    @property
    def main_process_ip(self) -> str:
        return self.hosts[0]


def placement(env: Mapping[str, str], *, gpus_per_node: int | None = None, port: int | None = None,
              recipe_gpus: int | None = None, recipe_port: int | None = None) -> Placement:
    """This node's placement from SLURM env vars (outside SLURM: one local node).

    GPUs per node: the explicit value, else the allocation's, else the recipe's `launch.gpus_per_node`.
    Port: the explicit value, else MASTER_PORT, else the recipe's `launch.main_process_port`, else by job id.
    """
    job_id = env.get("SLURM_JOB_ID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if job_id and nodelist:
        hosts = hostnames(nodelist)
        expected = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
        if expected and expected.isdigit() and int(expected) != len(hosts):
            raise RuntimeError(f"SLURM_JOB_NODELIST={nodelist!r} names {len(hosts)} hosts but SLURM_NNODES={expected}")
        rank_text = env.get("SLURM_NODEID") or env.get("SLURM_PROCID") or "0"
        tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
        if tasks and tasks.isdigit() and int(tasks) > len(hosts):
            raise RuntimeError(f"{tasks} tasks on {len(hosts)} nodes: run one launcher per node "
                               "(srun --ntasks-per-node=1); accelerate starts the per-GPU processes")
    else:
        hosts, rank_text = ["127.0.0.1"], "0"
    machine_rank = int(rank_text)
    if not 0 <= machine_rank < len(hosts):
        raise RuntimeError(f"machine rank {machine_rank} outside the {len(hosts)} nodes of the job")
    gpus = gpus_per_node or gpus_on_node(env) or recipe_gpus
    if not gpus:
        raise RuntimeError("cannot tell how many GPUs this node has: pass --gpus-per-node or set launch.gpus_per_node")
    master_port = env.get("MASTER_PORT", "")
    chosen_port = port or (int(master_port) if master_port.isdigit() else None) or recipe_port or default_port(job_id)
    return Placement(hosts=hosts, machine_rank=machine_rank, gpus_per_node=int(gpus), port=int(chosen_port),
                     job_id=job_id)


def plan_placement_env(nodes: int, gpus_per_node: int, nodelist: str | None, env: Mapping[str, str]) -> dict:
    """A SLURM-like env for `plan` outside a job: node0..node{N-1} unless a nodelist is given."""
    fake = dict(env)
    if nodes and (not env.get("SLURM_JOB_NODELIST") or nodelist):
        names = nodelist or ",".join(f"node{i}" for i in range(nodes))
        fake.update(SLURM_JOB_ID=env.get("SLURM_JOB_ID", "0"), SLURM_JOB_NODELIST=names, SLURM_NNODES=str(nodes),
                    SLURM_NODEID="0")
        fake.pop("SLURM_STEP_NUM_TASKS", None)
        fake.pop("SLURM_NTASKS", None)
    if gpus_per_node:
        fake["SLURM_GPUS_ON_NODE"] = str(gpus_per_node)
    return fake
