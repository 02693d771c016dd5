"""Recipes: one YAML file per model, selected with `recipe=NAME`, any field overridden with dotted `key=value`.

    python train/dpo.py recipe=tiny training.learning_rate=1e-6 data.timestamps=false

A recipe has the sections of `Recipe` below. `training` holds TRL's own config fields (DPOConfig for DPO), so every
TRL/transformers training argument works and is checked against the installed TRL. Unknown keys fail with the
list of valid ones; a missing or wrong recipe name lists the recipes that exist.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from typing import Any

import yaml

from timealign.config.options import RecipeError, coerce, describe, dotted_to_nested, merge, unknown_key
from timealign.config.schema import Recipe
from timealign.config.secrets import hold_secrets
from timealign.config.validate import check_values

REPO_ROOT = Path(__file__).resolve().parents[2]


def shipped_recipes_dir() -> Path:
    """The recipes that come with timealign: the repository's recipes/, which a wheel ships as timealign/_recipes.

    In the checkout timealign/_recipes is a link to ../recipes (how pyproject's package-data reaches them); a
    `pip install .` copies the files there, beside the code, where no repository recipes/ exists. Resolved, so the
    checkout shows (and logs) its recipes as recipes/NAME.yaml."""
    packaged = Path(__file__).resolve().parents[1] / "_recipes"
    return packaged.resolve() if packaged.is_dir() else REPO_ROOT / "recipes"


def recipe_dirs() -> list[Path]:
    """Where `recipe=NAME` looks: $TIMEALIGN_RECIPES (os.pathsep-separated), ./recipes, then the shipped recipes."""
    dirs = [Path(p) for p in os.environ.get("TIMEALIGN_RECIPES", "").split(os.pathsep) if p]
    dirs += [Path.cwd() / "recipes", shipped_recipes_dir()]
    seen, out = set(), []
    for d in dirs:
        key = d.resolve()
        if key not in seen and d.is_dir():
            seen.add(key)
            out.append(d)
    return out


def available_recipes() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in recipe_dirs():
        for f in sorted(d.glob("*.yaml")):
            found.setdefault(f.stem, f)
    return found


def recipe_listing(task: str | None = None) -> str:
    lines = []
    for name, path in available_recipes().items():
        with open(path) as fh:
            raw = yaml.safe_load(fh) or {}
        if task and raw.get("task", "dpo") != task:
            continue
        lines.append(f"  {name:<14} {raw.get('description', '')}")
    return "\n".join(lines) or "  (none found)"


def find_recipe(name: str, task: str | None = None) -> Path:
    if not name:
        raise RecipeError(f"recipe= needs a name. Available recipes:\n{recipe_listing(task)}")
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate
    recipes = available_recipes()
    if name not in recipes:
        close = difflib.get_close_matches(name, list(recipes), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise RecipeError(f"unknown recipe {name!r}.{hint} Available recipes:\n{recipe_listing(task)}")
    return recipes[name]


# ---------------------------------------------------------------------------------------------- merging


def _training_field_types(task: str) -> dict[str, Any]:
    """The fields of TRL's config class for this task (read off the installed TRL)."""
    if task == "dpo":
        from trl import DPOConfig as cls
    elif task == "sft":
        from trl import SFTConfig as cls
    else:
        raise RecipeError(f"unknown task {task!r}; known: dpo, sft")
    return {f.name: f.type for f in dataclasses.fields(cls) if f.init}


def _training_type(tp: Any) -> Any:
    # DPOConfig annotations are strings or typing objects; map the simple ones so values get coerced.
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", str(tp))
    text = text.replace("typing.", "").replace(" ", "")
    for name, real in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if text in (name, f"{name}|None", f"Optional[{name}]", f"None|{name}"):
            return real
    return Any


def _checked_training(task: str, values: dict) -> dict:
    """`training.*` keys checked against the installed TRL config class of the task, values typed by its fields."""
    valid = _training_field_types(task)
    out = {}
    for key, value in (values or {}).items():
        if key not in valid:
            raise unknown_key("training.", key, list(valid))
        out[key] = coerce(value, _training_type(valid[key]), f"training.{key}")
    return out


def read_recipe_file(path: Path) -> dict:
    with open(path) as fh:
        try:
            raw = yaml.safe_load(fh)
        except yaml.YAMLError as err:
            raise RecipeError(f"{path}: not valid YAML: {err}") from None
    if raw is None or raw == {}:  # nothing, comments only, `null` or `{}`: every value would be a default
        raise RecipeError(
            f"{path}: the recipe file is empty (no sections, so every value would be a default): write its "
            "sections (task, model, data, training, ...; see recipes/tiny.yaml), or use a built-in recipe: recipe=NAME"
        )
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: a recipe must be a mapping of sections")
    return raw


def load_recipe(
    name: str | None,
    overrides: dict[str, str] | None = None,
    task: str | None = None,
    config: str | Path | None = None,
) -> Recipe:
    """recipes/NAME.yaml (or the YAML file `config`), then dotted overrides, merged onto the schema and checked.

    OmegaConf merges the layers onto the `Recipe` dataclass (unknown keys and wrong types fail); `training.*` is
    checked against the installed TRL's DPOConfig/SFTConfig, then every value's range, the name and output_dir
    (`timealign.config.validate.check_values`), before anything runs. The result also carries `source`
    (`recipe=NAME` or `--config PATH`) and `overrides` (the dotted keys given, as text): plain attributes, not
    recipe fields.
    """
    if config is not None:
        path = Path(config)
        if not path.is_file():
            raise RecipeError(f"--config {config}: no such file")
    else:
        path = find_recipe(name or "", task)
    raw = read_recipe_file(path)
    raw.setdefault("name", path.stem)
    recipe_task = str(raw.get("task", "dpo"))
    if task and recipe_task != task:
        raise RecipeError(
            f"recipe {path.stem!r} is a {recipe_task!r} recipe, not {task!r}. "
            f"Recipes for {task}:\n{recipe_listing(task)}"
        )
    layers = [raw]
    if overrides:
        nested = dotted_to_nested(overrides)
        if "task" in nested:
            raise RecipeError("task is fixed by the recipe file; pick a recipe of the task you want")
        layers.append(nested)
    recipe = merge(Recipe, *layers)
    recipe.training = {}
    for layer in layers:
        recipe.training.update(_checked_training(recipe.task, layer.get("training") or {}))
    check_values(recipe)
    # How it was asked for (not fields: never saved, never compared): W&B run names, the launch check's hint.
    recipe.source = f"--config {config}" if config is not None else f"recipe={name}"
    recipe.overrides = {str(k).lstrip("+"): str(v) for k, v in (overrides or {}).items()}
    hold_secrets(recipe)  # training.hub_token & co.: kept in memory, <redacted> wherever the recipe is shown or saved
    return recipe


def describe_fields() -> str:
    """Every recipe field with its default and help, for --help."""
    return describe(Recipe, skip=("name", "description", "task")) + (
        "\n  training.<field>   any field of TRL's DPOConfig/SFTConfig, e.g. training.learning_rate, training.beta,"
        "\n      training.per_device_train_batch_size (checked against the installed TRL)"
    )
