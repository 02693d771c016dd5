"""The recipe's `launch.accelerate_config`: a shipped accelerate config (recipes/accelerate/NAME.yaml) or a path.

One mapping for both sides of a launch: the cluster launcher passes the file to `accelerate launch --config_file`,
and training reads it back (`timealign.train.launch_check`) to compare what runs with what the recipe asked.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from timealign.config.options import RecipeError
from timealign.config.recipes import REPO_ROOT, shipped_recipes_dir

ACCELERATE_DIR = shipped_recipes_dir() / "accelerate"


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
    raise RecipeError(
        f"unknown accelerate config {name!r}: use one of {', '.join(configs)} "
        f"(recipes/accelerate/) or a path to an accelerate config file"
    )


def read_accelerate_config(name: str) -> tuple[Path, dict]:
    """(path, contents) of `launch.accelerate_config` (YAML or JSON; both parse as YAML)."""
    path = accelerate_config_path(name)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise RecipeError(f"{path}: not a valid accelerate config: {err}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: an accelerate config must be a mapping")
    return path, data


def display_path(path: Path) -> str:
    """The path as a command run from the repository root would write it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
