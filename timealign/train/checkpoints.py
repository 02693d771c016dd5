"""Checkpoint files and whether they are whole: can a `checkpoint-N` folder resume training exactly, and does it fit
the recipe's model.

`checkpoint_problem` says why a folder would not resume the very run that wrote it (trainer state, weights,
optimizer, scheduler and RNG states: headers and sizes, not the tensors), `checkpoint_model_problem` why its weights
do not fit a built model (architecture, adapter or full model, parameter names and shapes, torch files the
weights-only loader refuses). `checkpoints` / `checkpoint_folders` list a run's checkpoints. Resume
(`timealign.train.resume`) and export (`timealign.train.export`) read checkpoints through these; evaluation
(`timealign.eval.runner`) makes the same weights-only check (`timealign.backends.weights`) before it loads one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from timealign.backends.weights import unsafe_torch_files
from timealign.config.tracking import CHECKPOINT_DIR

logger = logging.getLogger(__name__)

# What a checkpoint must hold to resume the very run it was written by (transformers' Trainer._save_checkpoint).
WEIGHT_FILES = (
    "model.safetensors",
    "adapter_model.safetensors",
    "pytorch_model.bin",
    "adapter_model.bin",
    "pytorch_model_fsdp.bin",
)
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
JSON_FILES = ("trainer_state.json", "config.json", "adapter_config.json")  # the first is required
FULL_CHECK_BYTES = 256 << 20  # torch files up to this size are also CRC-checked (rng, scheduler; tiny optimizers)


def _safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a complete safetensors file (header, then exactly the bytes the header indexes), or None."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path.name} is truncated ({size} bytes, no header)"
            length = int.from_bytes(head, "little")
            if length > size - 8:
                return f"{path.name} is truncated ({size} bytes; its header alone needs {length + 8})"
            header = json.loads(fh.read(length))
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"{path.name} has no readable safetensors header ({err})"
    try:
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        return f"{path.name} has a malformed safetensors header ({err!r})"
    expected = 8 + length + end
    if size != expected:
        return (
            f"{path.name} is {'truncated' if size < expected else 'longer than its header says'} "
            f"({size} of {expected} bytes)"
        )
    return None


def _torch_file_problem(path: Path) -> str | None:
    """Why `path` is not a complete torch.save archive (a zip: truncation loses its central directory), or None."""
    import zipfile

    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
            if not entries:
                return f"{path.name} is an empty archive"
            if any(e.header_offset + e.compress_size > size for e in entries):
                return f"{path.name} is truncated ({size} bytes)"
            if size <= FULL_CHECK_BYTES:
                bad = archive.testzip()
                if bad is not None:
                    return f"{path.name} is corrupt (bad CRC in {bad})"
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as err:
        return f"{path.name} is not a complete torch file ({size} bytes: {err})"
    return None


def _sharded_problem(folder: Path) -> str | None:
    """A torch.distributed.checkpoint folder (FSDP SHARDED_STATE_DICT): `.metadata` is written last."""
    if not (folder / ".metadata").is_file():
        return f"{folder.name}/ has no .metadata (an unfinished sharded save)"
    return None


def _weights_problem(path: Path) -> str | None:
    # DeepSpeed's own model states (ZeRO-3: the real weights; model.safetensors may hold placeholders).
    deepspeed = [
        f for d in sorted(path.glob("global_step*")) if d.is_dir() for f in sorted(d.glob("*model_states.pt"))
    ]
    return next(filter(None, map(_torch_file_problem, deepspeed)), None) or _hf_weights_problem(path)


def _hf_weights_problem(path: Path) -> str | None:
    for name in WEIGHT_INDEXES:
        index = path / name
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                return f"{name} does not parse ({err!r})"
            for shard in shards:
                file = path / shard
                if not file.is_file():
                    return f"{name} lists {shard}, which is missing"
                problem = _safetensors_problem(file) if shard.endswith(".safetensors") else _torch_file_problem(file)
                if problem:
                    return problem
            return None
    for name in WEIGHT_FILES:
        file = path / name
        if file.is_file():
            return _safetensors_problem(file) if name.endswith(".safetensors") else _torch_file_problem(file)
    sharded = [d for d in path.iterdir() if d.is_dir() and d.name.startswith("pytorch_model_fsdp")]
    if sharded:
        return next(filter(None, map(_sharded_problem, sharded)), None)
    if any(path.glob("global_step*/*model_states.pt")):
        return None
    return f"no weights file ({' / '.join(WEIGHT_FILES[:2])})"


def weights_problem(path: str | Path) -> str | None:
    """Why the weights of a saved model or adapter folder are incomplete (see `_hf_weights_problem`), or None."""
    return _hf_weights_problem(Path(path))


def _optimizer_problem(path: Path) -> str | None:
    for name in ("optimizer.pt", "optimizer.bin"):
        if (path / name).is_file():
            return _torch_file_problem(path / name)
    sharded = [d for d in path.iterdir() if d.is_dir() and d.name.startswith("optimizer")]
    if sharded:
        return next(filter(None, map(_sharded_problem, sharded)), None)
    deepspeed = [
        f for d in sorted(path.glob("global_step*")) if d.is_dir() for f in sorted(d.glob("*optim_states.pt"))
    ]
    if deepspeed:
        return next(filter(None, map(_torch_file_problem, deepspeed)), None)
    return "no optimizer state (optimizer.pt): resuming would restart the optimizer (a save_only_model checkpoint?)"


def checkpoint_problem(path: str | Path) -> str | None:
    """Why `path` cannot resume training exactly, or None when it loads completely: trainer_state.json (and
    config.json) parse; the weights are complete (safetensors: header and size; torch files: a whole zip archive,
    CRC-checked up to FULL_CHECK_BYTES; sharded FSDP/DeepSpeed folders: their last-written file); optimizer.pt,
    scheduler.pt and at least one rng_state*.pth are whole. Cheap: reads headers, not the tensors."""
    path = Path(path)
    if not path.is_dir():
        return "not a folder"
    for name in JSON_FILES:
        file = path / name
        if not file.is_file():
            if name == "trainer_state.json":
                return "no trainer_state.json (killed while saving?)"
            continue
        try:
            state = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            return f"{name} does not parse ({err})"
        if not isinstance(state, dict):
            return f"{name} is not a JSON object"
    deepspeed = any(d.is_dir() for d in path.glob("global_step*"))
    if deepspeed and not (path / "latest").is_file():  # DeepSpeed's save_checkpoint writes `latest` last
        return "no DeepSpeed `latest` file (an unfinished DeepSpeed save)"
    problem = _weights_problem(path) or _optimizer_problem(path)
    if problem:
        return problem
    if not (path / "scheduler.pt").is_file() and not deepspeed:  # DeepSpeed's own scheduler lives in global_step*
        return "no scheduler.pt"
    rng = sorted(path.glob("rng_state*.pth"))
    if not rng:
        return "no rng_state.pth: the resumed run would not repeat the uninterrupted one"
    for file in [path / "scheduler.pt", path / "scaler.pt", *rng]:
        if file.is_file():
            problem = _torch_file_problem(file)
            if problem:
                return problem
    return None


def checkpoint_folders(output_dir: str | Path) -> list[Path]:
    """Every `checkpoint-N` folder in output_dir, oldest first (complete or not)."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := CHECKPOINT_DIR.match(p.name)) and p.is_dir()]
    return [path for _, path in sorted(found)]


def checkpoints(output_dir: str | Path) -> list[Path]:
    """The `checkpoint-N` folders that load completely (`checkpoint_problem`), oldest first; a warning per other."""
    complete = []
    for path in checkpoint_folders(output_dir):
        problem = checkpoint_problem(path)
        if problem:
            logger.warning("ignoring checkpoint %s: %s", path, problem)
        else:
            complete.append(path)
    return complete


def _safetensors_shapes(path: Path) -> dict[str, tuple]:
    with open(path, "rb") as fh:
        header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def saved_shapes(folder: Path) -> dict[str, tuple] | None:
    """{parameter name: shape} of a checkpoint's weights (safetensors headers; torch files loaded weights-only,
    memory-mapped), or None when they are in a format read elsewhere (FSDP shards, DeepSpeed)."""
    import torch

    files = []
    for name in WEIGHT_INDEXES:
        if (folder / name).is_file():
            files = sorted({folder / f for f in json.loads((folder / name).read_text())["weight_map"].values()})
            break
    else:
        files = [folder / n for n in WEIGHT_FILES[:4] if (folder / n).is_file()][:1]
    if not files:
        return None
    shapes = {}
    for file in files:
        if file.suffix == ".safetensors":
            shapes.update(_safetensors_shapes(file))
        else:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            shapes.update({k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")})
    return shapes


def _model_shapes(model, adapter: bool) -> tuple[dict[str, tuple], list[set[str]]]:
    """The shapes a checkpoint of `model` holds, and the groups of names that share one tensor (tied weights)."""
    if adapter:
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(model)
    else:
        state = model.state_dict()
    groups: dict[int, set[str]] = {}
    for name, tensor in state.items():
        groups.setdefault(tensor.data_ptr(), set()).add(name)
    return {k: tuple(v.shape) for k, v in state.items()}, [g for g in groups.values() if len(g) > 1]


def _show_names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")


def checkpoint_model_problem(model, checkpoint: str | Path) -> str | None:
    """Why `checkpoint` cannot resume training of `model` (the recipe's model, built): another architecture
    (config.json's model_type), an adapter for a full fine-tune or the reverse, parameters the model lacks, lacks
    itself, or of other shapes; a torch file the weights-only loader refuses. None when it fits."""
    folder = Path(checkpoint)
    problem = unsafe_torch_files(folder)
    if problem:
        return problem
    is_adapter = hasattr(model, "peft_config")
    config = getattr(model.get_base_model() if is_adapter else model, "config", None)
    if (folder / "adapter_config.json").is_file() != is_adapter:
        return (
            "it holds a LoRA adapter, and this recipe trains the full model (lora.enabled=false)"
            if not is_adapter
            else "it holds a full model, and this recipe trains a LoRA adapter (lora.enabled=true)"
        )
    if (folder / "config.json").is_file() and config is not None:
        saved = json.loads((folder / "config.json").read_text())
        if saved.get("model_type") != getattr(config, "model_type", None):
            return (
                f"it holds a {saved.get('model_type')!r} model ({', '.join(saved.get('architectures') or [])}), "
                f"this recipe trains a {config.model_type!r} model ({getattr(config, '_name_or_path', '')})"
            )
    shapes = saved_shapes(folder)
    if shapes is None:
        return None
    wanted, tied = _model_shapes(model, is_adapter)
    unknown = sorted(k for k in shapes if k not in wanted)
    if unknown:
        return f"it has parameters this model does not: {_show_names(unknown)}"
    other = sorted(k for k in shapes if shapes[k] != wanted[k])
    if other:
        shown = ", ".join(f"{k} {list(shapes[k])} (checkpoint) vs {list(wanted[k])} (model)" for k in other[:3])
        return f"parameters of other shapes: {shown}" + (f" ... ({len(other)} in all)" if len(other) > 3 else "")
    missing = sorted(k for k in wanted if k not in shapes and not any(k in g and g & shapes.keys() for g in tied))
    if missing:
        return f"it lacks parameters of this model: {_show_names(missing)}"
    return None
