"""The launch check: a training run stops before it loads the model when what runs is not what the recipe asks.

    launched = check_launch(recipe, DPOConfig)   # before data prep and the model
    ...build the model and the trainer...
    check_trainer(trainer, recipe, launched)     # the Trainer's real accelerate state, before the first step

What the recipe asks: `launch.accelerate_config` (recipes/accelerate/NAME.yaml or a path: its distributed_type and
FSDP / DeepSpeed settings), the precision of `training.*` (bf16/fp16, TRL's defaults included) and `model.dtype`.
What runs: accelerate's process state, created here exactly as the Trainer's TrainingArguments will create it (so
data prep and everything after see the real ranks), the launcher's environment (WORLD_SIZE, ACCELERATE_USE_FSDP,
FSDP_*, ACCELERATE_DEEPSPEED_*, ACCELERATE_MIXED_PRECISION), then the Trainer's Accelerator and its plugins.

accelerate decides from the launcher, not from the recipe, and these launches go wrong without a word (accelerate
1.15, measured on CPU; ../shared/NOTES.md):
- `accelerate launch train/dpo.py ...` follows the user's default accelerate config (DDP for an FSDP recipe, ...);
- `accelerate launch --cpu --num_processes 2` starts one process;
- torchrun, or `accelerate launch --multi_gpu`, with no GPU and no use_cpu: every rank sees DistributedType.NO and
  trains alone;
- an FSDP config under a CPU (MULTI_CPU) state is ignored and DDP runs; ACCELERATE_USE_CPU drops DeepSpeed;
- an accelerate config with mixed_precision bf16 turns autocast on for a recipe with bf16 and fp16 off.

A mismatch raises RecipeError naming each difference (asked vs running) and the command that launches the recipe as
it asks. `launch.check=warn` logs the same and goes on; `launch.check=off` skips the check. Every rank finds the same
difference, and only rank 0 says it (a LaunchError: `run_command` prints it on rank 0, the other ranks exit 2
quietly), so 8 processes print one message, not 8.

Four launches are stopped before accelerate's process state is even created, so in seconds:
- a distributed environment without a launcher (WORLD_SIZE > 1 in the shell, one plain `python` process, no RANK):
  torch would wait forever for ranks nobody starts (or, without MASTER_ADDR, fail with accelerate's traceback);
  refused whatever launch.check says, with the command to use;
- a local rank alone (LOCAL_RANK=0 in the shell, no launcher, no MASTER_ADDR): accelerate would start a process
  group that torch's rendezvous refuses with a traceback (`check_lone_rank`); refused whatever launch.check says;
- ranks set by hand (WORLD_SIZE > 1, RANK, MASTER_ADDR; no torchrun, accelerate launch, deepspeed, mpirun or srun
  step set them): rank 0 would wait for the others until training.ddp_timeout, silent. One line with the command
  (`check_ranks_started`); a launch that really starts every rank by hand passes with launch.check=warn;
- more processes on this machine than it has GPUs (or CPU cores, without a GPU): one line, per launch.check.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from timealign.config import RecipeError
from timealign.config.accelerate import display_path, read_accelerate_config
from timealign.config.cli import RANK_VARIABLES, launcher_rank

logger = logging.getLogger("timealign.train.launch_check")

CHECK_MODES = ("error", "warn", "off")
TASK_SCRIPTS = {"dpo": "train/dpo.py", "sft": "train/sft.py"}
FAMILY_LABEL = {"single": "one process", "ddp": "DDP", "fsdp": "FSDP", "deepspeed": "DeepSpeed"}
# accelerate's defaults for keys a config may leave out (accelerate/utils/dataclasses.py, FSDP and DeepSpeed plugins)
FSDP_KEYS = {
    "fsdp_version": ("fsdp_version", "FSDP_VERSION", "1"),
    "offload_params": ("fsdp_offload_params", "FSDP_OFFLOAD_PARAMS", "false"),
    "reshard_after_forward": ("fsdp_reshard_after_forward", "FSDP_RESHARD_AFTER_FORWARD", None),
}
DEEPSPEED_KEYS = {
    "zero_stage": ("zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"),
    "offload_optimizer_device": ("offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none"),
    "offload_param_device": ("offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none"),
}
HALF_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}


class LaunchError(RecipeError):
    """The launch is not what the recipe asks. Every rank raises it; only rank 0 prints it (`run_command`)."""

    rank_zero_only = True


def _flag(env: Mapping[str, str], key: str) -> bool:
    return env.get(key, "").strip().lower() in ("1", "true", "yes", "on")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    name = getattr(value, "name", None)  # enums (ShardingStrategy.FULL_SHARD -> FULL_SHARD)
    return str(name if isinstance(name, str) else value).strip().lower()


def family_of(distributed_type: str) -> str:
    """accelerate's DistributedType name -> single | ddp | fsdp | deepspeed (others: the name, lower case)."""
    kind = distributed_type.rsplit(".", 1)[-1].upper()
    if kind == "NO":
        return "single"
    if kind.startswith("MULTI_"):
        return "ddp"
    return {"FSDP": "fsdp", "DEEPSPEED": "deepspeed"}.get(kind, kind.lower())


@dataclass
class Asked:
    """What the recipe asks."""

    config: str  # launch.accelerate_config as written
    path: Path
    family: str
    settings: dict[str, str]
    mixed_precision: str  # no | bf16 | fp16
    precision_source: str
    model_dtype: str


@dataclass
class Running:
    """What runs: accelerate's state and the launcher's request."""

    family: str
    distributed_type: str
    num_processes: int
    launcher: str  # how this process was started, in words
    launcher_processes: int | None = None  # processes the launcher was asked for (None: unknown)
    started: bool = False  # the launcher started them all (WORLD_SIZE set), not just this one
    launcher_many: bool = False  # asked for more than one, count unknown (accelerate's one-process launcher)
    settings: dict[str, str] = field(default_factory=dict)
    mixed_precision: str = "no"
    precision_source: str = ""
    notes: list[str] = field(default_factory=list)  # why accelerate runs something else than it was given
    ignored: list[str] = field(default_factory=list)  # what the launcher asked and accelerate dropped (FSDP on CPU)
    where: str = "before loading the model"


# ---------------------------------------------------------------------------------------------- what is asked


def _config_default(config_cls, name: str) -> Any:
    for f in dataclasses.fields(config_cls):
        if f.name == name:
            return f.default if f.default is not dataclasses.MISSING else None
    return None


def asked_precision(training: Mapping[str, Any], config_cls=None) -> tuple[str, str]:
    """(no | bf16 | fp16, how the recipe says it), with TRL's defaults (bf16 unset: true unless fp16)."""
    fp16 = training.get("fp16", _config_default(config_cls, "fp16") if config_cls else False)
    bf16 = training.get("bf16", _config_default(config_cls, "bf16") if config_cls else False)
    if bf16 is None:  # TRL (trl/trainer/base_config.py): bf16 defaults to `not fp16`
        bf16 = not fp16
    said = [f"training.{k}={_text(training[k])}" for k in ("bf16", "fp16") if k in training]
    source = ", ".join(said) or "TRL's default"
    return ("fp16" if fp16 else "bf16" if bf16 else "no"), source


def asked_launch(recipe, precision: tuple[str, str]) -> Asked:
    path, config = read_accelerate_config(recipe.launch.accelerate_config)
    family = family_of(str(config.get("distributed_type", "NO")))
    settings: dict[str, str] = {}
    if family == "fsdp":
        fsdp = config.get("fsdp_config") or {}
        for key, (config_key, _, default) in FSDP_KEYS.items():
            value = fsdp.get(config_key, default)
            if value is not None:
                settings[key] = _text(value)
    elif family == "deepspeed":
        ds = config.get("deepspeed_config") or {}
        for key, (config_key, _, default) in DEEPSPEED_KEYS.items():
            settings[key] = _text(ds.get(config_key, default))
    return Asked(
        recipe.launch.accelerate_config, path, family, settings, precision[0], precision[1], recipe.model.dtype
    )


# ---------------------------------------------------------------------------------------------- what runs


def _parent_num_processes() -> int | None:
    """`--num_processes N` of the parent `accelerate launch` (Linux /proc), for accelerate's one-process launcher."""
    try:
        args = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if "launch" not in args:
        return None
    for i, arg in enumerate(args[args.index("launch") + 1 :], start=args.index("launch") + 1):
        if arg.startswith(("--num_processes=", "--num-processes=")):
            value = arg.split("=", 1)[1]
        elif arg in ("--num_processes", "--num-processes") and i + 1 < len(args):
            value = args[i + 1]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None


def launcher_request(env: Mapping[str, str]) -> tuple[str, int | None, bool, bool]:
    """(launcher in words, processes it was asked for or None, whether it started them all (WORLD_SIZE), asked for
    several with the count unknown)."""
    accelerate = "ACCELERATE_DYNAMO_BACKEND" in env  # every `accelerate launch` sets it
    world = env.get("WORLD_SIZE", "").strip()
    if world.isdigit():
        name = "accelerate launch" if accelerate else started_by(env)
        if name is None:  # WORLD_SIZE from the shell (say WORLD_SIZE=1 set by hand): no launcher said so
            return f"no launcher (WORLD_SIZE={world} set by hand)", int(world), True, False
        return f"{name} (WORLD_SIZE={world})", int(world), True, False
    if accelerate:  # the one-process launcher (--cpu, or no multi-process mode): no WORLD_SIZE
        asked = _parent_num_processes()
        if asked is not None:
            return f"accelerate launch --num_processes {asked}", asked, False, False
        # it sets MASTER_ADDR/MASTER_PORT only when asked for more than one process or machine
        many = bool(env.get("MASTER_ADDR") or env.get("MASTER_PORT"))
        return "accelerate launch" + (" (MASTER_ADDR/PORT set)" if many else ""), None, False, many
    return "no launcher", None, False, False


def process_state(training: Mapping[str, Any], config_cls, env: Mapping[str, str]):
    """accelerate's PartialState, created as TrainingArguments will create it (transformers 5: cpu = use_cpu or
    ACCELERATE_USE_CPU; backend = ddp_backend; timeout = ddp_timeout). Made now, it is what data prep and model
    loading see too; TrainingArguments later resets and rebuilds the same state on the same process group."""
    from accelerate import PartialState

    backend = training.get("ddp_backend")
    cpu = bool(training.get("use_cpu")) or _flag(env, "ACCELERATE_USE_CPU")
    seconds = training.get("ddp_timeout", _config_default(config_cls, "ddp_timeout") or 1800)
    deepspeed = _flag(env, "ACCELERATE_USE_DEEPSPEED") or bool(training.get("deepspeed"))
    if deepspeed and not _flag(env, "ACCELERATE_USE_CPU") and not PartialState._shared_state:
        # DeepSpeed's own process group first (deepspeed.comm: what ZeRO-3's zero.Init partitions over). accelerate
        # sets it up in a non-CPU state only, so a use_cpu run gets it here and its CPU state on top of it.
        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        try:
            state = PartialState(timeout=timedelta(seconds=seconds))
        finally:
            if not _flag(env, "ACCELERATE_USE_DEEPSPEED"):
                del os.environ["ACCELERATE_USE_DEEPSPEED"]
        if not cpu:
            return state
        PartialState._reset_state()  # as TrainingArguments does before it builds its own
    if cpu:
        return PartialState(cpu=True, backend=backend)
    return PartialState(backend=backend, timeout=timedelta(seconds=seconds))


def _env_settings(family: str, env: Mapping[str, str]) -> dict[str, str]:
    keys = FSDP_KEYS if family == "fsdp" else DEEPSPEED_KEYS if family == "deepspeed" else {}
    return {key: _text(env[var]) for key, (_, var, _) in keys.items() if var in env}


def running_before_model(recipe, config_cls, env: Mapping[str, str] | None = None) -> Running:
    """What will run, read before data prep and the model: the process state and the launcher's environment."""
    env = dict(os.environ if env is None else env)  # before PartialState writes RANK/WORLD_SIZE on CPU
    training = recipe.training
    launcher, asked_n, started, many = launcher_request(env)
    state = process_state(training, config_cls, env)
    kind = state.distributed_type.value
    family, notes, ignored = family_of(kind), [], []
    cpu_env = _flag(env, "ACCELERATE_USE_CPU")
    if _flag(env, "ACCELERATE_USE_DEEPSPEED") or training.get("deepspeed"):
        if cpu_env:  # AcceleratorState: DeepSpeed only `and not cpu`
            notes.append("ACCELERATE_USE_CPU=true makes accelerate drop DeepSpeed")
            ignored.append(
                "DeepSpeed (ACCELERATE_USE_DEEPSPEED=true from the launcher's accelerate config) is "
                "dropped by ACCELERATE_USE_CPU=true"
            )
        else:
            family = "deepspeed"
    elif _flag(env, "ACCELERATE_USE_FSDP") or training.get("fsdp"):
        if kind.startswith("MULTI_") and kind != "MULTI_CPU":
            family = "fsdp"
        else:  # AcceleratorState turns FSDP on only over GPU-type process groups
            notes.append(f"accelerate ignores FSDP under DistributedType.{kind} (FSDP runs on GPUs only)")
            ignored.append(
                f"FSDP (ACCELERATE_USE_FSDP=true from the launcher's accelerate config) is ignored by "
                f"accelerate under DistributedType.{kind}: FSDP runs on GPUs only"
            )
    if family == "single" and started and (asked_n or 0) > 1 and not (training.get("use_cpu") or cpu_env):
        notes.append("no GPU in use and no use_cpu: accelerate forms no process group on CPU")
    precision, source = asked_precision(training, config_cls)
    if precision == "no":  # TrainingArguments: with bf16 and fp16 off, the launcher's value
        launched = env.get("ACCELERATE_MIXED_PRECISION", "no").strip().lower() or "no"
        if launched != "no":
            precision, source = (
                launched,
                (
                    f"ACCELERATE_MIXED_PRECISION={launched}, set by the launcher from its "
                    "accelerate config's mixed_precision"
                ),
            )
    return Running(
        family,
        f"DistributedType.{kind}",
        state.num_processes,
        launcher,
        asked_n,
        started,
        many,
        _env_settings(family, env),
        precision,
        source,
        notes,
        ignored,
    )


def running_in_trainer(trainer, launched: Running | None) -> Running:
    """What the Trainer's Accelerator really set up (its state and plugins)."""
    accelerator = trainer.accelerator
    state = accelerator.state
    kind = str(getattr(state.distributed_type, "value", state.distributed_type))
    settings: dict[str, str] = {}
    fsdp = getattr(state, "fsdp_plugin", None)
    if kind == "FSDP" and fsdp is not None:
        offload = fsdp.cpu_offload
        offloaded = getattr(offload, "offload_params", None)
        if offloaded is None:  # FSDP2: CPUOffloadPolicy (offload) or the plain OffloadPolicy (none)
            offloaded = type(offload).__name__ == "CPUOffloadPolicy"
        settings = {
            "fsdp_version": _text(fsdp.fsdp_version),
            "offload_params": _text(offloaded),
            "reshard_after_forward": _text(fsdp.reshard_after_forward),
        }
    ds = getattr(state, "deepspeed_plugin", None)
    if kind == "DEEPSPEED" and ds is not None:
        settings = {key: _text(getattr(ds, key)) for key in DEEPSPEED_KEYS if getattr(ds, key, None) is not None}
    precision = str(accelerator.mixed_precision)
    return Running(
        family_of(kind),
        f"DistributedType.{kind}",
        accelerator.num_processes,
        launched.launcher if launched else "?",
        launched.launcher_processes if launched else None,
        launched.started if launched else False,
        launched.launcher_many if launched else False,
        settings,
        precision,
        "the Trainer's Accelerator",
        where="after building the trainer",
    )


# ---------------------------------------------------------------------------------------------- compare


def _describe_running(run: Running) -> str:
    label = FAMILY_LABEL.get(run.family, run.family)
    if run.family in ("ddp", "fsdp", "deepspeed"):
        label += f" over {run.num_processes} process{'es' if run.num_processes != 1 else ''}"
    return f"{label} ({run.distributed_type})"


def _settings_text(settings: Mapping[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items())


def mismatches(asked: Asked, run: Running) -> list[str]:
    """Each difference between the recipe's ask and what runs, as `what: asked X, running Y (why)`."""
    out = []
    why = f" ({'; '.join(run.notes)})" if run.notes else ""
    asked_n = run.launcher_processes
    if asked_n is not None and asked_n != run.num_processes and run.started:
        out.append(
            f"processes: asked {asked_n} by {run.launcher}, running {asked_n // run.num_processes} separate "
            f"trainings of {run.num_processes} process{'es' if run.num_processes > 1 else ''} "
            f"({run.distributed_type} on every rank: no shared process group){why}"
        )
    elif (asked_n is not None and asked_n != run.num_processes) or (run.launcher_many and run.num_processes == 1):
        out.append(
            f"processes: asked {asked_n or 'more than one'} by {run.launcher}, running {run.num_processes} "
            "(with --cpu, or without a multi-process config, accelerate's launcher starts one process; for "
            "several CPU processes use a DDP config with ACCELERATE_USE_CPU=true, as below)"
        )
    compatible = run.family == asked.family or (asked.family == "ddp" and run.family == "single")
    if compatible:  # what the recipe asks runs, but not what the launcher was told: its config was dropped
        out += [
            f"launcher: {what}; running {_describe_running(run)} (launch with the recipe's "
            f"{display_path(asked.path)}, or on CPU without that config)"
            for what in run.ignored
        ]
    if not compatible:
        config = f"{FAMILY_LABEL.get(asked.family, asked.family)} ({display_path(asked.path)}"
        config += f": {_settings_text(asked.settings)})" if asked.settings else ")"
        out.append(f"distributed: asked {config}, running {_describe_running(run)}{why}")
    elif run.family == asked.family:
        for key, value in asked.settings.items():
            if key in run.settings and run.settings[key] != value:
                out.append(
                    f"{FAMILY_LABEL[run.family]} {key}: asked {value} ({display_path(asked.path)}), "
                    f"running {run.settings[key]}"
                )
    if run.mixed_precision != asked.mixed_precision:
        out.append(
            f"mixed precision: asked {asked.mixed_precision} ({asked.precision_source}), running "
            f"{run.mixed_precision} ({run.precision_source})"
        )
    half = HALF_DTYPES.get(asked.model_dtype)
    if half and run.mixed_precision in HALF_DTYPES.values() and run.mixed_precision != half:
        out.append(
            f"precision: model.dtype={asked.model_dtype} weights under {run.mixed_precision} autocast "
            f"(use model.dtype=float32 for mixed precision, or training.{half}=true)"
        )
    return out


def right_command(recipe, asked: Asked, run: Running) -> str:
    """The commands that launch this recipe as it asks, with the arguments it was given."""
    import torch

    source = getattr(recipe, "source", None) or f"recipe={recipe.name}"
    args = [*shlex.split(source), *(f"{k}={v}" for k, v in (getattr(recipe, "overrides", None) or {}).items())]
    count = run.launcher_processes if (run.launcher_processes or 0) > 1 else None
    script = TASK_SCRIPTS.get(recipe.task, f"train/{recipe.task}.py")
    flags = ["--config_file", display_path(asked.path)] + (["--num_processes", str(count)] if count else [])
    prefix = ""
    gpu = torch.cuda.is_available()
    if not gpu and asked.family in ("ddp", "single"):
        prefix = "ACCELERATE_USE_CPU=true "  # one DDP group over gloo instead of N lone trainings
    lines = [
        "Launch it as the recipe asks:",
        f"  {prefix}accelerate launch {shlex.join(flags)} {script} {shlex.join(args)}",
    ]
    if not gpu and asked.family == "fsdp":
        lines.append("  (no GPU here: accelerate runs FSDP on GPUs only; on CPU use launch.accelerate_config=ddp)")
    if not gpu and asked.family == "deepspeed":
        lines.append("  (no GPU here: leave ACCELERATE_USE_CPU unset, it makes accelerate drop DeepSpeed)")
    lines += [
        f"or, inside a Slurm job: python -m timealign.cluster launch task={recipe.task} {shlex.join(args)}",
        "To go on anyway: launch.check=warn (log this and train) or launch.check=off.",
    ]
    return "\n".join(lines)


def _decide(recipe, asked: Asked, run: Running) -> None:
    found = mismatches(asked, run)
    summary = (
        f"{_describe_running(run)}, mixed precision {run.mixed_precision}, by {run.launcher}; "
        f"recipe {recipe.name!r} asks {FAMILY_LABEL.get(asked.family, asked.family)} "
        f"({display_path(asked.path)})"
    )
    if not found:
        logger.info("launch check passed (%s): %s", run.where, summary)
        return
    message = (
        f"launch check ({run.where}): this run is not what recipe {recipe.name!r} asks "
        f"(launch.accelerate_config={asked.config}):\n"
        + "\n".join(f"  {m}" for m in found)
        + "\n"
        + right_command(recipe, asked, run)
    )
    if recipe.launch.check == "warn":
        if launcher_rank() == 0:  # every rank finds it; one says it
            logger.warning("%s\n(launch.check=warn: going on)", message)
        return
    raise LaunchError(message)


def _mode(recipe) -> str:
    mode = str(recipe.launch.check).strip().lower()
    if mode not in CHECK_MODES:
        raise RecipeError(f"launch.check={recipe.launch.check!r} is not one of: {', '.join(CHECK_MODES)}")
    return mode


def _script_command(recipe, processes: int) -> str:
    """The `accelerate launch` command that starts this recipe on `processes` processes of this machine."""
    import torch

    source = getattr(recipe, "source", None) or f"recipe={recipe.name}"
    args = [*shlex.split(source), *(f"{k}={v}" for k, v in (getattr(recipe, "overrides", None) or {}).items())]
    path, _ = read_accelerate_config(recipe.launch.accelerate_config)
    script = TASK_SCRIPTS.get(recipe.task, f"train/{recipe.task}.py")
    prefix = "" if torch.cuda.is_available() else "ACCELERATE_USE_CPU=true "  # one gloo group, not N lone runs
    return prefix + shlex.join(
        ["accelerate", "launch", "--config_file", display_path(path), "--num_processes", str(processes), script, *args]
    )


def check_launcher_present(recipe, env: Mapping[str, str]) -> None:
    """WORLD_SIZE > 1 with no rank: a distributed environment left in the shell, one plain process. torch would wait
    for the other ranks forever (or fail in accelerate without MASTER_ADDR): stop now, whatever launch.check says."""
    world = env.get("WORLD_SIZE", "").strip()
    if not world.isdigit() or int(world) <= 1:
        check_lone_rank(recipe, env)
        return
    if env.get("RANK", "").strip() and not env.get("MASTER_ADDR", "").strip():  # set by hand, half of it
        raise LaunchError(
            f"WORLD_SIZE={world} and RANK={env['RANK']} are set but MASTER_ADDR is not: torch cannot "
            "find rank 0. Set MASTER_ADDR and MASTER_PORT in every process, or let a launcher set all "
            f"of them: {_script_command(recipe, int(world))}"
        )
    if any(env.get(key, "").strip() for key in RANK_VARIABLES):
        check_ranks_started(recipe, env, int(world))
        return
    left = ", ".join(k for k in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if env.get(k))
    raise RecipeError(
        f"WORLD_SIZE={world} is set but no launcher started this process (RANK and LOCAL_RANK are "
        f"unset): it would wait for {int(world) - 1} more process(es) that nobody starts. Unset "
        f"{left} to train in one process, or start all {world}: {_script_command(recipe, int(world))}"
    )


def check_lone_rank(recipe, env: Mapping[str, str]) -> None:
    """LOCAL_RANK with no launcher and no other process (WORLD_SIZE unset or 1): accelerate takes LOCAL_RANK alone
    for a distributed launch and torch's env:// rendezvous fails with a traceback for the variables it lacks
    (MASTER_ADDR; on a GPU also MASTER_PORT, RANK, WORLD_SIZE). Refused in one line, whatever launch.check says.
    (RANK alone starts no process group: it passes.)"""
    if not env.get("LOCAL_RANK", "").strip() or started_by(env) is not None or "ACCELERATE_DYNAMO_BACKEND" in env:
        return
    ranks = [key for key in ("RANK", "LOCAL_RANK") if env.get(key, "").strip()]
    import torch

    training = recipe.training or {}
    cpu = _flag(env, "ACCELERATE_USE_CPU") or bool(training.get("use_cpu")) or not torch.cuda.is_available()
    needed = ("MASTER_ADDR",) if cpu else ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    lacking = [key for key in needed if not env.get(key, "").strip()]
    if not lacking:
        return  # a complete one-process group, set up by hand: it works
    shown = ", ".join(f"{key}={env[key].strip()}" for key in ranks)
    left = ", ".join(k for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if env.get(k))
    raise RecipeError(
        f"{shown} {'is' if len(ranks) == 1 else 'are'} set but no launcher started this process and "
        f"{', '.join(lacking)} {'is' if len(lacking) == 1 else 'are'} not: accelerate would start a distributed "
        f"run that torch cannot join. Unset {left} to train in one process, or let a launcher set them all: "
        f"{_script_command(recipe, 2)}"
    )


def started_by(env: Mapping[str, str]) -> str | None:
    """The launcher that started this process as one of several ranks, from the variables only it sets; None when
    the rank variables were set by hand (or are left over in the shell)."""
    if env.get("TORCHELASTIC_RUN_ID", "").strip():
        return "torchrun"  # accelerate's multi-process launchers run torchrun's agent too
    if env.get("CROSS_RANK", "").strip():
        return "deepspeed"
    if env.get("OMPI_COMM_WORLD_RANK", "").strip() or env.get("PMI_RANK", "").strip():
        return "mpirun"
    procid, rank = env.get("SLURM_PROCID", "").strip(), env.get("RANK", "").strip()
    if env.get("SLURM_STEP_ID", "").strip() and procid and procid == (rank or procid):
        return "srun"  # a job step's task whose rank is the one srun gave it (an salloc shell has no step)
    return None


def check_ranks_started(recipe, env: Mapping[str, str], world: int) -> None:
    """WORLD_SIZE > 1 and a rank, set by hand with no launcher (an salloc shell's leftovers, a copied job script):
    rank 0 would wait training.ddp_timeout (30 minutes) for ranks that nobody may start, printing nothing. Per
    launch.check: error stops in one line, warn says it and goes on (a launch by hand of every rank), off is
    silent."""
    if started_by(env) is not None or _mode(recipe) == "off":
        return
    ranks = ", ".join(f"{k}={env[k]}" for k in ("RANK", "LOCAL_RANK") if env.get(k, "").strip())
    left = ", ".join(k for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if env.get(k))
    message = (
        f"WORLD_SIZE={world} and {ranks} are set but no launcher started this process (no torchrun, accelerate "
        f"launch, deepspeed, mpirun or srun step): it would wait up to training.ddp_timeout for {world - 1} other "
        f"rank(s) that nobody may start. Unset {left} to train in one process, or start all {world}: "
        f"{_script_command(recipe, world)} (starting every rank yourself: launch.check=warn)"
    )
    if _mode(recipe) == "warn":
        logger.warning("%s (launch.check=warn: going on)", message)
        return
    raise RecipeError(message)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_devices(training: Mapping[str, Any], env: Mapping[str, str]) -> tuple[int, str]:
    """(devices of this machine the processes can each take, what they are in words): the GPUs torch sees, or the
    CPU cores (usable by this process) when the run is on CPU."""
    import torch

    cpu = bool(training.get("use_cpu")) or _flag(env, "ACCELERATE_USE_CPU") or not torch.cuda.is_available()
    if cpu:
        return usable_cores(), "CPU cores"
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return torch.cuda.device_count(), "GPUs" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible else "")


def check_device_count(recipe, env: Mapping[str, str]) -> None:
    """More processes on this machine than it has GPUs (or cores, on CPU): one line, per launch.check."""
    local = env.get("LOCAL_WORLD_SIZE", "").strip()  # torchrun's (accelerate's multi-process launchers run it)
    if not local.isdigit() or int(local) <= 1:
        return
    devices, what = local_devices(recipe.training, env)
    if int(local) <= devices:
        return
    message = (
        f"launch check: {local} processes on this machine but it has {devices} {what}: start at most "
        f"{devices} (--num_processes {devices}, or processes_per_node= with python -m timealign.cluster); "
        f"batch.global_size keeps the global batch whatever the count"
    )
    if recipe.launch.check == "warn":
        if launcher_rank(env) == 0:
            logger.warning("%s (launch.check=warn: going on)", message)
        return
    raise LaunchError(message)


def check_launch(recipe, config_cls, env: Mapping[str, str] | None = None) -> Running | None:
    """Before data prep and the model: stop (RecipeError) when what runs is not what the recipe asks.
    Returns what runs (for `check_trainer`), None with launch.check=off."""
    mode = _mode(recipe)
    check_launcher_present(recipe, os.environ if env is None else env)
    if mode == "off":
        return None
    check_device_count(recipe, os.environ if env is None else env)
    run = running_before_model(recipe, config_cls, env)
    _decide(recipe, asked_launch(recipe, asked_precision(recipe.training, config_cls)), run)
    return run


def check_trainer(trainer, recipe, launched: Running | None) -> None:
    """After building the Trainer, before its first step: the same comparison on its Accelerator's real state."""
    if _mode(recipe) == "off":
        return
    args = trainer.args
    precision = asked_precision({"bf16": bool(args.bf16), "fp16": bool(args.fp16)})
    precision = (precision[0], asked_precision(recipe.training, type(args))[1])
    _decide(recipe, asked_launch(recipe, precision), running_in_trainer(trainer, launched))
