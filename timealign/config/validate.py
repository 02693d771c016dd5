"""Recipe values checked before any work starts, in one place: each problem is a one-line `RecipeError` (exit 2).

- `check_values(recipe)`: numbers in their range (training.learning_rate > 0, training.beta > 0,
  training.max_steps -1 or >= 1, offsets and margins >= 0, batch sizes >= 1, ...), data.source a source of the
  recipe's task, the recipe `name` safe as a file name and a Slurm job name, `output_dir` naming no placeholder but
  `{name}`, a file source with its `data.path`, training.loss_type / loss_weights a loss the task's trainer
  implements (`loss_problems`: not all weights 0), and the shared-prompt layouts with an attention implementation
  they are verified with (`attention_problems`). (The enumerated fields' `choices` are checked where the recipe is
  merged, `timealign.config.options.merge`.) `load_recipe` calls it, so every entry point (training, data prep,
  evaluation, the cluster launcher, the experiment) refuses a bad value while it reads its command line: nothing
  is prepared, built or written first.
- `check_inputs(recipe)`: what the command reads on this machine exists (`data.path` of a file source, a local
  `model.name_or_path`, the packages of the `training.report_to` integrations). Not part of `load_recipe`: a
  cluster `plan`/`submit` may name paths that exist on the nodes only, and evaluation reads a checkpoint's saved
  recipe on machines without its trackers. The commands that read them say so (`Command(reads_inputs=True)`:
  training and data prep) and `timealign.config.cli.parse` calls it right after loading the recipe.
  Evaluation checks `data.path` when a suite reads the recipe's data (tictoc's held-out pairs; `check_data_path`).
- `check_model_reference(value, key)`: an existing local model folder (config.json or adapter_config.json; another
  folder or a file is refused, naming a model folder inside it when there is one), or a hub id (`org/name` or a
  bare name). A path that is clearly local (`./x`, `/x`, `a/b/c`, or `outputs/x` while `outputs/` exists here) and
  does not exist is refused with the nearest folder that does, instead of reaching the hub client ("Repo id must be
  in the form ...").

Eval sampling values (temperature, top_p, top_k, min_p) are checked by `timealign.backends.base.sampling_settings`,
the first thing a backend does.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

from timealign.config.options import RecipeError
from timealign.config.schema import DPO_SOURCES, SFT_SOURCES

# A recipe name becomes part of folder names (outputs/{name}), W&B names and Slurm job names (and through %x the
# job's log file name): letters, digits and . _ + - only, no path separators, not starting with a dot or a dash.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
# Sources read from data.path: file ones must exist here; `hub` may be a hub dataset id.
FILE_SOURCES = ("v1", "annotated", "timelychat", "dialogs")
PATH_SOURCES = FILE_SOURCES + ("hub",)
# data.direct_answer: how a TicToc pair's direct answer is made when the data has none (timealign/data/
# tictoc_pairs.py);
# generate's model runs on one of the evaluator's backends that continue rendered prompts (timealign/data/
# generated_answers.py).
DIRECT_ANSWERS = ("latest_tool_result", "last_assistant_text", "generate")
DIRECT_ANSWER_BACKENDS = ("hf", "vllm", "openai")
# training.report_to: transformers' integrations (INTEGRATION_TO_CALLBACK, transformers 5.16-5.19) are checked
# here without importing it (seconds); a name not in this list is looked up there before it is refused.
REPORT_TO_NAMES = (
    "azure_ml",
    "comet_ml",
    "mlflow",
    "neptune",
    "tensorboard",
    "trackio",
    "wandb",
    "codecarbon",
    "clearml",
    "dagshub",
    "flyte",
    "dvclive",
    "swanlab",
    "kubeflow",
)
# training.report_to integrations and what transformers looks for to use each (its `is_*_available`: any one of the
# module sets, every module of a set), with the pip package: the Trainer stops on a missing one only after data prep.
# kubeflow is no package (an environment variable), so it is not checked here.
REPORT_TO_PACKAGES: dict[str, tuple[tuple[tuple[str, ...], ...], str]] = {
    "azure_ml": ((("azureml.core.run",),), "azureml-core"),
    "comet_ml": ((("comet_ml",),), "comet-ml"),
    "mlflow": ((("mlflow",),), "mlflow"),
    "neptune": ((("neptune",),), "neptune"),
    "tensorboard": ((("tensorboard",), ("tensorboardX",)), "tensorboard"),
    "trackio": ((("trackio",),), "trackio"),
    "wandb": ((("wandb",),), "wandb"),
    "codecarbon": ((("codecarbon",),), "codecarbon"),
    "clearml": ((("clearml",),), "clearml"),
    "dagshub": ((("dagshub", "mlflow"),), "dagshub mlflow"),
    "flyte": ((("flytekit",),), "flytekit"),
    "dvclive": ((("dvclive",),), "dvclive"),
    "swanlab": ((("swanlab",),), "swanlab"),
}
# training.loss_type: what timealign's trainers implement. dpo: the offset loss, alone or with TRL's SFT term on the
# chosen replies (timealign/train/odpo.py `_check_loss_config`, which refuses the rest after data prep); sft: the
# TIMER trainer's nll (timealign/train/timer.py).
DPO_LOSS_TYPES = (["sigmoid"], ["sigmoid", "sft"])
SFT_LOSS_TYPES = ("nll",)
# model.attn_implementation each shared-prompt layout is verified with (`SUPPORTED_ATTENTION` of
# timealign/train/shared_prompt.py and prompt_cache.py, which refuse the rest after data prep); unset: the model's own
# default (sdpa, else eager).
SHARED_PROMPT_ATTENTION = ("sdpa", "eager", "flex_attention")
PROMPT_CACHE_ATTENTION = ("sdpa", "eager")
# The Hugging Face hub's repo id: `name` or `namespace/name` (huggingface_hub.utils.validate_repo_id).
HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")


def field_choices(cls: type | None = None, prefix: str = "") -> dict[str, tuple[str, ...]]:
    """Every enumerated recipe field (`opt(..., choices=...)`) as {dotted key: its choices}."""
    import dataclasses

    from timealign.config.options import field_types, strip_optional
    from timealign.config.schema import Recipe

    cls = cls or Recipe
    out: dict[str, tuple[str, ...]] = {}
    types_ = field_types(cls)
    for f in dataclasses.fields(cls):
        tp = strip_optional(types_[f.name])
        if dataclasses.is_dataclass(tp):
            out.update(field_choices(tp, f"{prefix}{f.name}."))
        elif f.metadata.get("choices"):
            out[f"{prefix}{f.name}"] = f.metadata["choices"]
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(test: Callable[[float], bool]) -> Callable[[float], bool]:
    return lambda v: math.isfinite(v) and test(v)


POSITIVE = (_finite(lambda v: v > 0), "> 0")
NON_NEGATIVE = (_finite(lambda v: v >= 0), ">= 0")
AT_LEAST_1 = (_finite(lambda v: v >= 1), ">= 1")
FRACTION = (_finite(lambda v: 0 <= v <= 1), "between 0 and 1")
OPEN_FRACTION = (_finite(lambda v: 0 < v <= 1), "in (0, 1]")
HALF_OPEN = (_finite(lambda v: 0 <= v < 1), "in [0, 1)")
OPEN_UNIT = (_finite(lambda v: 0 < v < 1), "in (0, 1)")
MAX_STEPS = (_finite(lambda v: v == -1 or v >= 1), "-1 or >= 1")
PORT = (_finite(lambda v: 1 <= v <= 65535), "a port number (1-65535)")

# (dotted key, (test, what it must be), why): a None value is "unset" and passes; training.* keys are checked when
# the recipe sets them (TRL's defaults are valid).
RULES: tuple[tuple[str, tuple, str], ...] = (
    ("training.learning_rate", POSITIVE, ""),
    ("training.beta", POSITIVE, "the DPO temperature; 0 removes the preference signal"),
    ("training.per_device_train_batch_size", AT_LEAST_1, ""),
    ("training.per_device_eval_batch_size", AT_LEAST_1, ""),
    ("training.gradient_accumulation_steps", AT_LEAST_1, ""),
    ("training.max_length", AT_LEAST_1, "null: no limit"),
    ("training.num_train_epochs", NON_NEGATIVE, ""),
    ("training.max_steps", MAX_STEPS, "-1: train by training.num_train_epochs"),
    ("training.save_total_limit", AT_LEAST_1, "null: keep every checkpoint"),
    ("training.seed", NON_NEGATIVE, ""),
    ("training.data_seed", NON_NEGATIVE, ""),
    ("training.eval_accumulation_steps", AT_LEAST_1, ""),
    ("training.label_smoothing", HALF_OPEN, ""),
    ("training.warmup_steps", NON_NEGATIVE, ""),
    ("training.weight_decay", NON_NEGATIVE, ""),
    ("training.max_grad_norm", NON_NEGATIVE, ""),
    ("training.adam_beta1", HALF_OPEN, ""),
    ("training.adam_beta2", HALF_OPEN, ""),
    ("training.adam_epsilon", POSITIVE, ""),
    ("training.logging_steps", POSITIVE, ""),
    ("training.save_steps", POSITIVE, ""),
    ("training.eval_steps", POSITIVE, ""),
    ("training.dataloader_num_workers", NON_NEGATIVE, ""),
    ("data.offset_scale", NON_NEGATIVE, "ODPO's alpha; 0 = plain DPO"),
    ("data.margin_prefer_tool", NON_NEGATIVE, "an ODPO offset"),
    ("data.margin_prefer_no_tool", NON_NEGATIVE, "an ODPO offset"),
    ("data.min_margin", NON_NEGATIVE, ""),
    ("data.prep_timeout", POSITIVE, "seconds"),
    ("data.synthetic_trajectories", AT_LEAST_1, ""),
    ("data.synthetic_max_rounds", AT_LEAST_1, ""),
    ("data.synthetic_sensitivity_swap", FRACTION, "a share of tools"),
    ("data.validation_share", HALF_OPEN, "a share of the train split's trajectories; 0: no validation split"),
    ("data.direct_answer_max_new_tokens", AT_LEAST_1, ""),
    ("lora.r", AT_LEAST_1, ""),
    ("lora.alpha", POSITIVE, ""),
    ("lora.dropout", HALF_OPEN, ""),
    ("eval.max_new_tokens", NON_NEGATIVE, "0: no limit, eval.backend=chat only"),
    ("eval.batch_size", AT_LEAST_1, ""),
    ("eval.max_samples", AT_LEAST_1, "null: all"),
    ("eval.tensor_parallel_size", AT_LEAST_1, ""),
    ("eval.max_model_len", AT_LEAST_1, "null: the model's own"),
    ("eval.gpu_memory_utilization", OPEN_FRACTION, ""),
    ("eval.max_lora_rank", AT_LEAST_1, ""),
    ("eval.kv_cache_gib", POSITIVE, ""),
    ("eval.request_timeout", POSITIVE, "seconds"),
    ("eval.max_retries", NON_NEGATIVE, ""),
    ("eval.bootstrap", NON_NEGATIVE, "0: no intervals"),
    ("eval.confidence", OPEN_UNIT, "the level of the bootstrap intervals"),
    ("eval.max_failed_share", FRACTION, "a share of a suite's generations"),
    ("eval.clock_seconds", NON_NEGATIVE, "the elapsed-time rule's threshold in seconds"),
    ("live_eval.every_steps", NON_NEGATIVE, "0: off"),
    ("live_eval.max_samples", AT_LEAST_1, ""),
    ("timer.lambda_time", NON_NEGATIVE, "0 = the 'w/o time loss' ablation"),
    ("timer.synthetic_dialogs", NON_NEGATIVE, ""),
    ("timer.synthetic_eval_dialogs", NON_NEGATIVE, ""),
    ("batch.global_size", AT_LEAST_1, "null: per device x processes x accumulation as training.* says"),
    ("launch.nodes", AT_LEAST_1, ""),
    ("launch.gpus_per_node", NON_NEGATIVE, "0: a CPU-only job"),
    ("launch.cpus_per_gpu", AT_LEAST_1, ""),
    ("launch.signal_seconds", NON_NEGATIVE, ""),
    ("launch.max_requeues", NON_NEGATIVE, ""),
    ("launch.main_process_port", PORT, ""),
)


def _lookup(recipe, dotted: str) -> tuple[bool, Any]:
    """(whether the recipe has `dotted`, its value); training.* keys only when the recipe sets them."""
    head, _, rest = dotted.partition(".")
    if head == "training":
        training = recipe.training or {}
        return (rest in training, training.get(rest))
    section = getattr(recipe, head, None)
    if section is None or not hasattr(section, rest):
        return False, None
    return True, getattr(section, rest)


def report_to_problem(value: Any) -> str | None:
    """Why `training.report_to` is not what transformers' Trainer accepts (it would refuse it with a traceback after
    data prep): "none", "all", an integration name, or a list of names; None when it is fine."""
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        return f"training.report_to={value!r} must be an integration name or a list of them (none: no reporting)"
    shown = value if isinstance(value, str) else "[" + ", ".join(names) + "]"
    if list(names) in (["none"], ["all"]):
        return None
    if {"none", "all"} & set(names):
        return f"training.report_to={shown}: none (no reporting) and all (every installed integration) stand alone"
    known = REPORT_TO_NAMES
    if any(n not in known for n in names):  # a newer integration, or a misspelt one: transformers' own list
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        known = tuple(INTEGRATION_TO_CALLBACK)
    unknown = [n for n in names if n not in known]
    if not unknown:
        return None
    import difflib

    close = [c for n in unknown for c in difflib.get_close_matches(n, ("none", "all", *known), 1)]
    hint = f" (did you mean: {', '.join(close)}?)" if close else ""
    return f"training.report_to={shown}: {', '.join(unknown)} is not one of: none, all, {', '.join(known)}{hint}"


def _listed(value: Any) -> str:
    """A list value as users write it on the command line: [a, b]."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def loss_problems(recipe) -> list[str]:
    """Why `training.loss_type` / `training.loss_weights` cannot train this task as asked (the trainers refuse them
    only after data prep, and all-zero weights would train a zero loss and call it trained); empty when fine."""
    training = recipe.training or {}
    loss_type = training.get("loss_type")
    if recipe.task == "sft":
        if loss_type is not None and loss_type not in SFT_LOSS_TYPES:
            return [
                f"training.loss_type={_listed(loss_type)}: timealign sft (the TIMER trainer) implements loss_type=nll "
                "only; the SFT term beside the offset loss is timealign dpo's training.loss_type=[sigmoid,sft]"
            ]
        return []
    types = ["sigmoid"] if loss_type is None else [loss_type] if isinstance(loss_type, str) else loss_type
    if not isinstance(types, (list, tuple)) or list(types) not in DPO_LOSS_TYPES:
        return [
            f"training.loss_type={_listed(loss_type)}: offset-DPO implements [sigmoid] (the offset loss) or "
            "[sigmoid, sft] (plus TRL's SFT term on the chosen replies, weighted by training.loss_weights)"
        ]
    weights = training.get("loss_weights")
    if weights is None:
        return []
    shown = f"training.loss_weights={_listed(weights)}"
    if not isinstance(weights, (list, tuple)) or not all(_number(w) for w in weights):
        return [f"{shown} must be a list of numbers, one per training.loss_type entry ({_listed(types)})"]
    if len(weights) != len(types):
        return [
            f"{shown} gives {len(weights)} weights for {len(types)} loss types (training.loss_type="
            f"{_listed(types)}): give one per loss type"
        ]
    bad = [w for w in weights if not (math.isfinite(w) and w >= 0)]
    if bad:
        return [f"{shown}: each weight must be a finite number >= 0 ({_listed(bad)} is not)"]
    if not any(weights):
        return [f"{shown}: every weight 0 makes the loss 0, so nothing would be learnt: give a loss a weight > 0"]
    return []


def attention_problems(recipe) -> list[str]:
    """The shared-prompt layouts (task dpo) with a model.attn_implementation they are not verified with."""
    attn = recipe.model.attn_implementation
    if recipe.task != "dpo" or attn is None:
        return []
    if recipe.dpo.prompt_cache and attn not in PROMPT_CACHE_ATTENTION:
        return [
            f"dpo.prompt_cache=true is verified with model.attn_implementation {' or '.join(PROMPT_CACHE_ATTENTION)}, "
            f"not {attn}: set model.attn_implementation=sdpa, or dpo.prompt_cache=false (the tree-mask layout)"
        ]
    if recipe.dpo.shared_prompt and attn not in SHARED_PROMPT_ATTENTION:
        return [
            f"dpo.shared_prompt=true needs a custom 4D attention mask, which model.attn_implementation={attn} does "
            f"not take: set model.attn_implementation to one of {', '.join(SHARED_PROMPT_ATTENTION)}, or "
            "dpo.shared_prompt=false (TRL's unshared layout, any attention implementation)"
        ]
    return []


def value_problems(recipe) -> list[str]:
    """Every value of `recipe` out of its range, as `key=value must be ...` texts (empty: all fine)."""
    problems = []
    for key, (test, must), why in RULES:
        present, value = _lookup(recipe, key)
        if not present or value is None:
            continue
        if not _number(value):
            problems.append(f"{key}={value!r} must be a number {must}")
        elif not test(value):
            problems.append(f"{key}={value} must be {must}" + (f" ({why})" if why else ""))
    training = recipe.training or {}
    report_to = report_to_problem(training.get("report_to"))
    if report_to:
        problems.append(report_to)
    problems += loss_problems(recipe) + attention_problems(recipe)
    steps, epochs = training.get("max_steps"), training.get("num_train_epochs")
    if _number(epochs) and epochs == 0 and not (_number(steps) and steps > 0):
        problems.append("training.num_train_epochs=0 with no training.max_steps > 0 trains nothing")
    name = recipe.name
    if not SAFE_NAME.match(str(name)):
        problems.append(
            f"name={name!r} is not safe as a file and job name: use letters, digits, '.', '_', '+', "
            "'-' (up to 100, starting with a letter or digit); set name=... or `name:` in the recipe"
        )
    try:
        recipe.output_dir.format(name=name)
    except (KeyError, IndexError, ValueError) as err:
        problems.append(f"output_dir={recipe.output_dir!r}: only {{name}} may appear in braces ({err!r})")
    mem = recipe.launch.mem_per_gpu
    if mem is not None and not re.fullmatch(r"[1-9]\d*[KMGT]?B?", str(mem).strip().upper()):
        problems.append(f"launch.mem_per_gpu={mem!r} must be a size like 64G or 4000M (null: the cluster's default)")
    if (
        recipe.eval.max_new_tokens == 0 and recipe.eval.backend != "chat"
    ):  # an API's own limit; a local engine has none
        problems.append(
            f"eval.max_new_tokens=0 (no limit) is for eval.backend=chat (API models); "
            f"eval.backend={recipe.eval.backend} needs a number of tokens >= 1"
        )
    if recipe.dpo.margin_mode == "weight" and not recipe.dpo.shared_prompt:
        problems.append(
            "dpo.margin_mode=weight weights each pair's loss, which TRL's own loss path cannot do: it "
            "needs dpo.shared_prompt=true"
        )
    if recipe.data.elapsed_separator != "direct" and not (recipe.data.elapsed and recipe.data.timestamps):
        problems.append(
            f"data.elapsed_separator={recipe.data.elapsed_separator} separates the elapsed badge from the reply: it "
            "needs data.elapsed=true and data.timestamps=true (or data.elapsed_separator=direct)"
        )
    if recipe.dpo.padding_free and not recipe.dpo.shared_prompt:
        problems.append("dpo.padding_free=true packs shared-prompt rows: it needs dpo.shared_prompt=true")
    if recipe.dpo.prompt_cache and not recipe.dpo.shared_prompt:
        problems.append("dpo.prompt_cache=true is a layout of the shared prompt: it needs dpo.shared_prompt=true")
    if recipe.dpo.prompt_cache and recipe.dpo.padding_free:
        problems.append("dpo.prompt_cache and dpo.padding_free are two layouts of the shared prompt: set one false")
    if recipe.dpo.prompt_cache and recipe.training.get("gradient_checkpointing"):
        problems.append(
            "dpo.prompt_cache=true needs training.gradient_checkpointing=false (transformers drops the cache under it)"
        )
    data = recipe.data
    task_sources = {"dpo": DPO_SOURCES, "sft": SFT_SOURCES}.get(recipe.task, ())
    if data.source not in task_sources:  # a source of the other task: its loader would not know it
        other = "sft (TIMER dialogs)" if recipe.task == "dpo" else "dpo (TicToc pairs)"
        problems.append(
            f"data.source={data.source} is a data source of task {other}; task {recipe.task} (this "
            f"recipe, {name}) reads data.source={' | '.join(task_sources)}"
        )
    elif data.source in PATH_SOURCES and not data.path:
        problems.append(
            f"data.source={data.source} needs data.path=FOLDER_OR_FILE"
            + (" or a hub dataset id (e.g. yizecheng/TicToc)" if data.source == "hub" else "")
        )
    if data.direct_answer not in DIRECT_ANSWERS:
        problems.append(f"data.direct_answer={data.direct_answer!r} must be one of {', '.join(DIRECT_ANSWERS)}")
    elif data.direct_answer == "generate":
        if data.direct_answer_backend not in DIRECT_ANSWER_BACKENDS:
            problems.append(
                f"data.direct_answer_backend={data.direct_answer_backend!r} must be one of "
                f"{', '.join(DIRECT_ANSWER_BACKENDS)} (the backends that continue rendered prompts)"
            )
        elif data.direct_answer_backend == "openai" and not recipe.eval.base_url:
            problems.append(
                "data.direct_answer_backend=openai needs eval.base_url (the server that writes the direct answers)"
            )
    return problems


def check_values(recipe) -> None:
    """Raise one RecipeError naming every out-of-range value (see the module docstring)."""
    problems = value_problems(recipe)
    if problems:
        raise RecipeError("; ".join(problems))


def _nearest_existing(path: Path) -> Path | None:
    """The deepest parent folder of `path` that exists, unless that is only the root or the current folder."""
    for parent in path.parents:
        if parent.is_dir():
            return None if str(parent) in ("", ".", parent.anchor) else parent
    return None


def looks_local(value: str) -> bool:
    """True when `value` cannot be a hub id, or names a folder under one that exists here (`outputs/run`)."""
    if not HUB_ID.match(value) or ".." in value or value.endswith("."):
        return True
    head, sep, _ = value.partition("/")
    return bool(sep) and Path(head).is_dir()


# What makes a folder a model transformers (or PEFT) can load: a full model's config or a LoRA adapter's.
MODEL_MARKERS = ("config.json", "adapter_config.json")


def _model_folders_under(folder: Path) -> list[Path]:
    """Subfolders of `folder` (one level) that hold a model, newest checkpoint first."""
    found = [p for p in folder.iterdir() if p.is_dir() and any((p / m).is_file() for m in MODEL_MARKERS)]

    def order(p: Path) -> tuple:
        step = p.name.rsplit("-", 1)[-1]
        return (p.name.startswith("checkpoint-"), int(step) if step.isdigit() else -1, p.name)

    return sorted(found, key=order, reverse=True)


def not_a_model_problem(path: Path, key: str) -> str | None:
    """Why an existing local `path` is no model transformers can load (a file, a folder without config.json or
    adapter_config.json), or None."""
    if path.is_dir():
        if any((path / m).is_file() for m in MODEL_MARKERS):
            return None
        inside = _model_folders_under(path)
        hint = (
            f": did you mean {key}={inside[0]}?"
            if inside
            else ": give the folder that holds the model's config.json (or a LoRA adapter's adapter_config.json), or "
            "a hub id like org/name"
        )
        return f"{key}={path}: this folder holds no model (no config.json or adapter_config.json){hint}"
    return (
        f"{key}={path}: a file, not a model folder: give the folder that holds config.json (or "
        "adapter_config.json), or a hub id like org/name"
    )


def check_model_reference(value: str, key: str) -> None:
    """`value` is an existing local model folder, or a hub id; a local path that does not exist, a file, or a
    folder holding no model is refused."""
    text = str(value)
    local = Path(text).expanduser()
    if local.exists():
        problem = not_a_model_problem(local, key)
        if problem:
            raise RecipeError(problem)
        return
    if not looks_local(text):
        return
    near = _nearest_existing(Path(text).expanduser())
    where = f" (the nearest existing folder is {near})" if near is not None else ""
    raise RecipeError(f"{key}={text}: no such folder{where}; give an existing model folder or a hub id like org/name")


def data_path_problem(recipe) -> str | None:
    """Why the recipe's data source cannot be read here (a file source whose data.path does not exist), or None."""
    data = recipe.data
    if data.source in FILE_SOURCES and data.path and not Path(data.path).expanduser().exists():
        near = _nearest_existing(Path(data.path).expanduser())
        where = f" (the nearest existing folder is {near})" if near is not None else ""
        return f"data.path={data.path}: no such file or folder{where} (data.source={data.source})"
    return None


def check_data_path(recipe) -> None:
    problem = data_path_problem(recipe)
    if problem:
        raise RecipeError(problem)


def _push_problem(recipe) -> str | None:
    """Why `training.push_to_hub=true` cannot push from here (offline, or no hub token), or None: found before
    training, not when the push fails at its end."""
    if not (recipe.training or {}).get("push_to_hub"):
        return None
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_OFFLINE:
        return (
            "training.push_to_hub=true but HF_HUB_OFFLINE=1 forbids every hub request (the repository is made at "
            "the start, the model pushed at the end): unset HF_HUB_OFFLINE, or set training.push_to_hub=false "
            "and upload the output_dir later (`hf upload ORG/NAME OUTPUT_DIR`)"
        )
    if get_token() is None and not (recipe.training or {}).get("hub_token"):
        return (
            "training.push_to_hub=true but no hub token: log in (`hf auth login`) or set HF_TOKEN, or set "
            "training.push_to_hub=false"
        )
    return None


def _installed(modules: tuple[str, ...]) -> bool:
    import importlib.util

    try:
        return all(importlib.util.find_spec(module) is not None for module in modules)
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def report_to_missing_problem(recipe) -> str | None:
    """Which `training.report_to` integrations are not installed here (transformers' Trainer would stop on them after
    data prep, leaving the prepared data behind), with what to pip install; None when all are."""
    value = (recipe.training or {}).get("report_to")
    names = [value] if isinstance(value, str) else value
    if report_to_problem(value) or not names:  # not names at all: value_problems says so
        return None
    missing = [
        name
        for name in names
        if name in REPORT_TO_PACKAGES and not any(_installed(modules) for modules in REPORT_TO_PACKAGES[name][0])
    ]
    if not missing:
        return None
    packages = " ".join(REPORT_TO_PACKAGES[name][1] for name in missing)
    one = len(missing) == 1
    return (
        f"training.report_to={_listed(value)}: {', '.join(missing)} {'is' if one else 'are'} not installed here "
        f"(the Trainer would stop on {'it' if one else 'them'} after data prep): `pip install {packages}`, or take "
        f"{'it' if one else 'them'} out of training.report_to (none: no reporting)"
    )


def input_problems(recipe) -> list[str]:
    """What the recipe reads on this machine and is not there (data.path of a file source, a local model path)."""
    problems = [p for p in (data_path_problem(recipe),) if p]
    try:
        check_model_reference(recipe.model.name_or_path, "model.name_or_path")
    except RecipeError as err:
        problems.append(str(err))
    push = _push_problem(recipe)
    if push:
        problems.append(push)
    reporting = report_to_missing_problem(recipe)
    if reporting:
        problems.append(reporting)
    data = recipe.data
    if data.direct_answer == "generate" and data.direct_answer_model and data.direct_answer_backend != "openai":
        try:
            check_model_reference(data.direct_answer_model, "data.direct_answer_model")
        except RecipeError as err:
            problems.append(str(err))
    return problems


def check_inputs(recipe) -> None:
    """Raise one RecipeError naming every input of `recipe` that does not exist here (see the module docstring)."""
    problems = input_problems(recipe)
    if problems:
        raise RecipeError("; ".join(problems))
