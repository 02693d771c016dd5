"""Recipes: Table 5 settings, dotted overrides, and errors that say what is valid."""

import pytest

from timealign.config import RecipeError, available_recipes, load_recipe
from timealign.config.cli import split_argv

# TicToc paper, Appendix D.2, Table 5.
TABLE5 = {
    "llama8b": ("meta-llama/Llama-3.1-8B-Instruct", 5e-7, 0.1),
    "llama3b": ("meta-llama/Llama-3.2-3B-Instruct", 5e-6, 0.05),
    "ministral8b": ("mistralai/Ministral-8B-Instruct-2410", 5e-7, 0.1),
    "qwen3-4b": ("Qwen/Qwen3-4B", 5e-6, 0.05),
    "qwen3-8b": ("Qwen/Qwen3-8B", 5e-6, 0.05),
}


@pytest.mark.parametrize("name", sorted(TABLE5))
def test_paper_recipes_carry_table5_settings(name):
    recipe = load_recipe(name, task="dpo")
    model, lr, beta = TABLE5[name]
    assert recipe.model.name_or_path == model
    assert recipe.training["learning_rate"] == pytest.approx(lr)
    assert recipe.training["beta"] == pytest.approx(beta)
    assert recipe.training["bf16"] is True
    assert recipe.training["optim"].startswith("adamw")
    assert recipe.training["num_train_epochs"] == 1
    assert recipe.training["loss_type"] == ["sigmoid"]


def test_tiny_recipe_is_cpu_and_offline():
    recipe = load_recipe("tiny", task="dpo")
    assert recipe.model.name_or_path == "tiny"
    assert recipe.data.source == "synthetic"
    assert recipe.training["bf16"] is False and recipe.training["use_cpu"] is True
    assert set(TABLE5) | {"tiny"} <= set(available_recipes())


def test_dotted_overrides_are_typed():
    recipe = load_recipe(
        "llama8b",
        {
            "training.learning_rate": "1e-6",
            "data.timestamps": "false",
            "lora.enabled": "true",
            "lora.r": "8",
            "training.save_strategy": "no",
            "output_dir": "outputs/x",
        },
    )
    assert recipe.training["learning_rate"] == 1e-6
    assert recipe.data.timestamps is False
    assert recipe.lora.enabled is True and recipe.lora.r == 8
    assert recipe.training["save_strategy"] == "no"  # not YAML's boolean `no`
    assert recipe.resolved_output_dir() == "outputs/x"


def test_unknown_key_lists_valid_keys():
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny", {"training.lerning_rate": "1"})
    assert "training.lerning_rate" in str(err.value) and "learning_rate" in str(err.value)
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny", {"data.nope": "1"})
    assert "timestamps" in str(err.value) and "score_orientation" in str(err.value)
    with pytest.raises(RecipeError, match="is a section"):
        load_recipe("tiny", {"data": "x"})


def test_missing_or_wrong_recipe_lists_recipes():
    for name in ("", "lama8b"):
        with pytest.raises(RecipeError) as err:
            load_recipe(name)
        assert "llama8b" in str(err.value) and "tiny" in str(err.value)
    with pytest.raises(RecipeError, match="Did you mean: llama8b"):
        load_recipe("lama8b")


def test_bad_values_and_arguments():
    with pytest.raises(RecipeError, match="training.beta"):
        load_recipe("tiny", {"training.beta": "abc"})
    with pytest.raises(RecipeError, match="data.timestamps"):
        load_recipe("tiny", {"data.timestamps": "maybe"})
    with pytest.raises(RecipeError, match="expected recipe=NAME"):
        split_argv(["--lr", "3"])
    assert split_argv(["recipe=tiny", "a.b=c=d"]) == ("tiny", None, {"a.b": "c=d"})
