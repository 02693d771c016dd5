"""accelerate configs (recipes/accelerate/NAME.yaml) and the exact `accelerate launch` command of one node."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from timealign.config import REPO_ROOT, RecipeError

if TYPE_CHECKING:
    from timealign.cluster.slurm import Placement

ACCELERATE_DIR = REPO_ROOT / "recipes" / "accelerate"


def accelerate_configs() -> dict[str, Path]:
    """The shipped accelerate configs by name (recipes/accelerate/NAME.yaml)."""
    return {p.stem: p for p in sorted(ACCELERATE_DIR.glob("*.yaml"))}


def accelerate_config_path(name: str) -> Path:
    """`launch.accelerate_config`: a shipped config name (ddp, fsdp, ...) or a path to any accelerate config."""
    configs = accelerate_configs()
    if name in configs:
        return configs[name]
    path = Path(name)
    if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
        return path.resolve()
    raise RecipeError(f"unknown accelerate config {name!r}: use one of {', '.join(configs)} "
                      f"(recipes/accelerate/) or a path to an accelerate config file")


def venv_tool(name: str) -> str:
    """The tool next to this interpreter (the venv's), else whatever is on PATH."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def with_auto_resume(args: list[str]) -> list[str]:
    """Append training.resume_from_checkpoint=auto unless the user chose (a requeued job must resume)."""
    if any(a.lstrip("+").startswith("training.resume_from_checkpoint=") for a in args):
        return list(args)
    return [*args, "training.resume_from_checkpoint=auto"]


def accelerate_command(script: str | Path, script_args: list[str], *, config: str | Path, where: Placement,
                       accelerate: str | None = None) -> list[str]:
    """The exact `accelerate launch` command for one node."""
    return [accelerate or venv_tool("accelerate"), "launch",
            "--config_file", str(config),
            "--num_machines", str(where.num_machines),
            "--num_processes", str(where.num_processes),
            "--machine_rank", str(where.machine_rank),
            "--main_process_ip", where.main_process_ip,
            "--main_process_port", str(where.port),
            str(script), *script_args]
