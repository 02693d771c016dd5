"""Cluster launch on SLURM: accelerate configs, every node's launch command, sbatch submission, vLLM eval jobs.

`python -m timealign.cluster --help` explains the command line (`timealign.cluster.cli`).
"""

from timealign.cluster.accelerate import accelerate_command, accelerate_config_path, accelerate_configs
from timealign.cluster.cli import main
from timealign.cluster.jobs import eval_commands, sbatch_command, training_commands
from timealign.cluster.slurm import Placement, default_port, expand_hostlist, gpus_on_node, hostnames, placement

__all__ = [
    "Placement",
    "accelerate_command",
    "accelerate_config_path",
    "accelerate_configs",
    "default_port",
    "eval_commands",
    "expand_hostlist",
    "gpus_on_node",
    "hostnames",
    "main",
    "placement",
    "sbatch_command",
    "training_commands",
]
