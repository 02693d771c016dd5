"""Preemption-safe training: checkpoint and stop on the SLURM warning signal, resume from the newest checkpoint.

    session = TrainingSession.start(trainer, recipe, data_dir=prepared_dir)   # resume, signals, W&B, provenance
    trainer.train(resume_from_checkpoint=session.resume_from)
    session.finish()   # raises TrainingPreempted (a SystemExit with code EXIT_REQUEUE) after a preemption checkpoint

Resume (`training.resume_from_checkpoint`): `auto` (what the cluster launcher passes) continues from the newest
`checkpoint-N` in output_dir that loads completely (`checkpoint_problem`: trainer state, weights, optimizer,
scheduler and RNG states whole), warning about each newer one it skips and why, or starts fresh when there is none
(a skipped folder is left as it is: the resumed run overwrites it when it saves that step); a path resumes from
that checkpoint (refused, with the reason, when it does not load completely);
`false`/unset starts fresh. transformers restores the model, optimizer, scheduler, RNG states and the data position,
so the resumed run repeats the uninterrupted run's steps exactly. With `auto`, a checkpoint written under a different
recipe (model, data settings, learning rate, ...) is refused instead of silently continued. Either way the checkpoint
must fit the recipe's model (`check_checkpoint_fits`): its config.json's model_type, adapter or full model, every
parameter's name and shape (read from the safetensors headers), and every torch file the Trainer loads must pass
torch's weights-only loader; a path whose saved recipe names another model, LoRA setup or task is refused too (its
other differences, a learning rate say, are logged: resuming with them is the user's call).

Preemption: `PreemptionCallback` turns SIGUSR1 (the sbatch `--signal=B:USR1@120` warning, forwarded by
slurm/launch.sh as a stop file) and SIGTERM into "save a checkpoint at the end of this step and stop". The request
is OR-reduced over all ranks at every optimizer step, so every process stops at the same step even when only one of
them saw the signal. The stop file (`$TIMEALIGN_STOP_FILE`) exists because signals do not travel reliably through
`srun` + `accelerate launch` (torchrun's agent dies on SIGUSR1). After the checkpoint, `finish()` writes
`<output_dir>/preempted.json` and `$TIMEALIGN_STOP_FILE.requeue` (the sbatch script requeues on it) and exits with
`EXIT_REQUEUE` (75, EX_TEMPFAIL). The last log line says what happens next, read from Slurm (`stop_outcome`:
`scontrol show job`'s JobState and Requeue, the signal that arrived, TIMEALIGN_REQUEUE): requeued by the batch script
(the USR1 warning), requeued by Slurm (preemption with Requeue=1), or not requeued (cancelled, time limit reached).

Save budget: `SaveTimingCallback` logs how long each checkpoint took (rank 0) and warns when the last optimizer step
plus that save took longer than `launch.signal_seconds`, the warning's lead before the time limit.
`TIMEALIGN_TEST_SLOW_SAVE` (test-only, tests/test_slurm_real.py) makes every checkpoint save sleep that many seconds.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import yaml
from transformers import TrainerCallback

from timealign.config import RecipeError
from timealign.config.secrets import is_secret_key, redact
from timealign.config.tracking import CHECKPOINT_DIR
from timealign.config.written import WrittenFiles, card_may_replace, foreign_card_message
from timealign.render.checkpoint import CHECKPOINT_RECIPE

logger = logging.getLogger("timealign.train.resume")

EXIT_REQUEUE = 75  # EX_TEMPFAIL: "try again later"; slurm/launch.sh requeues the job
STOP_FILE_ENV = "TIMEALIGN_STOP_FILE"
SLOW_SAVE_ENV = "TIMEALIGN_TEST_SLOW_SAVE"  # TEST-ONLY: seconds each checkpoint save sleeps (slow-save tests)
REQUEUE_SUFFIX = ".requeue"
PREEMPTED_FILE = "preempted.json"
RUN_INFO_FILE = "run_info.json"
TRAIN_LOG = "train_log.json"  # the trainer's log_history, written beside the saved model
AUTO_WORDS = ("auto", "true", "latest", "last", "yes", "1", "on")

# Recipe keys that may change between a run and its resumption (bookkeeping, not what is trained).
RESUME_IGNORED = (
    "output_dir",
    "overwrite_output_dir",
    "description",
    "wandb",
    "launch",
    "eval",
    "live_eval",
    "data.path",
    "data.prepared_dir",
    "data.prep_timeout",
    "training.resume_from_checkpoint",
    "training.report_to",
    "training.run_name",
    "training.logging_steps",
    "training.save_steps",
    "training.save_strategy",
    "training.save_total_limit",
    "training.max_steps",
    "training.num_train_epochs",
    "training.eval_strategy",
    "training.eval_steps",
    "training.dataloader_num_workers",
    "training.logging_dir",
)


class TrainingPreempted(SystemExit):
    """Training stopped early on a preemption request after saving `checkpoint`; exits with EXIT_REQUEUE."""

    def __init__(self, checkpoint: str, step: int, reason: str):
        super().__init__(EXIT_REQUEUE)
        self.checkpoint, self.step, self.reason = checkpoint, step, reason

    def __str__(self) -> str:
        return f"preempted ({self.reason}) at step {self.step}; checkpoint {self.checkpoint}"


# ---------------------------------------------------------------------------------------------- resume


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


def newest_checkpoint(output_dir: str | Path) -> str | None:
    """The newest `checkpoint-N` that loads completely; each newer one is skipped with a warning saying why (from
    rank 0; every rank decides the same on the shared output_dir)."""
    from timealign.config.cli import launcher_rank

    warn = logger.warning if launcher_rank() == 0 else logger.debug
    skipped = 0
    for path in reversed(checkpoint_folders(output_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            if skipped:
                warn("resuming from the older %s instead", path)
            return str(path)
        skipped += 1
        warn("skipping checkpoint %s: %s", path, problem)
    if skipped:
        warn("none of the %d checkpoints in %s loads completely: starting fresh", skipped, output_dir)
    return None


def resolve_resume(value, output_dir: str | Path) -> str | None:
    """`training.resume_from_checkpoint` -> the checkpoint folder to resume from, or None (start fresh)."""
    if value is None or value is False:
        return None
    text = str(value).strip()
    if text.lower() in ("", "false", "no", "none", "null", "0", "off"):
        return None
    if text.lower() in AUTO_WORDS:
        newest = newest_checkpoint(output_dir)
        if newest is None:
            logger.info("resume=auto: no checkpoint in %s, starting fresh", output_dir)
        return newest
    path = Path(text)
    if not (path / "trainer_state.json").is_file():
        raise RecipeError(
            f"training.resume_from_checkpoint={text!r}: not a checkpoint folder (no trainer_state.json). "
            "Use auto, false or a checkpoint-N folder."
        )
    problem = checkpoint_problem(path)
    if problem:
        raise RecipeError(
            f"training.resume_from_checkpoint={text}: it does not load completely: {problem}. Use auto "
            "(the newest checkpoint that does), false, or another checkpoint-N folder."
        )
    return str(path)


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def recipe_differences(saved: dict, current: dict) -> list[str]:
    """Keys (dotted) whose values differ between two resolved recipes, ignoring RESUME_IGNORED."""

    def ignored(key: str) -> bool:
        return is_secret_key(key) or any(key == k or key.startswith(k + ".") for k in RESUME_IGNORED)

    a, b = _flatten(saved), _flatten(current)
    return sorted(k for k in set(a) | set(b) if not ignored(k) and a.get(k) != b.get(k))


def check_resume_compatible(recipe, checkpoint: str | Path) -> None:
    """Refuse to auto-resume from a checkpoint trained under a different recipe."""
    path = Path(checkpoint) / CHECKPOINT_RECIPE
    if not path.is_file():
        logger.warning(
            "%s has no %s; cannot check that it was trained with this recipe", checkpoint, CHECKPOINT_RECIPE
        )
        return
    try:
        saved = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        saved = err
    if not isinstance(saved, dict):
        logger.warning(
            "%s does not parse (%s); cannot check that %s was trained with this recipe",
            path,
            str(saved).splitlines()[0] if saved else "empty",
            checkpoint,
        )
        return
    diffs = recipe_differences(saved, recipe.to_dict())
    if diffs:
        before, now = _flatten(saved), _flatten(recipe.to_dict())
        shown = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in diffs[:6])
        more = ", ..." if len(diffs) > 6 else ""
        raise RecipeError(
            f"{checkpoint} was trained with a different recipe ({shown}{more})."
            " Use a new output_dir=, training.resume_from_checkpoint=false to start over in this one, or "
            f"training.resume_from_checkpoint={checkpoint} to resume from it anyway."
        )


# Recipe keys that decide what a checkpoint's weights are: an explicit resume path must agree on them.
MODEL_KEYS = ("task", "model", "lora")


def unsafe_torch_file(path: Path) -> str | None:
    """Why torch's weights-only loader refuses `path` (a pickle that would run code or build other objects), or
    None. transformers loads a checkpoint's torch files the same way; this says so in one line, before it."""
    import torch
    from transformers.trainer_pt_utils import safe_globals  # numpy's RNG state types, as the Trainer allows them

    try:
        with safe_globals():
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 (UnpicklingError, RuntimeError, ...: any refusal is the answer)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{path.name} is not a plain tensor file: torch's weights-only loader refuses it ({first[:200]})"
    return None


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
    for file in sorted([*folder.glob("*.bin"), *folder.glob("*.pt"), *folder.glob("*.pth")]):
        if file.name == "training_args.bin":  # the Trainer pickles its arguments there and never loads them back
            continue
        problem = unsafe_torch_file(file)
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


def check_checkpoint_fits(recipe, model, checkpoint: str | Path, explicit: bool) -> None:
    """Refuse (RecipeError, one line) a checkpoint whose weights do not fit the recipe's model, or, given as a path,
    one trained with another model, LoRA setup or task; other recipe differences of a path are the user's call."""
    value = f"training.resume_from_checkpoint={recipe.training.get('resume_from_checkpoint')}"
    ways = (
        "Resume from a checkpoint of this recipe's model (training.resume_from_checkpoint=auto: the newest in "
        "output_dir), or start over: training.resume_from_checkpoint=false"
    )
    problem = checkpoint_model_problem(model, checkpoint)
    if problem:
        raise RecipeError(f"{value}: {checkpoint} does not fit this recipe's model: {problem}. {ways}")
    path = Path(checkpoint) / CHECKPOINT_RECIPE
    saved = _read_snapshot(path) if explicit and path.is_file() else None
    if saved is None:
        return
    now = recipe.to_dict()
    diffs = recipe_differences(saved, now)
    before, after = _flatten(saved), _flatten(now)
    shown = [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in diffs]
    decisive = [line for k, line in zip(diffs, shown) if k.split(".", 1)[0] in MODEL_KEYS]
    if decisive:
        raise RecipeError(
            f"{value}: {checkpoint} was trained with another model setup ({', '.join(decisive[:4])}). {ways}"
        )
    if shown:
        logger.warning("resuming from %s, trained with other settings: %s", checkpoint, ", ".join(shown[:6]))


def _read_snapshot(path: Path) -> dict | None:
    try:
        saved = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return saved if isinstance(saved, dict) else None


# ---------------------------------------------------------------------------------------------- preemption


def _any_rank(flag: bool, device) -> bool:
    """OR of `flag` over all processes (every rank must call this at the same step)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


class PreemptionCallback(TrainerCallback):
    """On SIGUSR1/SIGTERM or an existing stop file: save a checkpoint at the end of the current step and stop.

    All ranks agree on the step (OR-reduce at every optimizer step). `stopped_at` is the step it stopped at and
    `reason` what asked for it. Handlers are installed by `install()` (main thread only) and restored by
    `uninstall()`; a second signal of the same kind falls back to the previous handler (e.g. kill on SIGTERM).
    """

    def __init__(self, signals=(signal.SIGUSR1, signal.SIGTERM), stop_file: str | None = None):
        self.signals = tuple(signals)
        self.stop_file = stop_file if stop_file is not None else (os.environ.get(STOP_FILE_ENV) or None)
        self.reason: str | None = None
        self.stopped_at: int | None = None
        self._previous: dict = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.reason == name:  # asked twice: give the signal its previous meaning
            previous = self._previous.get(signum)
            self.uninstall()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signum)
            return
        self.reason = self.reason or name
        logger.warning("%s received: checkpointing at the end of this step, then stopping", name)

    def requested(self) -> bool:
        if self.reason is None and self.stop_file and os.path.exists(self.stop_file):
            self.reason = f"stop file {self.stop_file}"
            logger.warning("%s exists: checkpointing at the end of this step, then stopping", self.stop_file)
        return self.reason is not None

    def on_train_begin(self, args, state, control, **kwargs):
        self.install()

    def on_step_end(self, args, state, control, **kwargs):
        if self.stopped_at is None and _any_rank(self.requested(), args.device):
            self.reason = self.reason or "another rank"
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control


def slurm_job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job --oneliner JOB` as {field: value}; {} when Slurm cannot be asked."""
    try:
        proc = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", str(job_id)], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 else {}


def _slurm_seconds(text: str | None) -> int | None:
    """`RunTime`/`TimeLimit` of scontrol ([D-]HH:MM:SS, MM:SS) in seconds; None for UNLIMITED or unreadable."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", (text or "").strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def stop_outcome(reason: str | None, env=None, job_fields=slurm_job_fields) -> tuple[bool, str]:
    """(requeued?, what happens to the job next) after a preemption checkpoint, from what asked for the stop and from
    Slurm itself (`scontrol show job`). While Slurm ends a job it shows JobState=COMPLETING whatever the cause
    (Slurm 22.05): a requeue has already counted the restart (Restarts above SLURM_RESTART_COUNT), the time limit
    shows Reason=TimeLimit (and RunTime >= TimeLimit), anything else ending it is a cancellation (scancel, or
    preemption that cancels)."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    resubmit = "resubmit the same command (training.resume_from_checkpoint=auto) to continue from it"
    if not job:
        return False, f"not in a Slurm job: nothing requeues it; {resubmit}"
    fields = job_fields(job)
    state = fields.get("JobState", "")
    restarts = int(env.get("SLURM_RESTART_COUNT") or 0)
    cap = int(env.get("TIMEALIGN_MAX_REQUEUES") or 20)
    hold = "after Slurm holds it ~2 min (Reason=BeginTime)"
    counted = fields.get("Restarts", "")
    if state in ("PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED") or (
        counted.isdigit() and int(counted) > restarts
    ):
        if fields.get("Requeue") == "0":
            return False, f"job {job} was preempted and is not requeueable (Requeue=0); {resubmit}"
        return True, (
            f"Slurm requeues job {job} (preemption or scontrol requeue): it resumes from this checkpoint {hold}"
        )
    limit, ran = _slurm_seconds(fields.get("TimeLimit")), _slurm_seconds(fields.get("RunTime"))
    if (
        state == "TIMEOUT"
        or fields.get("Reason") == "TimeLimit"
        or (state == "COMPLETING" and limit is not None and ran is not None and ran >= limit)
    ):
        return False, (
            f"job {job} reached its time limit before a checkpoint on the warning (USR1, launch."
            f"signal_seconds before the limit) was done: it is not requeued; raise launch.signal_seconds "
            f"(sbatch --signal=B:USR1@N) and {resubmit}"
        )
    if state in ("CANCELLED", "COMPLETING"):
        return False, f"job {job} was cancelled (scancel): it is not requeued; {resubmit}"
    if reason != "SIGTERM":  # the USR1 warning (to this process, or to the batch shell: the stop file)
        if env.get("TIMEALIGN_REQUEUE", "1") == "0":
            return False, f"the warning came and requeueing is off (TIMEALIGN_REQUEUE=0); {resubmit}"
        if restarts >= cap:
            return False, f"job {job} was requeued {restarts} times already (TIMEALIGN_MAX_REQUEUES={cap}); {resubmit}"
        return True, (
            f"time limit near (USR1): the batch script requeues job {job} and it resumes from this checkpoint {hold}"
        )
    return False, (
        f"{reason}: Slurm is ending job {job} (JobState={state or '?'}); it is requeued only if Slurm "
        f"requeues it (preemption with Requeue=1); else {resubmit}"
    )


class SaveTimingCallback(TrainerCallback):
    """How long each checkpoint takes (the time from the end of its step to on_save), logged by rank 0, with a
    warning when one optimizer step plus the save no longer fits in the warning's lead `signal_seconds` (the
    time limit's SIGTERM, and Slurm's SIGKILL KillWait seconds later, would cut a save short). The test-only
    TIMEALIGN_TEST_SLOW_SAVE sleeps here, in the save path, before the measurement."""

    def __init__(self, signal_seconds: int | None):
        self.signal_seconds = signal_seconds
        self.step_started = self.step_ended = None
        self.step_seconds = self.save_seconds = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ended = time.monotonic()
        if self.step_started is not None:
            self.step_seconds = self.step_ended - self.step_started

    def on_save(self, args, state, control, **kwargs):
        slow = float(os.environ.get(SLOW_SAVE_ENV) or 0)
        if slow > 0:
            logger.warning("%s=%s (test-only): this save sleeps %.0f s", SLOW_SAVE_ENV, slow, slow)
            time.sleep(slow)
        if self.step_ended is None:
            return
        self.save_seconds = time.monotonic() - self.step_ended
        if not state.is_world_process_zero:
            return
        step = self.step_seconds or 0.0
        logger.info("checkpoint-%d saved in %.1f s (its step: %.1f s)", state.global_step, self.save_seconds, step)
        if self.signal_seconds is not None and step + self.save_seconds > self.signal_seconds:
            logger.warning(
                "one step + a checkpoint took %.0f s, more than launch.signal_seconds=%d (the warning's "
                "lead before the time limit): near the limit the save would be cut short and the job "
                "would resume from an older checkpoint; raise launch.signal_seconds to at least %d (sbatch "
                "--signal=B:USR1@N)",
                step + self.save_seconds,
                self.signal_seconds,
                int(2 * (step + self.save_seconds)) + 30,
            )


class _RecipeSnapshotCallback(TrainerCallback):
    """Write the resolved recipe into every checkpoint, for the auto-resume compatibility check."""

    def __init__(self, recipe, files=None):
        self.text = yaml.safe_dump(redact(recipe.to_dict()), sort_keys=False)
        self.files = files  # WrittenFiles on rank 0: the checkpoint's files go into the run's record

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            tmp = folder / f".{CHECKPOINT_RECIPE}.tmp"  # whole or absent: a torn copy would misreport differences
            tmp.write_text(self.text)
            os.replace(tmp, folder / CHECKPOINT_RECIPE)
        if self.files is not None:
            self.files.record()


# ---------------------------------------------------------------------------------------------- session


class TrainingSession:
    """Resume + preemption + W&B + run_info.json around one `trainer.train()` (DPO and SFT entry points)."""

    def __init__(
        self,
        trainer,
        recipe,
        resume_from: str | None,
        callback: PreemptionCallback,
        provenance: dict,
        wandb_run_id: str | None,
        files=None,
    ):
        self.trainer, self.recipe, self.files = trainer, recipe, files
        self.resume_from, self.callback = resume_from, callback
        self.provenance, self.wandb_run_id = provenance, wandb_run_id

    @classmethod
    def start(cls, trainer, recipe, data_dir=None) -> TrainingSession:
        from timealign.train.tracking import run_provenance, setup_wandb

        value = recipe.training.get("resume_from_checkpoint")
        resume_from = resolve_resume(value, trainer.args.output_dir)
        if resume_from is not None:
            explicit = str(value).strip().lower() not in AUTO_WORDS
            if not explicit:
                check_resume_compatible(recipe, resume_from)
            check_checkpoint_fits(recipe, trainer.model, resume_from, explicit)
            logger.info("resuming from %s", resume_from)
        callback = PreemptionCallback()
        callback.install()  # now, not at on_train_begin: a warning during model/data loading must not kill us
        trainer.add_callback(callback)
        files = WrittenFiles(trainer.args.output_dir) if trainer.is_world_process_zero() else None
        trainer.add_callback(_RecipeSnapshotCallback(recipe, files))
        trainer.add_callback(SaveTimingCallback(recipe.launch.signal_seconds if recipe.launch.requeue else None))
        provenance = run_provenance(recipe, data_dir) if trainer.is_world_process_zero() else {}
        run_id = setup_wandb(trainer, recipe, provenance=provenance, resume_from=resume_from)
        return cls(trainer, recipe, resume_from, callback, provenance, run_id, files)

    def record_files(self) -> None:
        """Add what this run wrote since the last look to its record (rank 0; `timealign.config.written`)."""
        if self.files is not None:
            self.files.record()

    @property
    def preempted(self) -> bool:
        state = self.trainer.state
        return self.callback.stopped_at is not None and state.global_step < state.max_steps

    def run_info(self) -> dict:
        trainer, state = self.trainer, self.trainer.state
        accelerator = trainer.accelerator
        return {
            "world_size": accelerator.num_processes,
            # the batch this launch trained with (batch.global_size solves these for the world size)
            "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
            "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
            "distributed_type": str(accelerator.distributed_type),
            "mixed_precision": str(accelerator.mixed_precision),
            "model_wrapper": type(trainer.model_wrapped).__name__,
            "zero_stage": (
                trainer.model_wrapped.zero_optimization_stage()
                if hasattr(trainer.model_wrapped, "zero_optimization_stage")
                else None
            ),
            "global_step": state.global_step,
            "max_steps": state.max_steps,
            "resumed_from": self.resume_from,
            "preempted": self.preempted,
            "stop_reason": self.callback.reason,
            "wandb_run_id": self.wandb_run_id,
            **self.provenance,
        }

    def finish(self) -> None:
        """After `trainer.train()`: record the run; after a preemption stop, raise TrainingPreempted."""
        trainer = self.trainer
        trainer.accelerator.wait_for_everyone()  # every rank has finished writing its part of the checkpoint
        self.callback.uninstall()
        out = Path(trainer.args.output_dir)
        checkpoint = str(out / f"checkpoint-{trainer.state.global_step}")
        if trainer.is_world_process_zero():
            from timealign.train.tracking import finish_wandb

            info = self.run_info()
            out.mkdir(parents=True, exist_ok=True)
            (out / RUN_INFO_FILE).write_text(json.dumps(info, indent=1))
            marker = out / PREEMPTED_FILE
            if self.preempted:
                record = {"checkpoint": checkpoint, "step": trainer.state.global_step, "reason": self.callback.reason}
                marker.write_text(json.dumps(record, indent=1))
                if self.callback.stop_file:
                    Path(self.callback.stop_file + REQUEUE_SUFFIX).write_text(json.dumps(record) + "\n")
                finish_wandb({"preempted_at_step": trainer.state.global_step})
            else:
                marker.unlink(missing_ok=True)
                finish_wandb()
            self.record_files()
        if self.preempted:
            error = TrainingPreempted(checkpoint, trainer.state.global_step, self.callback.reason or "?")
            if trainer.is_world_process_zero():  # one scontrol, one line
                logger.warning("%s; %s (exit %d)", error, stop_outcome(self.callback.reason)[1], EXIT_REQUEUE)
            raise error
        if getattr(trainer, "is_fsdp_enabled", False):  # the final model as one full state dict, not shards
            trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")


def train_and_save(trainer, recipe, data_dir=None) -> Path:
    """Train (resuming per training.resume_from_checkpoint), then save model, tokenizer, recipe, loss log and the
    model card (README.md, `timealign.train.model_card`).

    Shared by the DPO and SFT entry points. After a preemption checkpoint it raises TrainingPreempted (exit 75).
    """
    from timealign.train.hub import HubUploadMixin
    from timealign.train.model_card import CARD_FILE, live_wandb_url, write_model_card

    session = TrainingSession.start(trainer, recipe, data_dir=data_dir)
    wandb_url = live_wandb_url()  # the run is closed by finish(), before the card is written
    if isinstance(trainer, HubUploadMixin):  # its checkpoint cards and hub pushes describe this run
        trainer.attach_model_card(recipe, data_dir, wandb_url)
    trainer.train(resume_from_checkpoint=session.resume_from)
    session.finish()
    out = Path(recipe.resolved_output_dir())
    card = out / CARD_FILE
    users_card = None if card_may_replace(card) else card.read_bytes()  # a README.md timealign did not write
    trainer.save_model(str(out))
    if trainer.accelerator.is_main_process:
        trainer.processing_class.save_pretrained(str(out))
        (out / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(redact(recipe.to_dict()), sort_keys=False))
        (out / TRAIN_LOG).write_text(json.dumps(trainer.state.log_history, indent=1))
        if users_card is None:
            if not card_may_replace(card):
                card.unlink()  # PEFT's card, written by save_model just now (this folder had none of the user's)
            write_model_card(out, recipe, data_dir=data_dir, wandb_url=wandb_url)  # README.md: last, over PEFT's
        else:
            if card.read_bytes() != users_card:  # PEFT's save_pretrained adds its lines to an existing README.md
                card.write_bytes(users_card)
            logger.warning("no model card written: %s", foreign_card_message(card))
        session.record_files()
    trainer.accelerator.wait_for_everyone()
    return out
