"""A standalone checkpoint from a trained folder (`train/export.py` is the thin script that calls `main`).

    python train/export.py checkpoint=outputs/timer3b out=exports/timer3b

- A LoRA adapter (adapter_config.json): its base model is loaded in float32, grown to the adapter's tokenizer when
  that has more tokens than the base has embedding rows (TIMER's `<SPK>/<TIME>/<UTT>`), the adapter is applied and
  merged (`merge_and_unload`: LoRA deltas, and the added tokens' rows, whether trained as `trainable_tokens` or
  `modules_to_save`), cast to `dtype` and saved as safetensors. The adapter must carry the rows of every token the
  base lacks; otherwise their values would be whatever the loader drew, and the export is refused.
- A full fine-tune (config.json): validated (config, complete weights, a tokenizer whose tokens all have embedding
  rows) and copied as is.
Both get the checkpoint's tokenizer (its added special tokens included), its `timealign_recipe.yaml` (evaluation
reads the TIMER render settings from it) and a model card (`timealign.train.model_card`) describing the run, with
the trained folder's records and evaluation reports. Run records (run_info.json, wandb_run.json, logs), prepared
data and evaluation folders are not copied. The folder is written to a temporary sibling and renamed into place.

`out` is a new or empty folder, or one a previous export wrote: the export lists its files in
`out/timealign_run.json` (`timealign.config.written`: `written`, each file with its size and modification time; a
model card rewritten later joins the list). `overwrite=true` replaces exactly those files; a folder holding anything
else (a user's file, a listed file edited since, an export from before the list) is refused in one line, exit 2,
and nothing in it changes: timealign never deletes or overwrites a file it did not write.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import Command, run_command
from timealign.config.schema import opt
from timealign.config.written import (
    RUN_FILE,
    TEMPORARY,
    WRITTEN,
    foreign_entries,
    signatures,
    unowned_message,
    write_record,
    written_files,
)
from timealign.render.checkpoint import CHECKPOINT_RECIPE
from timealign.train.card_facts import CARD_FILE, recipe_dict
from timealign.train.checkpoints import checkpoint_folders, weights_problem
from timealign.train.hub import upload_patterns
from timealign.train.model_card import write_model_card

logger = logging.getLogger("timealign.train.export")

ADAPTER_CONFIG = "adapter_config.json"
MODEL_CONFIG = "config.json"
DTYPES = ("auto", "float32", "bfloat16", "float16")


class ExportError(ValueError):
    """The folder cannot be exported (not a checkpoint, incomplete, an adapter that misses rows); exit code 2, as
    every refusal of a command is."""


@dataclass
class ExportOptions:
    checkpoint: str | None = opt(
        None, "the trained folder: output_dir or a checkpoint-N in it (LoRA adapter or full model)"
    )
    out: str | None = opt(None, "where the standalone checkpoint goes (a new or empty folder)")
    dtype: str = opt(
        "auto",
        "LoRA: dtype of the merged weights, auto | float32 | bfloat16 | float16 (auto: the base "
        "model's); the merge itself runs in float32. A full fine-tune is copied unchanged",
    )
    overwrite: bool = opt(
        False, "replace the files a previous export wrote in `out` (a folder holding any other file is refused)"
    )


COMMAND = Command(
    prog="python train/export.py",
    summary="Exports a trained checkpoint as a standalone model folder: a LoRA adapter is merged into its base "
    "(TIMER's added tokens included) and saved as safetensors; a full fine-tune is validated and copied. "
    "Writes the tokenizer (with its added special tokens), timealign_recipe.yaml and a model card "
    "(README.md). Rewrite a card later, e.g. after evaluation: python -m timealign.train.model_card "
    "checkpoint=DIR.",
    options=ExportOptions,
    recipe="none",
    examples="    python train/export.py checkpoint=outputs/tiny-timer out=exports/tiny-timer\n"
    "    python train/export.py checkpoint=outputs/llama8b/checkpoint-400 out=exports/llama8b-400 "
    "dtype=bfloat16",
)


# ---------------------------------------------------------------------------------------------- validation


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ExportError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(value, dict):
        raise ExportError(f"{path}: not a JSON object")
    return value


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file()


def checkpoint_kind(folder: str | Path) -> str:
    """ "adapter" (a LoRA adapter folder) or "full" (a model folder); ExportError saying why it is neither."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ExportError(f"checkpoint={folder}: no such folder")
    if (folder / ADAPTER_CONFIG).is_file():
        kind = "adapter"
    elif (folder / MODEL_CONFIG).is_file():
        kind = "full"
    else:
        steps = checkpoint_folders(folder)
        if steps:
            raise ExportError(
                f"{folder} holds no final model ({MODEL_CONFIG} or {ADAPTER_CONFIG}): its training "
                f"has not finished. Finish it (the same training command resumes), or export a "
                f"checkpoint: checkpoint={steps[-1]}"
            )
        raise ExportError(
            f"{folder} is not a checkpoint: it has neither {MODEL_CONFIG} (a full model) nor "
            f"{ADAPTER_CONFIG} (a LoRA adapter). Point checkpoint= at a training output_dir or a "
            "checkpoint-N folder in it"
        )
    config = _read_json(folder / (ADAPTER_CONFIG if kind == "adapter" else MODEL_CONFIG))
    if kind == "full" and "model_type" not in config:
        raise ExportError(f"{folder / MODEL_CONFIG} has no model_type: not a transformers model config")
    problem = weights_problem(folder)
    if problem:
        raise ExportError(f"{folder}: the weights are incomplete or missing: {problem}")
    if kind == "adapter" and not any(
        (folder / n).is_file() for n in ("adapter_model.safetensors", "adapter_model.bin")
    ):
        raise ExportError(f"{folder}: {ADAPTER_CONFIG} but no adapter_model.safetensors")
    if not _has_tokenizer(folder):
        raise ExportError(
            f"{folder} has no tokenizer (tokenizer_config.json / tokenizer.json); training saves one beside the model"
        )
    return kind


EXPORT_WRITES = "the export would write its model, tokenizer and README.md"


def _export_owns(out: Path):
    """`foreign_entries`' test for an export folder: an entry is the export's when its files are all listed, as
    they are now, in the folder's record of what the export wrote (none are without a record)."""
    written = written_files(out)

    def owned_file(path: Path) -> bool:
        if path.is_symlink() or not path.is_file():
            return False
        stat = path.stat()
        return written.get(path.relative_to(out).as_posix()) == [stat.st_size, stat.st_mtime_ns]

    def owned(path: Path) -> bool:
        if written is None or path.is_symlink():
            return False
        if path.name == RUN_FILE:
            return path.is_file()
        if path.is_dir():
            found = [Path(here) / name for here, dirs, names in os.walk(path) for name in dirs + names]
            files = [p for p in found if not (p.is_dir() and not p.is_symlink())]
            return bool(files) and all(owned_file(p) for p in files)
        return owned_file(path)

    return owned


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an `out` that is a file, holds files no export wrote, or (without overwrite) holds an export."""
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise RecipeError(f"out={out} is not a folder; export to a folder of its own: out=NEW_FOLDER")
    entries = foreign_entries(out, _export_owns(out))
    entries += sorted(p.name for p in out.iterdir() if TEMPORARY.match(p.name) and p.is_dir() and not p.is_symlink())
    if entries:
        raise RecipeError(unowned_message("out", out, entries, EXPORT_WRITES, " (overwrite=true included)"))
    if any(out.iterdir()) and not overwrite:
        raise RecipeError(f"out={out} already holds files; pick a new folder or add overwrite=true")


def _prepare_out(checkpoint: Path, out: Path, overwrite: bool) -> Path:
    """The temporary sibling to write into; refuses an `out` inside the checkpoint or holding files."""
    src, dst = checkpoint.resolve(), out.resolve()
    if dst == src or src in dst.parents or dst in src.parents:
        raise RecipeError(f"out={out} is, is inside or holds the checkpoint folder; export to a folder of its own")
    _check_out(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.export-tmp"
    if tmp.exists():
        shutil.rmtree(tmp)  # left by a killed export
    tmp.mkdir()
    return tmp


def _record_export(tmp: Path, checkpoint: Path, kind: str) -> None:
    """List what the export wrote (`overwrite=true` replaces those files only)."""
    export = {"checkpoint": str(checkpoint), "kind": kind, "exported": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    write_record(tmp, {"export": export, WRITTEN: dict(sorted(signatures(tmp).items()))})


def _publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move `tmp` into place; a previous export in `out` (checked again: the merge takes a while) goes first, file by
    file as its record lists them; `out.rmdir` fails, deleting nothing more, if anything else is there."""
    _check_out(out, overwrite)
    if out.exists():
        written = written_files(out) or {}
        for rel in sorted(written, key=lambda r: -len(Path(r).parts)):
            (out / rel).unlink(missing_ok=True)
            for folder in (out / rel).parents:
                if folder == out:
                    break
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        for path in out.iterdir():  # the record and timealign's torn temporaries
            if path.name == RUN_FILE or TEMPORARY.match(path.name):
                path.unlink()
        out.rmdir()
    tmp.rename(out)


def _check_vocab(folder: Path, tokenizer, rows: int) -> None:
    if len(tokenizer) > rows:
        raise ExportError(
            f"{folder}: the tokenizer has {len(tokenizer)} tokens but the model only {rows} embedding "
            "rows: the added tokens have no weights"
        )


# ---------------------------------------------------------------------------------------------- merge / copy


def _leaf_name(model, module) -> str:
    for name, candidate in model.named_modules():
        if candidate is module:
            return name.split(".")[-1]
    raise ExportError("the model's embedding module is not among its modules")


def _full_layers_saved(checkpoint: Path, rows: int) -> set[str]:
    """Layers (leaf names) whose whole weight, `rows` rows, the adapter file holds: modules_to_save copies, and the
    embedding layers PEFT saves on its own when it sees them resized (`save_embedding_layers`)."""
    path = checkpoint / "adapter_model.safetensors"
    if not path.is_file():
        return set()
    from safetensors import safe_open

    found = set()
    with safe_open(str(path), "pt") as fh:
        for key in fh.keys():  # noqa: SIM118 (safe_open is not iterable)
            parts = key.split(".")
            if parts[-1] == "weight" and fh.get_slice(key).get_shape()[0] == rows:
                found.update(parts[:-1])
    return found


def _check_added_rows(checkpoint: Path, adapter: dict, model, new_ids: list[int], vocab: int) -> None:
    """The adapter must carry the rows of the tokens the base lacks, in the input embedding and (untied) output
    layer: trainable_token_indices covering them, or the whole layer (modules_to_save, or saved embeddings)."""
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings()
    layers = [_leaf_name(model, embed)]
    if head is not None and head.weight.data_ptr() != embed.weight.data_ptr():
        layers.append(_leaf_name(model, head))
    saved = set(adapter.get("modules_to_save") or []) | _full_layers_saved(checkpoint, vocab)
    indices = adapter.get("trainable_token_indices") or {}
    if isinstance(indices, list):  # PEFT's shorthand: the input embedding's rows
        indices = {layers[0]: indices}
    for layer in layers:
        covered = set(indices.get(layer) or [])
        if layer in saved or set(new_ids) <= covered:
            continue
        missing = sorted(set(new_ids) - covered)
        raise ExportError(
            f"{checkpoint}: the tokenizer adds tokens {missing[:8]} the base model has no rows for, and "
            f"the adapter does not carry them in `{layer}` (no trainable_token_indices for them, no "
            "saved copy of the layer): their weights were never saved, so no merge can reproduce the "
            "trained model"
        )


def _target_dtype(dtype: str, config):
    import torch

    from timealign.config.dtypes import torch_dtype

    if dtype not in DTYPES:
        raise RecipeError(f"dtype={dtype!r} is not one of: {', '.join(DTYPES)}")
    if dtype != "auto":
        return torch_dtype(dtype)
    found = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(found, str):
        found = getattr(torch, found, None)
    return found if isinstance(found, torch.dtype) else torch.float32


def merge_adapter(checkpoint: Path, tmp: Path, dtype: str, trust_remote_code: bool = False) -> None:
    """Base + adapter -> merged safetensors checkpoint and tokenizer in `tmp`."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from timealign.models import resolve_model_path

    adapter = _read_json(checkpoint / ADAPTER_CONFIG)
    base = adapter.get("base_model_name_or_path")
    if not base:
        raise ExportError(f"{checkpoint / ADAPTER_CONFIG} names no base_model_name_or_path")
    base = resolve_model_path(base)
    if (base.startswith(("/", ".", "~")) or Path(base).is_absolute()) and not Path(base).is_dir():
        raise ExportError(
            f"{checkpoint / ADAPTER_CONFIG}: the base model {base} is not a folder here; edit its "
            "base_model_name_or_path to where the base model is"
        )
    config = AutoConfig.from_pretrained(base, trust_remote_code=trust_remote_code)
    target = _target_dtype(dtype, config)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, trust_remote_code=trust_remote_code)
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:  # training grew the embeddings the same way (timealign.train.timer)
        _check_added_rows(checkpoint, adapter, model, list(range(rows, len(tokenizer))), len(tokenizer))
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    merged = PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload()
    merged = merged.to(target)
    merged.config.dtype = target
    merged.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    _check_vocab(checkpoint, tokenizer, merged.get_input_embeddings().weight.shape[0])
    logger.info(
        "merged %s into %s (%s, %d tokens)", checkpoint, base, str(target).replace("torch.", ""), len(tokenizer)
    )


def copy_full(checkpoint: Path, tmp: Path, trust_remote_code: bool = False) -> None:
    """A full model's model and tokenizer files, unchanged (what a hub upload sends, minus the card)."""
    from huggingface_hub.utils import filter_repo_objects
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=trust_remote_code)
    config = AutoConfig.from_pretrained(checkpoint, trust_remote_code=trust_remote_code)
    rows = getattr(config.get_text_config(), "vocab_size", None)
    if isinstance(rows, int):
        _check_vocab(checkpoint, tokenizer, rows)
    files = sorted(p.relative_to(checkpoint).as_posix() for p in checkpoint.glob("**/*") if p.is_file())
    patterns = [p for p in upload_patterns(tokenizer) if p != CARD_FILE]
    for rel in filter_repo_objects(files, allow_patterns=patterns):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(checkpoint / rel, tmp / rel)


def export_checkpoint(
    checkpoint: str | Path, out: str | Path, *, dtype: str = "auto", overwrite: bool = False
) -> Path:
    """Export `checkpoint` (LoRA adapter or full model) to `out` as a standalone checkpoint with a model card."""
    checkpoint, out = Path(checkpoint), Path(out)
    kind = checkpoint_kind(checkpoint)
    if kind == "full" and dtype != "auto":
        raise RecipeError(f"dtype={dtype}: a full fine-tune is copied unchanged (dtype applies to LoRA merges)")
    recipe = recipe_dict(checkpoint)
    trust = bool(((recipe or {}).get("model") or {}).get("trust_remote_code"))
    tmp = _prepare_out(checkpoint, out, overwrite)
    try:
        if kind == "adapter":
            merge_adapter(checkpoint, tmp, dtype, trust)
        else:
            copy_full(checkpoint, tmp, trust)
        for place in [checkpoint, checkpoint.parent] if checkpoint.name.startswith("checkpoint-") else [checkpoint]:
            if (place / CHECKPOINT_RECIPE).is_file():
                shutil.copy2(place / CHECKPOINT_RECIPE, tmp / CHECKPOINT_RECIPE)
                break
        if recipe is not None:
            write_model_card(
                tmp,
                source=checkpoint,
                exported_from=str(checkpoint),
                merged_from_adapter=kind == "adapter",
                title=out.name,
            )
        else:
            logger.warning(
                "%s has no %s (not trained by timealign): exported without a model card", checkpoint, CHECKPOINT_RECIPE
            )
        _record_export(tmp, checkpoint, kind)
        _publish(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def main(argv: list[str] | None = None) -> int:
    """`train/export.py`: exit 0 after writing, 2 on a bad option or a folder that cannot be exported."""

    def export(invocation) -> int:
        opts = invocation.options
        if not opts.checkpoint or not opts.out:
            raise RecipeError("checkpoint=DIR and out=DIR are both required (see --help)")
        print(f"wrote {export_checkpoint(opts.checkpoint, opts.out, dtype=opts.dtype, overwrite=opts.overwrite)}")
        return 0

    return run_command(COMMAND, argv, export, errors={ExportError: 2})


if __name__ == "__main__":  # python -m timealign.train.export
    raise SystemExit(main())
