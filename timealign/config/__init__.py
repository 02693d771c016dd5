"""Recipes and command lines: the schema (`schema`), recipe files and overrides (`recipes`), the one CLI (`cli`)."""

from timealign.config.recipes import (
    REPO_ROOT,
    RecipeError,
    available_recipes,
    describe_fields,
    find_recipe,
    load_recipe,
    recipe_listing,
)
from timealign.config.schema import (
    DataSection,
    EvalSection,
    LaunchSection,
    LoraSection,
    ModelSection,
    Recipe,
    TimerSection,
    WandbSection,
)

__all__ = [
    "REPO_ROOT",
    "RecipeError",
    "available_recipes",
    "describe_fields",
    "find_recipe",
    "load_recipe",
    "recipe_listing",
    "DataSection",
    "EvalSection",
    "LaunchSection",
    "LoraSection",
    "ModelSection",
    "Recipe",
    "TimerSection",
    "WandbSection",
]
