"""The SLURM environment: hostlists, GPUs on the node, the rendezvous port, and this node's place in the job."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, replace
from typing import Mapping

DEFAULT_PORT = 29500
DEFAULT_SERVE_PORT = 8000
MAIN_PORT_ENV = "TIMEALIGN_MAIN_PORT"  # the rendezvous port slurm/launch.sh found free on the first node


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
    prefix, body, rest = part[: match.start()], match.group(1), part[match.end() :]
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
            proc = subprocess.run(
                ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
            )
            names = proc.stdout.split()
            if proc.returncode == 0 and names:
                return names
        except (OSError, subprocess.SubprocessError):
            pass
    return expand_hostlist(nodelist)


def _count_list(value: str | None) -> int | None:
    if value is None or value.strip() in ("", "NoDevFiles"):
        return None
    return len([v for v in value.split(",") if v.strip()])


def gpus_on_node(env: Mapping[str, str]) -> int | None:
    """GPUs allocated on this node: SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE (`a100:4`), SLURM_JOB_GPUS,
    CUDA_VISIBLE_DEVICES; None when nothing says (0 only when Slurm says 0)."""
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


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity: what Slurm's --cpus-per-task gave it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_devices(where: Placement) -> None:
    """Before spawning: no more processes on this node than it has GPUs (a GPU launch on a machine where torch sees
    some) or CPU cores (a CPU launch, or no CUDA here). One RuntimeError line; accelerate would start them all."""
    import torch

    if where.use_cpu or not torch.cuda.is_available():
        devices, what = usable_cores(), "CPU cores (this step's affinity)"
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices, what = torch.cuda.device_count(), "GPUs" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible else "")
    if not (where.use_cpu or not torch.cuda.is_available()) and usable_cores() < where.processes_per_node:
        logging.getLogger("timealign.cluster").warning(
            "%d GPU processes share %d CPU core(s) on this node (a job without --cpus-per-task gets one): data "
            "loading and the launcher will crawl; submit with --cpus-per-task=<processes x launch.cpus_per_gpu> "
            "(`python -m timealign.cluster submit` does)",
            where.processes_per_node,
            usable_cores(),
        )
    if where.processes_per_node > devices:
        raise RuntimeError(
            f"{where.processes_per_node} processes per node but this node has {devices} {what}: pass "
            f"processes_per_node={devices} or fewer (batch.global_size keeps the global batch), or "
            "ask Slurm for more (--cpus-per-task / --gres=gpu:N)"
        )


def default_port(job_id: str | None) -> int:
    """The rendezvous port a job prefers: 20000 + job id % 12000 (20000-31999, below the ephemeral range)."""
    if job_id and str(job_id).isdigit():
        return 20000 + int(job_id) % 12000
    return DEFAULT_PORT


def default_serve_port(job_id: str | None) -> int:
    """The `vllm serve` port an eval job prefers: 10000 + job id % 10000 (10000-19999), a range of its own, so an
    eval job never prefers the rendezvous port of a training job (job J + 1 used to take J's serve port)."""
    if job_id and str(job_id).isdigit():
        return 10000 + int(job_id) % 10000
    return DEFAULT_SERVE_PORT


def port_is_free(port: int, host: str = "") -> bool:
    """Whether a TCP socket can listen on `port` on this node now (all interfaces, as torchrun's store and vLLM)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(preferred: int, tries: int = 200) -> int:
    """`preferred` if nothing on this node listens there, else the next free one above it (wrapping inside the
    same 10000-port block): two jobs of a user on one node never share a port, even when their job ids map to the
    same preferred port or another program holds it."""
    base = preferred - preferred % 10000
    for i in range(tries):
        port = base + (preferred - base + i) % 10000
        if port_is_free(port):
            return port
    raise RuntimeError(
        f"no free port in {tries} tries from {preferred} on this node: set launch.main_process_port "
        "(training) or port= (eval serve)"
    )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def slurm_node_address(node: str) -> str | None:
    """The node's NodeAddr in Slurm (`scontrol show node -o NODE`): the address slurmctld reaches it at."""
    if not shutil.which("scontrol"):
        return None
    proc = subprocess.run(["scontrol", "show", "node", "--oneliner", node], capture_output=True, text=True, timeout=30)
    match = re.search(r"\bNodeAddr=(\S+)", proc.stdout) if proc.returncode == 0 else None
    return match.group(1) if match else None


def node_address(node: str | None = None) -> str:
    """The address other nodes reach this node at (run it on that node: `srun -w NODE python -m timealign.cluster
    address`): Slurm's NodeAddr when it is an IP address, else the first non-loopback address its name resolves
    to here, else the first of `hostname -I`. Never the bare node name: it need not resolve on the other nodes."""
    node = node or socket.gethostname()
    addr = slurm_node_address(node)
    if addr and _is_ip(addr):
        return addr
    candidates = []
    for name in (addr, node, socket.getfqdn()):
        if not name:
            continue
        try:
            candidates += [info[4][0] for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)]
        except OSError:
            continue
    if shutil.which("hostname"):
        proc = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=30)
        candidates += proc.stdout.split() if proc.returncode == 0 else []
    usable = [c for c in candidates if _is_ip(c) and not ipaddress.ip_address(c).is_loopback]
    usable.sort(key=lambda c: ipaddress.ip_address(c).version)  # IPv4 first
    if not usable:
        raise RuntimeError(
            f"no address of node {node!r} other nodes could reach (NodeAddr={addr}, "
            f"resolved: {candidates or 'nothing'}): set TIMEALIGN_MAIN_ADDR"
        )
    return usable[0]


@dataclass
class Placement:
    """Where this launcher runs: the job's hosts, this node's rank, processes and GPUs per node, the rendezvous.

    gpus_per_node 0 is a CPU-only launch (processes_per_node CPU processes, gloo).
    """

    hosts: list[str]
    machine_rank: int
    processes_per_node: int
    port: int
    job_id: str | None = None
    gpus_per_node: int = 0
    main_address: str | None = None

    @property
    def num_machines(self) -> int:
        return len(self.hosts)

    @property
    def num_processes(self) -> int:
        return self.num_machines * self.processes_per_node

    @property
    def use_cpu(self) -> bool:
        return self.gpus_per_node == 0

    @property
    def main_process_ip(self) -> str:
        return self.main_address or self.hosts[0]

    def node(self, rank: int) -> Placement:
        return replace(self, machine_rank=rank)


NO_GPUS = (
    "Slurm gave this job no GPUs (SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS and CUDA_VISIBLE_DEVICES are unset) "
    "but the recipe's launch.gpus_per_node is {gpus}: submit with --gres=gpu:{gpus} (or --gpus-per-node={gpus}"
    ", or `python -m timealign.cluster submit`), pass gpus_per_node=N if your cluster shows every GPU without "
    "a request, or run on CPU with launch.gpus_per_node=0 [processes_per_node=N]"
)


def placement(
    env: Mapping[str, str],
    *,
    gpus_per_node: int | None = None,
    processes_per_node: int | None = None,
    port: int | None = None,
    recipe_gpus: int | None = None,
    recipe_port: int | None = None,
    main_address: str | None = None,
) -> Placement:
    """This node's placement from SLURM env vars (outside SLURM: one local node).

    GPUs per node: the explicit value, else (in a job) what Slurm allocated, else (outside a job) the recipe's
    `launch.gpus_per_node`. A job without GPUs runs on CPU only when the recipe asks for 0 GPUs; it never falls back
    to the recipe's GPU count. Processes per node: the explicit value, else one per GPU, else (CPU) 1.
    Port: the explicit value, else MASTER_PORT, else the recipe's `launch.main_process_port`, else
    TIMEALIGN_MAIN_PORT (slurm/launch.sh: `free_port` on the first node), else by job id (`default_port`).
    Main address: the explicit value, else TIMEALIGN_MAIN_ADDR (slurm/launch.sh resolves it on the first node),
    else 127.0.0.1 for one node, else the first node's NodeAddr when that is an IP address, else its name.
    """
    job_id = env.get("SLURM_JOB_ID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    in_job = bool(job_id and nodelist)
    if in_job:
        hosts = hostnames(nodelist)
        expected = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
        if expected and expected.isdigit() and int(expected) != len(hosts):
            raise RuntimeError(f"SLURM_JOB_NODELIST={nodelist!r} names {len(hosts)} hosts but SLURM_NNODES={expected}")
        rank_text = env.get("SLURM_NODEID") or env.get("SLURM_PROCID") or "0"
        tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
        if tasks and tasks.isdigit() and int(tasks) > len(hosts):
            raise RuntimeError(
                f"{tasks} tasks on {len(hosts)} nodes: run one launcher per node "
                "(srun --ntasks-per-node=1); accelerate starts the per-GPU processes"
            )
    else:
        hosts, rank_text = ["127.0.0.1"], "0"
    machine_rank = int(rank_text)
    if not 0 <= machine_rank < len(hosts):
        raise RuntimeError(f"machine rank {machine_rank} outside the {len(hosts)} nodes of the job")
    gpus = gpus_per_node
    if gpus is None:
        gpus = gpus_on_node(env) if in_job else recipe_gpus
    if gpus is None:
        if recipe_gpus:
            raise RuntimeError(NO_GPUS.format(gpus=recipe_gpus))
        gpus = 0
    if gpus < 0 or (processes_per_node is not None and processes_per_node < 1):
        raise RuntimeError(f"gpus_per_node={gpus}, processes_per_node={processes_per_node}: need >= 0 and >= 1")
    if gpus == 0 and recipe_gpus and gpus_per_node is None:
        raise RuntimeError(NO_GPUS.format(gpus=recipe_gpus))
    processes = processes_per_node or gpus or 1
    if gpus and processes > gpus:
        raise RuntimeError(
            f"processes_per_node={processes} but the node has {gpus} GPU(s): at most one process per GPU"
        )
    master_port = env.get("MASTER_PORT", "")
    found = env.get(MAIN_PORT_ENV, "")
    chosen_port = (
        port
        or (int(master_port) if master_port.isdigit() else None)
        or recipe_port
        or (int(found) if found.isdigit() else None)
        or default_port(job_id)
    )
    address = main_address or env.get("TIMEALIGN_MAIN_ADDR") or None
    if address is None and len(hosts) == 1:
        address = "127.0.0.1"
    if address is None and in_job:
        slurm_addr = slurm_node_address(hosts[0])
        address = slurm_addr if slurm_addr and _is_ip(slurm_addr) else None
    return Placement(
        hosts=hosts,
        machine_rank=machine_rank,
        processes_per_node=int(processes),
        port=int(chosen_port),
        job_id=job_id,
        gpus_per_node=int(gpus),
        main_address=address,
    )


def plan_placement_env(nodes: int, gpus_per_node: int | None, nodelist: str | None, env: Mapping[str, str]) -> dict:
    """A SLURM-like env for `plan` outside a job: node0..node{N-1} unless a nodelist is given."""
    fake = dict(env)
    if nodes and (not env.get("SLURM_JOB_NODELIST") or nodelist):
        names = nodelist or ",".join(f"node{i}" for i in range(nodes))
        fake.update(
            SLURM_JOB_ID=env.get("SLURM_JOB_ID", "0"),
            SLURM_JOB_NODELIST=names,
            SLURM_NNODES=str(nodes),
            SLURM_NODEID="0",
        )
        fake.pop("SLURM_STEP_NUM_TASKS", None)
        fake.pop("SLURM_NTASKS", None)
    if gpus_per_node is not None:
        fake["SLURM_GPUS_ON_NODE"] = str(gpus_per_node)
    return fake


# ---------------------------------------------------------------------------------------------- fits the partition?


def slurm_minutes(text: str) -> float | None:
    """A Slurm time (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) in minutes; None for unlimited."""
    text = text.strip()
    if text.lower() in ("infinite", "unlimited", "-1", "n/a", ""):
        return None
    days, _, rest = text.rpartition("-") if "-" in text else ("", "", text)
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH[:MM[:SS]]
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts
        return int(days) * 1440 + hours * 60 + minutes + seconds / 60
    if len(parts) == 1:
        return float(parts[0])
    if len(parts) == 2:
        return parts[0] + parts[1] / 60
    return parts[0] * 60 + parts[1] + parts[2] / 60


def memory_mb(text: str) -> int:
    """`--mem` style sizes (`500`, `200G`, `1T`; default unit M) in MB."""
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip().upper())
    if not match:
        raise RuntimeError(f"cannot read memory size {text!r}: use e.g. 64G or 64000 (MB)")
    factor = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2)]
    return int(int(match.group(1)) * factor)


def gres_gpus(gres: str, gpu_type: str | None = None) -> int:
    """GPUs in a node's Gres string (`gpu:a100:4(S:0-1),shard:8`), of `gpu_type` when given."""
    total = 0
    for item in re.sub(r"\([^)]*\)", "", gres).split(","):
        match = re.match(r"^gpu(?::([^:]+))?:(\d+)", item.strip())
        if match and (gpu_type is None or match.group(1) == gpu_type):
            total += int(match.group(2))
    return total


class SlurmQueryError(RuntimeError):
    """sinfo/scontrol could not answer (no controller reachable from here)."""


@dataclass
class NodeResources:
    name: str
    cpus: int
    memory_mb: int
    gres: str
    state: str


@dataclass
class PartitionInfo:
    name: str
    time_limit: str
    nodes: list[NodeResources]


def partition_info(partition: str | None) -> PartitionInfo:
    """The nodes of a partition (default: the cluster's default partition) from `sinfo`: CPUs, memory, Gres."""
    fmt = "--format=%P|%N|%c|%m|%G|%l|%t"
    proc = subprocess.run(
        ["sinfo", "--noheader", "--Node", fmt, *([f"--partition={partition}"] if partition else [])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise SlurmQueryError(f"sinfo failed ({proc.returncode}): {proc.stderr.strip()}")
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 6]
    if partition is None:
        defaults = sorted({r[0] for r in rows if r[0].endswith("*")})
        if not defaults:
            raise RuntimeError("this cluster has no default partition: set launch.partition")
        partition = defaults[0].rstrip("*")
    rows = [r for r in rows if r[0].rstrip("*") == partition]
    if not rows:
        raise RuntimeError(f"sinfo shows no partition {partition!r}: see `sinfo --summarize`")
    nodes = {}
    for _, name, cpus, mem, gres, _, state in rows:
        nodes[name] = NodeResources(name, int(cpus.rstrip("+")), int(mem.rstrip("+")), gres, state)
    return PartitionInfo(partition, rows[0][5], list(nodes.values()))


def check_request(
    info: PartitionInfo,
    *,
    nodes: int,
    gpus_per_node: int,
    gpu_type: str | None,
    cpus_per_task: int,
    time: str | None,
    mem: str | None = None,
) -> None:
    """Raise a RuntimeError naming what does not fit when no `nodes` nodes of the partition can hold the request:
    Slurm itself would accept the job and leave it PENDING forever (Reason=PartitionConfig / PartitionTimeLimit)."""
    problems = []
    need_mem = memory_mb(mem) if mem else None
    fitting = [
        n
        for n in info.nodes
        if n.cpus >= cpus_per_task
        and gres_gpus(n.gres, gpu_type) >= gpus_per_node
        and (need_mem is None or n.memory_mb >= need_mem)
    ]
    if len(fitting) < nodes:
        best_cpus = max(n.cpus for n in info.nodes)
        best_gpus = max(gres_gpus(n.gres, gpu_type) for n in info.nodes)
        best_mem = max(n.memory_mb for n in info.nodes)
        if cpus_per_task > best_cpus:
            problems.append(
                f"--cpus-per-task={cpus_per_task} but its largest node has {best_cpus} CPUs "
                f"(lower launch.cpus_per_gpu, or processes_per_node on CPU)"
            )
        if gpus_per_node > best_gpus:
            kind = f"{gpu_type} GPUs" if gpu_type else "GPUs"
            problems.append(
                f"{gpus_per_node} {kind} per node but its nodes have at most {best_gpus} "
                f"(Gres: {', '.join(sorted({n.gres for n in info.nodes}))}); CPU-only: "
                "launch.gpus_per_node=0"
            )
        if need_mem is not None and need_mem > best_mem:
            problems.append(f"--mem={mem} but its largest node has {best_mem} MB")
        if not problems:
            problems.append(
                f"{nodes} node(s) requested but only {len(fitting)} of its {len(info.nodes)} nodes fit "
                f"{cpus_per_task} CPUs and {gpus_per_node} GPUs each"
            )
    limit, wanted = slurm_minutes(info.time_limit), slurm_minutes(time) if time else None
    if limit is not None and wanted is not None and wanted > limit:
        problems.append(f"--time={time} exceeds its time limit {info.time_limit} (set launch.time)")
    if problems:
        raise RuntimeError(f"the job would never start in partition {info.name!r}: " + "; ".join(problems))
