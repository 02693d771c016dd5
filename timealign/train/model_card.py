"""The model card (README.md) of a trained checkpoint: what was trained, on which data, how, and how it scored.

    python -m timealign.train.model_card checkpoint=outputs/tiny            # rewrite it, e.g. after eval/run.py

Training writes it into output_dir when it ends (`timealign.train.final_model.write_run_card`, main process only), the
trainers' hub upload writes it before each push (`timealign.train.hub`), and `train/export.py` writes one beside
the merged weights. Built with huggingface_hub's `ModelCard` / `ModelCardData`: the YAML header carries base_model
(hub ids only: the hub refuses a local path there), library_name, license (unknown: the base model's license
applies), tags, and a `timealign` block with the facts a later rewrite cannot read back from the folder (the
command line's overrides, the W&B run's URL, the timealign version and commit of the run).

The facts are gathered by `timealign.train.card_facts`; this module renders and writes the card. Sources, first
found wins: the arguments; the folder (`timealign_recipe.yaml`, `run_info.json`, `wandb_run.json`,
the prepared data's manifest.json); for a `checkpoint-N`, the output_dir around it; the card's own `timealign`
block. The data fingerprint is the prepared-data fingerprint (`timealign.data.fingerprint`: settings, source
files' content, format version), i.e. the `<kind>-<sha256[:12]>` folder name, not run_info.json's hash of Arrow
files. The evaluation table reads every suite report (`<suite>.json`) in the folder's `eval*/` folders (eval/run.py
writes `<checkpoint>/eval` by default; `<output_dir>/eval-base` holds the base model's) and the folders given;
a metric's interval comes from the report's `intervals` block (`timealign.eval.bootstrap`), "n/a" when the report
has none. Every row names the data its report scored (the report's
`data` block: source, path, split, sample count, fingerprint) and whether that is the held-out split of the data the
model was trained on; results on different data are separate rows, the training data's first, so a synthetic and a
real score never read as one column of "this model".
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from timealign.config.options import RecipeError
from timealign.config.schema import opt
from timealign.config.written import card_may_replace, foreign_card_message, note_written
from timealign.train.card_facts import CARD_FILE, CARD_KEY, EvalRow, ModelCardError, gather

logger = logging.getLogger("timealign.train.model_card")

LICENSE = "unknown"  # the base model's license applies; we cannot know it for every base
METHODS = {"dpo": "offset-DPO", "sft": "TIMER multi-task SFT"}


# ---------------------------------------------------------------------------------------------- rendering


def hub_base_model(name: str | None) -> str | None:
    """`name` when it is a hub model id (the card header's base_model); None for a local folder or tiny name."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or Path(name).exists() or name.startswith(("/", ".", "~")) or name.count("/") != 1:
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


def _fmt(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _trl_default(task: str, key: str):
    """The TRL config's default for a training key the recipe left out (what the run used)."""
    from trl import DPOConfig, SFTConfig

    cls = DPOConfig if task == "dpo" else SFTConfig
    for f in dataclasses.fields(cls):
        if f.name == key:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
    return None


def _setting(task: str, training: dict, key: str):
    return training[key] if key in training else _trl_default(task, key)


def training_table(facts: dict) -> list[tuple[str, str]]:
    recipe = facts["recipe"] or {}
    task = recipe.get("task", "dpo")
    training = recipe.get("training") or {}
    data = recipe.get("data") or {}
    lora = recipe.get("lora") or {}
    timer = recipe.get("timer") or {}
    info = facts["run_info"]
    rows = [("method", METHODS.get(task, task))]
    if task == "dpo":
        loss = _setting(task, training, "loss_type")
        rows += [
            ("beta", _fmt(_setting(task, training, "beta"))),
            ("offset scale (delta = scale x margin)", _fmt(data.get("offset_scale", 1.0))),
            ("loss type", ", ".join(loss) if isinstance(loss, list) else _fmt(loss)),
        ]
    else:
        rows += [
            ("lambda (time loss weight)", _fmt(timer.get("lambda_time"))),
            ("TIMER special tokens", _fmt(timer.get("special_tokens"))),
            ("turn order", _fmt(timer.get("order"))),
            ("loss normalization", _fmt(timer.get("loss_normalization"))),
        ]
    rows.append(("base model", f"`{(recipe.get('model') or {}).get('name_or_path', 'n/a')}`"))
    source = facts["source"]
    rows.append(("recipe", f"`{facts['recipe_name'] or 'n/a'}`" + (f" (`{source}`)" if source else "")))
    overrides = facts["overrides"]
    rows.append(("command-line overrides", " ".join(f"`{k}={v}`" for k, v in overrides.items()) or "none"))
    if lora.get("enabled"):
        tuning = (
            f"LoRA (r {lora.get('r')}, alpha {lora.get('alpha')}, dropout {lora.get('dropout')}, "
            f"targets {lora.get('target_modules')})"
        )
        if task == "sft" and timer.get("special_tokens"):
            tuning += f"; new tokens trained as {timer.get('lora_new_tokens')}"
        if facts["merged_from_adapter"]:
            tuning += "; merged into the base weights"
    else:
        tuning = "full fine-tuning"
    rows.append(("fine-tuning", tuning))
    rows.append(("learning rate", _fmt(_setting(task, training, "learning_rate"))))
    max_steps = _setting(task, training, "max_steps")
    epochs = f"{_fmt(_setting(task, training, 'num_train_epochs'))}"
    if isinstance(max_steps, int) and max_steps > 0:
        epochs = f"max_steps {max_steps} (instead of num_train_epochs)"
    if facts["epochs_trained"] is not None:
        epochs += f"; {facts['epochs_trained']:.3g} trained"
    rows.append(("epochs", epochs))
    if info.get("global_step") is not None:
        rows.append(("optimizer steps", f"{info['global_step']} on {info.get('world_size', '?')} process(es)"))
    # what the run trained with (run_info.json: batch.global_size solves these at launch), else the recipe's values
    per_device = info.get("per_device_train_batch_size") or _setting(task, training, "per_device_train_batch_size")
    accumulation = info.get("gradient_accumulation_steps") or _setting(task, training, "gradient_accumulation_steps")
    processes = info.get("world_size")
    if isinstance(processes, int) and isinstance(per_device, int) and isinstance(accumulation, int):
        rows.append(
            (
                "batch",
                f"{per_device * processes * accumulation} pairs per optimizer step = {per_device} per "
                f"device x {processes} process(es) x {accumulation} accumulation",
            )
        )
    else:
        rows.append(("batch", f"{per_device} per device x {accumulation} accumulation"))
    rows.append(("max length", _fmt(_setting(task, training, "max_length"))))
    rows.append(("data source", f"`{data.get('source', 'n/a')}`"))
    fingerprint = facts["data_fingerprint"]
    rows.append(
        ("data fingerprint", f"`{fingerprint['folder']}` (sha256 {fingerprint['sha256']})" if fingerprint else "n/a")
    )
    rows.append(("prompt protocol (data.protocol)", f"`{data.get('protocol', 'n/a')}`"))
    rows.append(
        (
            "timestamps",
            _fmt(data.get("timestamps")) + (f"; elapsed badge {_fmt(data.get('elapsed'))}" if task == "dpo" else ""),
        )
    )
    wandb = facts["wandb"]
    if wandb.get("url"):
        rows.append(("W&B run", f"[{wandb.get('name') or wandb.get('id')}]({wandb['url']}) (id `{wandb.get('id')}`)"))
    elif wandb.get("id"):
        rows.append(("W&B run", f"`{wandb.get('name')}` (id `{wandb['id']}`, project `{wandb.get('project')}`)"))
    else:
        rows.append(("W&B run", "none"))
    git = facts["git"] or {}
    commit = git.get("commit") or "unknown"
    rows.append(("timealign", f"{facts['version']}, git `{commit[:12]}`" + (" (dirty)" if git.get("dirty") else "")))
    if facts["exported_from"]:
        rows.append(("exported from", f"`{facts['exported_from']}`"))
    return rows


def eval_section(rows: list[EvalRow]) -> str:
    if not rows:
        return (
            "No evaluation reports here yet. Evaluate (`python eval/run.py checkpoint=PATH`, "
            "reports in PATH/eval), then rewrite this card: `python -m timealign.train.model_card "
            "checkpoint=PATH`."
        )
    levels = {r.level for r in rows if r.level is not None}
    ci = f"{round(levels.pop() * 100)}% CI" if len(levels) == 1 else "CI"
    lines = [f"| suite | metric | value | {ci} | n | data | model | report |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        interval = f"[{r.interval[0]:.4g}, {r.interval[1]:.4g}]" if r.interval else "n/a"
        lines.append(
            f"| {r.suite} | {r.metric} | {_fmt(r.value)} | {interval} | {_fmt(r.n)} | {r.data} | {r.model} | "
            f"`{r.where}` |"
        )
    return "\n".join(lines)


def usage_section(facts: dict) -> str:
    task = (facts["recipe"] or {}).get("task", "dpo")
    if facts["adapter"]:
        load = (
            "from peft import AutoPeftModelForCausalLM\nfrom transformers import AutoTokenizer\n\n"
            "model = AutoPeftModelForCausalLM.from_pretrained(PATH)  # the base model plus this LoRA adapter\n"
            "tokenizer = AutoTokenizer.from_pretrained(PATH)"
        )
        note = (
            "A LoRA adapter: `python train/export.py checkpoint=PATH out=MERGED` writes a standalone "
            "checkpoint (vLLM, TGI, any transformers loader)."
        )
    else:
        load = (
            "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            "model = AutoModelForCausalLM.from_pretrained(PATH)\n"
            "tokenizer = AutoTokenizer.from_pretrained(PATH)"
        )
        note = "A standalone checkpoint: transformers, vLLM (`vllm serve PATH`) and other loaders read it as is."
    if task == "sft":
        note += (
            " Prompts use the TIMER format, every turn `<SPK> speaker <TIME> interval <UTT> utterance`: the "
            "model first writes how long until its reply (the interval), then the reply "
            "(`timealign.suites.timelychat.infer.TimerInference`)."
        )
    else:
        note += (
            " Prompts are rendered by timealign's `PromptRenderer` (the chat template with the tools, and "
            "timestamps as the table above says)."
        )
    return f"```python\n{load}\n```\n\n{note}"


def build_card(facts: dict, extra_tags=()):
    """The `huggingface_hub.ModelCard` for `facts` (from `gather`)."""
    from huggingface_hub import ModelCard, ModelCardData

    recipe = facts["recipe"] or {}
    task = recipe.get("task", "dpo")
    base = (recipe.get("model") or {}).get("name_or_path")
    tags = ["timealign", "trl"] + (["dpo", "offset-dpo"] if task == "dpo" else ["sft", "timer"])
    if facts["adapter"] or (recipe.get("lora") or {}).get("enabled"):
        tags.append("lora")
    tags += [t for t in extra_tags if t not in tags]
    block = {
        "recipe": facts["recipe_name"],
        "source": facts["source"],
        "task": task,
        "overrides": facts["overrides"],
        "data_fingerprint": facts["data_fingerprint"],
        "git": facts["git"],
        "version": facts["version"],
        "wandb": facts["wandb"] or None,
        "merged_from_adapter": facts["merged_from_adapter"] or None,
        "exported_from": facts["exported_from"],
    }
    data = ModelCardData(
        base_model=hub_base_model(base),
        library_name="peft" if facts["adapter"] else "transformers",
        license=LICENSE,
        pipeline_tag="text-generation",
        tags=tags,
        **{CARD_KEY: {k: v for k, v in block.items() if v is not None}},
    )
    name = facts["title"]
    what = (
        "offset-DPO on TicToc-style preference pairs (call the tool again, or answer directly, given the time "
        "since the last call)"
        if task == "dpo"
        else "TIMER multi-task SFT on TimelyChat-style dialogs (predict the time until the reply, then the reply)"
    )
    table = "\n".join(["| setting | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in training_table(facts)])
    content = "\n\n".join(
        [
            f"---\n{data.to_yaml()}\n---",
            f"# {name}",
            (
                f"`{base}` fine-tuned with {what}, by timealign (a post-training pipeline that teaches LLMs to "
                f"respect "
                "elapsed time)."
            ),
            "## Training",
            table,
            "## Evaluation",
            eval_section(facts["evals"]),
            "## Use",
            usage_section(facts),
            "## License",
            f"`{LICENSE}` here: the base model's license and terms apply.",
        ]
    )
    return ModelCard(content + "\n")


def write_model_card(
    folder: str | Path,
    recipe=None,
    *,
    data_dir=None,
    wandb_url: str | None = None,
    eval_dirs=(),
    exported_from: str | None = None,
    merged_from_adapter: bool | None = None,
    source: str | Path | None = None,
    title: str | None = None,
    extra_tags=(),
) -> Path:
    """Write (or rewrite) `<folder>/README.md`; returns its path. `recipe`: the run's Recipe at training time
    (None: read `timealign_recipe.yaml` and the previous card). `source`: the trained folder an export was made
    from (its records and evaluations describe the export); `title`: the card's heading (default: the folder's
    name). Call it on one process only."""
    facts = gather(
        folder,
        recipe,
        data_dir=data_dir,
        wandb_url=wandb_url,
        eval_dirs=eval_dirs,
        exported_from=exported_from,
        merged_from_adapter=merged_from_adapter,
        source=source,
        title=title,
    )
    path = Path(folder) / CARD_FILE
    if not card_may_replace(path):  # a README.md timealign did not write is never replaced
        raise ModelCardError(foreign_card_message(path))
    tmp = path.with_name(f".{CARD_FILE}.tmp")  # whole or absent: a hub upload may read it meanwhile
    build_card(facts, extra_tags).save(tmp)
    tmp.replace(path)
    note_written(path)  # the run's record lists it: a later card may replace it, overwrite_output_dir delete it
    return path


def live_wandb_url() -> str | None:
    """The URL of the W&B run open in this process (None when none is, or offline)."""
    try:
        import wandb
    except ImportError:
        return None
    run = wandb.run
    return getattr(run, "url", None) if run is not None else None


# ---------------------------------------------------------------------------------------------- CLI


@dataclass
class CardOptions:
    checkpoint: str | None = opt(
        None, "the trained folder (output_dir, checkpoint-N, or an export) whose README.md to rewrite"
    )
    eval: str | None = opt(None, "more eval report folders, comma-separated (the folder's own eval*/ are always read)")


def _command():
    from timealign.config.cli import Command

    return Command(
        prog="python -m timealign.train.model_card",
        summary="Rewrites the model card (README.md) of a trained folder from its recipe, run records, prepared-data "
        "fingerprint and evaluation reports (<folder>/eval*/<suite>.json, with their bootstrap intervals), "
        "e.g. after eval/run.py. Training and train/export.py write it themselves.",
        options=CardOptions,
        recipe="none",
        examples="    python -m timealign.train.model_card checkpoint=outputs/tiny eval=results/tiny-eval",
    )


COMMAND = _command()


def main(argv: list[str] | None = None) -> int:
    from timealign.config.cli import run_command

    def rewrite(invocation) -> int:
        opts = invocation.options
        if not opts.checkpoint:
            raise RecipeError("checkpoint=DIR is required (the trained folder)")
        folder = Path(opts.checkpoint)
        if not folder.is_dir():
            raise RecipeError(f"checkpoint={opts.checkpoint}: no such folder")
        extra = [d for d in (opts.eval or "").split(",") if d]
        print(f"wrote {write_model_card(folder, eval_dirs=extra)}")
        return 0

    return run_command(COMMAND, argv, rewrite)


if __name__ == "__main__":
    import sys

    sys.exit(main())
