"""Recipes: one YAML file per model, selected with `recipe=NAME`, any field overridden with dotted `key=value`.

    accelerate launch train/dpo.py recipe=llama8b training.learning_rate=1e-6 data.timestamps=false

A recipe has the sections of `Recipe` below. `training` holds TRL's own config fields (DPOConfig for DPO), so every
TRL/transformers training argument works and is checked against the installed TRL. Unknown keys fail with the
list of valid ones; a missing or wrong recipe name lists the recipes that exist.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]


class RecipeError(ValueError):
    """A recipe or override the user wrote is wrong; the message says how to fix it."""


@dataclass
class ModelSection:
    name_or_path: str = "tiny"  # hub id, local folder, or `tiny` (built locally on first use)
    dtype: str = "bfloat16"  # float32 | bfloat16 | float16 | auto
    attn_implementation: str | None = None  # e.g. sdpa, flash_attention_2
    trust_remote_code: bool = False


@dataclass
class LoraSection:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: Any = "all-linear"


@dataclass
class DataSection:
    # synthetic: embedded generator (no download) | v1: TicToc v1 release folder | annotated: JSON/JSONL with
    # per-sample mean score S | hub: datasets.load_dataset(path) rows in the annotated layout
    source: str = "synthetic"
    path: str | None = None
    prepared_dir: str | None = None  # where data prep writes (and training reads) the pair dataset
    timestamps: bool = True  # ISO time at the start of every user/assistant/tool message
    elapsed: bool = False  # also "(+3 minutes 13 seconds since the last tool result)" after the reply's stamp
    score_orientation: str = "tool_high"  # tool_high: S = 3 means Tool (App. D.2) | tool_low: S = 0 means Tool (Sec. 2.5)
    margin_prefer_tool: float = 1.0  # delta when S is unknown (v1 release); retained v1 samples have |S-1.5| > 1
    margin_prefer_no_tool: float = 1.0
    offset_scale: float = 1.0  # ODPO's alpha: offset = offset_scale * |S - 1.5|; 0 = plain DPO on the same pairs
    min_margin: float = 0.0  # drop pairs with |S - 1.5| below this (the paper's evaluation keeps > 1.0)
    unknown_scenarios: str = "error"  # error | bucket (kept under scenario "unknown", split "unknown")
    direct_answer: str = "latest_tool_result"  # strategy when a sample has no direct-answer text
    on_error: str = "raise"  # raise | skip (bad records go to rejects.jsonl with their reason)
    synthetic_trajectories: int = 240  # per split, for source=synthetic
    synthetic_max_rounds: int = 2  # retrieval rounds before the follow-up (1 = shorter sequences)
    synthetic_sensitivity_swap: float = 0.0  # train split: share of tools given another sensitivity (see synthetic.py)
    balance_train_labels: bool = False  # subsample the train split to equal prefer-Tool/noTool counts per scenario
    seed: int = 0
    train_split: str = "train"
    eval_split: str = "test"


@dataclass
class EvalSection:
    backend: str = "hf"  # hf (transformers) | vllm (offline vllm.LLM engine) | openai (OpenAI-compatible server)
    max_samples: int | None = None  # cap on held-out samples (None: all)
    max_new_tokens: int = 24
    batch_size: int = 16  # hf: prompts per generate call; openai: concurrent requests
    # Sampling (paper Sec. 3): Temperature=0 everywhere, except Qwen3 in reasoning mode, which uses the official
    # Temperature=0.6, TopP=0.95, TopK=20, MinP=0. A field left at None takes that paper default.
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0: no top-k
    min_p: float | None = None
    seed: int = 0  # sampling seed (used when temperature > 0)
    reasoning: bool | None = None  # Qwen3 thinking on/off (chat template's enable_thinking); None: template default
    dtype: str | None = None  # hf/vllm weights dtype; None: model.dtype (bfloat16 -> the checkpoint's own, "auto")
    cache: bool = True  # cache finished samples in <out>/generations/<suite>.jsonl; a killed run resumes from it
    # vllm
    tensor_parallel_size: int = 1
    max_model_len: int | None = None  # None: the model's own context length
    enforce_eager: bool = False  # no CUDA graphs / compilation (faster start; required on CPU in practice)
    gpu_memory_utilization: float = 0.9
    max_lora_rank: int | None = None  # None: read off the adapter's adapter_config.json
    kv_cache_gib: float | None = None  # KV-cache size; None: vLLM's own (GPU) or VLLM_CPU_KVCACHE_SPACE / 1 GiB (CPU)
    # openai: completions endpoint of an OpenAI-compatible server (e.g. `vllm serve`), rendered prompt strings
    base_url: str | None = None  # e.g. http://node17:8000/v1
    served_model: str | None = None  # the server's model name (default: the checkpoint as given)
    api_key_env: str = "OPENAI_API_KEY"  # environment variable holding the API key (unset: no key sent)
    request_timeout: float = 600.0  # seconds per request
    max_retries: int = 5  # retries with exponential backoff on connection errors, 408/409/429/5xx


@dataclass
class TimerSection:
    """TIMER-style multi-task SFT (TimelyChat paper, Sec. 5.2 and the Sec. 6.5 ablations); read by task: sft only."""

    lambda_time: float = 1.0  # loss = CE(response tokens) + lambda * CE(time tokens); 0 = the "w/o time loss" ablation
    special_tokens: bool = True  # <SPK> <TIME> <UTT> markers; false = the "w/o special tokens" ablation
    order: str = "time_first"  # time_first: <SPK> s <TIME> tau <UTT> u | utterance_first: the ablation
    loss_turns: str = "all"  # all: every turn after the first (Eq. 4, t = 2..T) | target: the final turn only
    loss_normalization: str = "tokens"  # tokens: one normalizer for both sums (Eq. 4-5) | per_type: two token means
    emit_instant_counterpart: bool = False  # also train the untimely reply given tau = 0 (tau given, not trained)
    lora_new_tokens: str = "trainable_tokens"  # with LoRA: trainable_tokens (new rows only) | modules_to_save
    synthetic_dialogs: int = 2000  # train dialogs for data.source=synthetic
    synthetic_eval_dialogs: int = 200  # held-out dialogs for data.source=synthetic


@dataclass
class WandbSection:
    project: str = "timealign"
    entity: str | None = None
    name: str | None = None
    tags: list = field(default_factory=list)


@dataclass
class LaunchSection:
    """Cluster launch defaults, read by `python -m timealign.cluster` and slurm/*.sbatch (a plain run ignores them)."""

    # recipes/accelerate/NAME.yaml or a path: ddp | fsdp | fsdp_offload | zero2 | zero3 | zero3_offload
    accelerate_config: str = "ddp"
    nodes: int = 1
    gpus_per_node: int = 8  # processes per node; inside a job the allocation's GPU count wins
    gpu_type: str | None = None  # gres type, e.g. a100, l40s (None: any GPU)
    partition: str | None = None
    account: str | None = None
    time: str = "24:00:00"
    cpus_per_gpu: int = 8
    requeue: bool = True  # checkpoint on the warning signal, requeue, resume from the newest checkpoint
    signal_seconds: int = 120  # the warning signal comes this long before the time limit (--signal=B:USR1@N)
    max_requeues: int = 20
    main_process_port: int | None = None  # None: 20000 + job id % 20000
    setup: str | None = None  # shell line run first on every node, e.g. "module load cuda; source .venv/bin/activate"


@dataclass
class Recipe:
    name: str = ""
    description: str = ""
    task: str = "dpo"
    output_dir: str = "outputs/{name}"
    model: ModelSection = field(default_factory=ModelSection)
    lora: LoraSection = field(default_factory=LoraSection)
    data: DataSection = field(default_factory=DataSection)
    eval: EvalSection = field(default_factory=EvalSection)
    wandb: WandbSection = field(default_factory=WandbSection)
    timer: TimerSection = field(default_factory=TimerSection)
    launch: LaunchSection = field(default_factory=LaunchSection)
    training: dict = field(default_factory=dict)  # fields of TRL's DPOConfig, checked against it

    def resolved_output_dir(self) -> str:
        return self.output_dir.format(name=self.name)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------- recipe files


def recipe_dirs() -> list[Path]:
    """Where `recipe=NAME` looks: $TIMEALIGN_RECIPES (os.pathsep-separated), ./recipes, then the repo's recipes/."""
    dirs = [Path(p) for p in os.environ.get("TIMEALIGN_RECIPES", "").split(os.pathsep) if p]
    dirs += [Path.cwd() / "recipes", REPO_ROOT / "recipes"]
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


def _recipe_listing(task: str | None = None) -> str:
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
        raise RecipeError(f"recipe= needs a name. Available recipes:\n{_recipe_listing(task)}")
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate
    recipes = available_recipes()
    if name not in recipes:
        close = difflib.get_close_matches(name, list(recipes), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise RecipeError(f"unknown recipe {name!r}.{hint} Available recipes:\n{_recipe_listing(task)}")
    return recipes[name]


# ---------------------------------------------------------------------------------------------- merging


def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def _strip_optional(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML/CLI value to a field's declared type (YAML reads `1e-6` as a string, for example)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("null", "none", "~"):
        return None
    base = _strip_optional(tp)
    try:
        if base is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if base is int and not isinstance(value, bool):
            return int(value) if not isinstance(value, float) or value.is_integer() else _bad(value)
        if base is float:
            return float(value)
        if base is str:
            return str(value)
        if base in (list, dict) or typing.get_origin(base) in (list, dict):
            if isinstance(value, str):
                value = yaml.safe_load(value)
            return value
    except (TypeError, ValueError) as err:
        raise RecipeError(f"{where}: cannot read {value!r} as {getattr(base, '__name__', base)}: {err}") from None
    return _guess(value) if isinstance(value, str) else value


def _guess(text: str) -> Any:
    """A CLI string for a loosely typed field: numbers, true/false, [lists] and {maps}; anything else stays text.

    Not plain YAML: YAML 1.1 reads `no` as False, and `save_strategy=no` must stay the string "no".
    """
    stripped = text.strip()
    if stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if stripped[:1] in ("[", "{"):
        return yaml.safe_load(stripped)
    for cast in (int, float):
        try:
            return cast(stripped)
        except ValueError:
            pass
    return text


def _bad(value):
    raise ValueError(f"not an integer: {value!r}")


def _training_field_types(task: str) -> dict[str, Any]:
    """The fields of TRL's config class for this task (read off the installed TRL)."""
    if task == "dpo":
        from trl import DPOConfig as cls
    elif task == "sft":
        from trl import SFTConfig as cls
    else:
        raise RecipeError(f"unknown task {task!r}; known: dpo, sft")
    return {f.name: f.type for f in dataclasses.fields(cls) if f.init}


def _unknown_key(where: str, key: str, valid: list[str]) -> RecipeError:
    close = difflib.get_close_matches(key, valid, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return RecipeError(f"unknown key '{where}{key}'.{hint} Valid keys here: {', '.join(sorted(valid))}")


def _training_type(tp: Any) -> Any:
    # DPOConfig annotations are strings or typing objects; map the simple ones so values get coerced.
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", str(tp))
    text = text.replace("typing.", "").replace(" ", "")
    for name, real in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if text in (name, f"{name}|None", f"Optional[{name}]", f"None|{name}"):
            return real
    return Any


def _merge_section(obj, updates: dict, where: str):
    types_ = _field_types(type(obj))
    for key, value in updates.items():
        if key not in types_:
            raise _unknown_key(where, key, list(types_))
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise RecipeError(f"{where}{key} is a section; set its fields, e.g. {where}{key}.<field>=...")
            _merge_section(current, value, f"{where}{key}.")
        elif key == "training":
            valid = _training_field_types(obj.task)
            for tkey, tval in (value or {}).items():
                if tkey not in valid:
                    raise _unknown_key("training.", tkey, list(valid))
                current[tkey] = coerce(tval, _training_type(valid[tkey]), f"training.{tkey}")
        else:
            setattr(obj, key, coerce(value, types_[key], f"{where}{key}"))
    return obj


def _dotted_to_nested(overrides: dict[str, str]) -> dict:
    nested: dict = {}
    for dotted, value in overrides.items():
        node = nested
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise RecipeError(f"override {dotted!r} conflicts with another override")
        node[parts[-1]] = value
    return nested


def load_recipe(name: str, overrides: dict[str, str] | None = None, task: str | None = None) -> Recipe:
    """Read recipes/NAME.yaml, apply dotted overrides, and check every key."""
    path = find_recipe(name, task)
    with open(path) as fh:
        try:
            raw = yaml.safe_load(fh) or {}
        except yaml.YAMLError as err:
            raise RecipeError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: a recipe must be a mapping of sections")
    raw.setdefault("name", path.stem)
    recipe = Recipe(task=raw.get("task", "dpo"))
    if task and recipe.task != task:
        raise RecipeError(f"recipe {path.stem!r} is a {recipe.task!r} recipe, not {task!r}. "
                          f"Recipes for {task}:\n{_recipe_listing(task)}")
    _merge_section(recipe, {k: v for k, v in raw.items() if k != "task"}, "")
    if overrides:
        _merge_section(recipe, _dotted_to_nested(overrides), "")
    return recipe


def parse_cli(argv: list[str]) -> tuple[str | None, dict[str, str]]:
    """Split `recipe=NAME a.b=c ...` into the recipe name and the overrides; anything else is an error."""
    recipe, overrides = None, {}
    for arg in argv:
        if "=" not in arg or arg.startswith("-"):
            raise RecipeError(f"expected recipe=NAME or key=value, got {arg!r} (see --help)")
        key, value = arg.split("=", 1)
        key = key.lstrip("+")
        if key == "recipe":
            recipe = value
        else:
            overrides[key] = value
    return recipe, overrides


def describe_fields() -> str:
    """The recipe sections and their fields, for --help."""
    lines = []
    for section in ("model", "lora", "data", "eval", "wandb", "timer", "launch"):
        cls = type(getattr(Recipe(), section))
        names = ", ".join(f.name for f in dataclasses.fields(cls))
        lines.append(f"  {section}.{{{names}}}")
    lines.append("  training.<any field of TRL's DPOConfig/SFTConfig>, e.g. training.learning_rate, "
                 "training.beta, training.per_device_train_batch_size")
    lines.append("  output_dir (may use {name})")
    return "\n".join(lines)
