"""The model card (README.md) of a trained checkpoint: what was trained, on which data, how, and how it scored.

    python -m timealign.train.model_card checkpoint=outputs/tiny            # rewrite it, e.g. after eval/run.py

Training writes it into output_dir when it ends (`timealign.train.final_model.write_run_card`, main process only), the
trainers' hub upload writes it before each push (`timealign.train.hub`), and `train/export.py` writes one beside
the merged weights. Built with huggingface_hub's `ModelCard` / `ModelCardData`: the YAML header carries base_model
(hub ids only: the hub refuses a local path there), library_name, license (unknown: the base model's license
applies), tags, and a `timealign` block with the facts a later rewrite cannot read back from the folder (the
command line's overrides, the W&B run's URL, the timealign version and commit of the run).

Sources, first found wins: the arguments; the folder (`timealign_recipe.yaml`, `run_info.json`, `wandb_run.json`,
the prepared data's manifest.json); for a `checkpoint-N`, the output_dir around it; the card's own `timealign`
block. The data fingerprint is the prepared-data fingerprint (`timealign.data.fingerprint`: settings, source
files' content, format version), i.e. the `<kind>-<sha256[:12]>` folder name, not run_info.json's hash of Arrow
files. The evaluation table reads every suite report (`<suite>.json`) in the folder's `eval*/` folders (eval/run.py
writes `<checkpoint>/eval` by default; `<output_dir>/eval-base` holds the base model's) and the folders given;
a metric's interval comes from the report's `intervals` block (`timealign.eval.bootstrap`; `<metric>_ci` in
`overall` is read too), "n/a" when the report has none. Every row names the data its report scored (the report's
`data` block: source, path, split, sample count, fingerprint) and whether that is the held-out split of the data the
model was trained on; results on different data are separate rows, the training data's first, so a synthetic and a
real score never read as one column of "this model".
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from timealign.config.options import RecipeError
from timealign.config.schema import opt
from timealign.config.tracking import RUN_INFO_FILE, TRAIN_LOG, TRAINING_RUN_FILE, run_folders
from timealign.config.written import card_may_replace, foreign_card_message, note_written
from timealign.render.checkpoint import CHECKPOINT_RECIPE

logger = logging.getLogger("timealign.train.model_card")

CARD_FILE = "README.md"
CARD_KEY = "timealign"  # the metadata block a rewrite reads back
PREPARED_MANIFEST = "manifest.json"
LICENSE = "unknown"  # the base model's license applies; we cannot know it for every base
_LOW = ("low", "lo", "lower")
_HIGH = ("high", "hi", "upper")
METHODS = {"dpo": "offset-DPO", "sft": "TIMER multi-task SFT"}


class ModelCardError(RecipeError):
    """The folder has no card to write (not a checkpoint); the message says what is missing."""


# ---------------------------------------------------------------------------------------------- facts


@dataclass
class EvalRow:
    suite: str
    metric: str
    value: Any
    interval: tuple[float, float] | None
    level: float | None
    n: Any
    where: str  # the eval folder, relative to the card's folder when inside it
    model: str  # "this model", or the checkpoint the report scored
    data: str = "unknown (the report names no data)"  # the report's data label (timealign.data.identity)
    fingerprint: str | None = None  # the report's data fingerprint
    split: str | None = None


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ModelCardError(f"{path}: not valid JSON ({err})") from None
    return value if isinstance(value, dict) else None


def _first_json(folder: Path, name: str) -> dict | None:
    for place in run_folders(folder):
        found = _read_json(place / name)
        if found is not None:
            return found
    return None


def previous_block(folder: Path) -> dict:
    """The `timealign` metadata block of the card already in `folder` (empty without one)."""
    path = folder / CARD_FILE
    if not path.is_file():
        return {}
    from huggingface_hub import ModelCard

    block = ModelCard.load(path).data.to_dict().get(CARD_KEY)
    return block if isinstance(block, dict) else {}


def recipe_dict(folder: Path, recipe=None) -> dict | None:
    """The resolved recipe as a dict: the given one, else the folder's timealign_recipe.yaml."""
    if recipe is not None:
        return recipe.to_dict() if hasattr(recipe, "to_dict") else dict(recipe)
    for place in run_folders(folder):
        path = place / CHECKPOINT_RECIPE
        if path.is_file():
            raw = yaml.safe_load(path.read_text())
            if not isinstance(raw, dict):
                raise ModelCardError(f"{path}: not a recipe (a YAML mapping)")
            return raw
    return None


def prepared_fingerprint(folder: Path, recipe: dict | None, data_dir=None) -> dict | None:
    """{kind, sha256, folder} of the prepared data the run trained on: `data_dir`, else the recipe's
    data.prepared_dir, else the one prepared folder under `<output_dir>/data/` (None when it cannot be told)."""
    from timealign.data.fingerprint import read_fingerprint

    candidates: list[Path] = []
    if data_dir is not None:
        candidates = [Path(data_dir)]
    elif recipe and (recipe.get("data") or {}).get("prepared_dir"):
        candidates = [Path(recipe["data"]["prepared_dir"])]
    else:
        kind = "dialogs" if (recipe or {}).get("task") == "sft" else "pairs"
        for place in run_folders(folder):
            found = sorted(p for p in (place / "data").glob(f"{kind}-*") if (p / PREPARED_MANIFEST).is_file())
            if found:
                if len(found) > 1:  # earlier runs' data beside this run's: the folder name does not say which
                    logger.warning(
                        "%s holds %d prepared-data folders; the card names none", place / "data", len(found)
                    )
                    return None
                candidates = found
                break
    for path in candidates:
        if (path / PREPARED_MANIFEST).is_file():
            kind = "dialogs" if (recipe or {}).get("task") == "sft" else "pairs"
            fingerprint = read_fingerprint(path, kind)
            if fingerprint is not None:
                return {"kind": fingerprint.kind, "sha256": fingerprint.sha256, "folder": path.name}
    return None


def _interval(raw) -> tuple[float, float] | None:
    """[low, high] or {low|lo|lower, high|hi|upper} -> (low, high); anything else None."""
    if isinstance(raw, (list, tuple)) and len(raw) == 2 and all(isinstance(v, (int, float)) for v in raw):
        return float(raw[0]), float(raw[1])
    if isinstance(raw, dict):
        low = next((raw[k] for k in _LOW if isinstance(raw.get(k), (int, float))), None)
        high = next((raw[k] for k in _HIGH if isinstance(raw.get(k), (int, float))), None)
        if low is not None and high is not None:
            return float(low), float(high)
    return None


def metric_interval(report: dict, metric: str) -> tuple[tuple[float, float] | None, float | None]:
    """(interval, confidence level) of one overall metric, read from wherever a suite report may keep it: the
    `intervals` block of `timealign.eval.bootstrap` (`{"confidence": 0.95, "metrics": {metric: [low, high]}}`),
    an `intervals` block keyed by metric (top level or inside `overall`), `overall["<metric>_ci"]` or
    `overall["<metric>_ci_low"/"_ci_high"]`. (None, level) when the report has no interval for it."""
    overall = report.get("overall") or {}
    blocks = [b for b in (report.get("intervals"), overall.get("intervals")) if isinstance(b, dict)]
    level = next(
        (b.get(k) for b in blocks for k in ("confidence", "level") if isinstance(b.get(k), (int, float))), None
    )
    blocks += [b["metrics"] for b in blocks if isinstance(b.get("metrics"), dict)]  # timealign.eval.bootstrap
    if level is None:
        settings = report.get("settings") or {}
        level = settings.get("confidence") if isinstance(settings.get("confidence"), (int, float)) else None
    candidates = [overall.get(f"{metric}_ci")]
    candidates += [b.get(metric) for b in blocks]
    candidates.append({"low": overall.get(f"{metric}_ci_low"), "high": overall.get(f"{metric}_ci_high")})
    for raw in candidates:
        interval = _interval(raw)
        if interval is not None:
            if isinstance(raw, dict) and isinstance(raw.get("level", raw.get("confidence")), (int, float)):
                level = raw.get("level", raw.get("confidence"))
            return interval, level
    return None, level


def _is_metric_key(key: str) -> bool:
    return not (key == "n" or key == "intervals" or key.endswith(("_ci", "_ci_low", "_ci_high")))


def eval_rows(folder: Path, extra_dirs=()) -> list[EvalRow]:
    """One row per overall metric of every suite report in `folder/eval*/` and in `extra_dirs`. Floats always;
    counts (ints) only when the report gives them an interval."""
    dirs = [d for d in sorted(folder.glob("eval*")) if d.is_dir()] + [Path(d) for d in extra_dirs]
    rows: list[EvalRow] = []
    seen: set[Path] = set()
    for directory in dirs:
        if not directory.is_dir():
            raise ModelCardError(f"eval folder {directory}: no such folder")
        for path in sorted(directory.glob("*.json")):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            report = _read_json(path)
            if not report or not isinstance(report.get("overall"), dict) or "suite" not in report:
                continue  # not a suite report (a cache index, a summary)
            checkpoint = str(report.get("checkpoint") or "")
            this = bool(checkpoint) and Path(checkpoint).resolve() == folder.resolve()
            try:
                where = str(directory.resolve().relative_to(folder.resolve()))
            except ValueError:
                where = str(directory)
            overall = report["overall"]
            for key, value in overall.items():
                if not _is_metric_key(key) or isinstance(value, (bool, dict, list, str)):
                    continue
                interval, level = metric_interval(report, key)
                if isinstance(value, int) and interval is None:
                    continue  # a count (tp, tool_calls, ...): the table is for rates
                data = report.get("data") if isinstance(report.get("data"), dict) else {}
                rows.append(
                    EvalRow(
                        suite=str(report["suite"]),
                        metric=key,
                        value=value,
                        interval=interval,
                        level=level,
                        n=overall.get("n", data.get("samples")),
                        where=where,
                        model="this model" if this else (checkpoint or "?"),
                        data=data.get("label") or EvalRow.data,
                        fingerprint=data.get("fingerprint"),
                        split=data.get("split"),
                    )
                )
    return rows


def label_training_data(rows: list[EvalRow], fingerprint: dict | None, eval_split: str | None) -> list[EvalRow]:
    """Each row's data cell says whether it is the held-out split of the data the model was trained on; rows on the
    training data come first. Results on different data are never one row: every row carries its own data."""
    for row in rows:
        if fingerprint and row.fingerprint:
            same = row.fingerprint == fingerprint.get("sha256") and row.split == eval_split
            row.data += " (the training data's held-out split)" if same else " (not the training data)"
    order = {id(r): i for i, r in enumerate(rows)}
    return sorted(rows, key=lambda r: (not r.data.endswith("held-out split)"), order[id(r)]))


def _epochs_trained(folder: Path) -> float | None:
    """The last epoch the trainer logged (train_log.json beside the saved model), None without a log."""
    for place in run_folders(folder):
        path = place / TRAIN_LOG
        if path.is_file():
            try:
                log = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise ModelCardError(f"{path}: not valid JSON ({err})") from None
            epochs = [e["epoch"] for e in log if isinstance(e, dict) and isinstance(e.get("epoch"), (int, float))]
            return float(epochs[-1]) if epochs else None
    return None


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


def gather(
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
) -> dict:
    """Every fact the card of `folder` shows, from the arguments, the run's folder (`source`, default `folder`:
    an export reads the trained folder's records) and that folder's previous card (see the module doc)."""
    import timealign
    from timealign.train.tracking import git_revision

    folder = Path(folder)
    src = Path(source) if source is not None else folder
    previous = previous_block(src)
    raw = recipe_dict(src, recipe)
    if raw is None:
        raise ModelCardError(
            f"{src}: no {CHECKPOINT_RECIPE}: not a folder timealign trained (train/dpo.py, "
            "train/sft.py) or exported (train/export.py)"
        )
    overrides = getattr(recipe, "overrides", None)
    if overrides is None:
        overrides = previous.get("overrides", {})
    run_info = _first_json(src, RUN_INFO_FILE) or {}
    wandb = _first_json(src, TRAINING_RUN_FILE) or {}
    fingerprint = prepared_fingerprint(src, raw, data_dir) or previous.get("data_fingerprint")
    git = run_info.get("git") or previous.get("git")
    if git is None and recipe is not None:  # training is writing the card now: this checkout ran it
        git = git_revision()
    wandb_record = {k: wandb.get(k) for k in ("id", "name", "project", "entity", "group") if wandb.get(k)}
    wandb_record = wandb_record or dict(previous.get("wandb") or {})
    url = wandb_url or wandb_record.get("url")
    if not url and wandb_record.get("entity") and wandb_record.get("project") and wandb_record.get("id"):
        url = f"https://wandb.ai/{wandb_record['entity']}/{wandb_record['project']}/runs/{wandb_record['id']}"
    if url:
        wandb_record["url"] = url
    adapter = (folder / "adapter_config.json").is_file()
    if not adapter and not (folder / "config.json").is_file():  # mid-training: no model saved here yet
        adapter = bool((raw.get("lora") or {}).get("enabled"))
    return {
        "recipe": raw,
        "recipe_name": raw.get("name") or previous.get("recipe"),
        "source": getattr(recipe, "source", None) or previous.get("source"),
        "overrides": {str(k): str(v) for k, v in (overrides or {}).items()},
        "data_fingerprint": fingerprint,
        "git": git,
        "version": previous.get("version") if recipe is None and previous.get("version") else timealign.__version__,
        "wandb": wandb_record,
        "run_info": run_info,
        "epochs_trained": _epochs_trained(src),
        "adapter": adapter,
        "merged_from_adapter": bool(merged_from_adapter) or bool(previous.get("merged_from_adapter")),
        "exported_from": exported_from or previous.get("exported_from"),
        "evals": label_training_data(
            eval_rows(src, eval_dirs), fingerprint, (raw.get("data") or {}).get("eval_split")
        ),
        "folder": folder,
        "title": title or folder.name,
    }


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
