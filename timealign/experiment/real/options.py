"""experiment-real's options (`RealOptions`), their checks before anything runs, and what `auto` resolves to."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.schema import opt
from timealign.experiment.real.arms import ARMS
from timealign.experiment.spec import comma_choices, comma_seeds

logger = logging.getLogger("timealign.experiment.real")

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_V1 = REPO_ROOT.parent / "shared" / "data" / "tictoc-v1"
DEFAULT_TIMELYCHAT = REPO_ROOT.parent / "shared" / "data" / "timelychat-sample" / "eval.jsonl"
READABLE_CURVE_SAMPLES = 64  # fewer held-out samples a curve point are noise (16 untrained ones read 0.654, not 0.500)


@dataclass
class RealOptions:
    out: str = opt(
        "results/experiment-real",
        "output folder: real.json, real.md, real.png, eval/, models/; new, empty, or this very command's own run (a "
        "rerun goes on there); a folder holding anything else is refused (timealign/experiment/real/claim.py)",
    )
    data: str = opt(str(DEFAULT_V1), "the TicToc v1 release's data/ folder (prefer{Tool,NoTool}_elapse_*.json)")
    arms: str = opt(
        ",".join(ARMS), "comma list of arms: " + ", ".join(f"{a.name} ({a.description})" for a in ARMS.values())
    )
    seeds: str = opt(
        "0",
        "comma list of seeds: each trained arm's label-balanced train subset and order; the held-out samples are the "
        "same on every seed, and the untrained arms (base, clock) are scored once and stand for every seed",
    )
    train_pairs: int = opt(
        48, "pairs each trained arm sees (the label-balanced train split, in the seed's order; steps = this / batch)"
    )
    batch_pairs: int = opt(8, "pairs per optimizer step (one pair per forward, accumulated)")
    learning_rate: float = opt(
        1e-4, "training.learning_rate of every trained arm (full fine-tuning, fp32; 2e-5 moved nothing in 6 steps)"
    )
    beta: float = opt(0.1, "training.beta of every trained arm")
    device: str = opt(
        "auto",
        "where arms train and are evaluated: auto (a CUDA GPU when torch sees one, else the CPU) | cpu | cuda "
        "(training.use_cpu=false: one GPU; `make experiment-real` on a GPU node, docs/experiment/real.md)",
        choices=("auto", "cpu", "cuda"),
    )
    eval_backend: str = opt(
        "auto",
        "held-out evaluation: auto (vllm when this Python has it, else hf) | vllm (the vLLM engine: make "
        "experiment-real's venv on CPU) | hf (transformers, on the training device)",
        choices=("auto", "vllm", "hf"),
    )
    eval_batch_size: int = opt(
        0,
        "eval.batch_size of the held-out evaluation (hf: prompts per generate call); 0: the recipe's 8 on a CPU, "
        "64 on a GPU",
    )
    eval_samples: int = opt(
        0,
        "held-out samples scored, the same in every arm: 0, the whole test split (685; 8-18 minutes per arm with "
        "the vLLM CPU engine here); N: a seeded sample of N, stratified by label and spread over the scenarios",
    )
    curve_every: int = opt(3, "learning curve: score curve_samples held-out samples every N steps (0: no curve)")
    curve_samples: int = opt(
        READABLE_CURVE_SAMPLES,
        "learning curve: held-out samples per point (stratified, the same in every arm). 64 is the fewest that can "
        "be read (16 are noise: an untrained step-0 point read 0.654 where the whole split reads 0.500); each point "
        "is hf generation in the training process",
    )
    timer: bool = opt(
        False,
        "also TIMER SFT of smol (recipe smol-timer): delay F1 and RMSLE before and after (about 16 minutes on 2 idle "
        "cores, beyond the 86 of the DPO arms)",
    )
    timer_steps: int = opt(-1, "TIMER: training.max_steps (-1: the recipe's epochs)")
    timer_dialogs: int = opt(20, "TIMER: held-out synthetic dialogs scored")
    timelychat_sample: str = opt(str(DEFAULT_TIMELYCHAT), "TIMER: the authors' TimelyChat sample (eval.jsonl)")
    resamples: int = opt(1000, "bootstrap resamples for intervals and paired differences")
    overlap: bool = opt(
        True,
        "CPU: evaluate each arm in its own process on half the cores while the next arm trains on the other half "
        "(the vLLM CPU engine computes on one core of this 2-core machine); false, or a GPU: one after the other",
    )
    base: str = opt("smol", "model.name_or_path of every arm")
    heldout: str = opt(
        "test",
        "what every arm is scored on: test (the v1 test split, the paper's held-out scenarios) | validation "
        "(validation_share of the train split's trajectories, set aside before training: for choosing a "
        "configuration without looking at the test split)",
        choices=("test", "validation"),
    )
    validation_by: str = opt(
        "trajectory",
        "with heldout=validation: data.validation_by (trajectory: a share of each train scenario's trajectories; "
        "scenario: a share of each sensitivity class's train scenarios, whole: validation then asks, as the test "
        "split does, about tools never trained on)",
        choices=("trajectory", "scenario"),
    )
    validation_share: float = opt(0.25, "with heldout=validation: data.validation_share (the v1 train split: 169 "
                                  "validation samples at 0.25, 138 balanced pairs left to train on)")  # fmt: skip
    overrides: str = opt(
        "",
        "recipe overrides of every trained arm, `key=value` separated by `;` (e.g. 'lora.enabled=true;lora.r=16' or "
        "'training.lr_scheduler_type=cosine'): the configuration a search varies, the report lists them; epochs are "
        "train_pairs (steps = train_pairs / batch_pairs: 364 is two epochs of the 182 balanced pairs)",
    )
    parallel: int = opt(
        0,
        "runs at once: N > 1 runs each trained arm and seed (and the untrained arms together) as its own process, N "
        "at a time, in <out>/runs/, then merges them into <out> as merge= does; 1: one process, arms one after the "
        "other; 0: 1 on a CPU or with timer=true, on a GPU as many as its free memory holds at 10 GB a run (at "
        "most 8, the most measured: 8 smol runs on one H200 finished together in 253 s)",
    )
    merge: str = opt(
        "",
        "comma list of finished runs (folders holding real.json, or the files) to combine into <out> without "
        "training: seeds and arms run apart, one report with the across-seed summary; the runs must share model, "
        "pairs, batch, lr, beta and held-out samples (timealign/experiment/seeds.py)",
    )
    rescore: str = opt(
        "",
        "a finished run's folder (real.json, models/) to score again without training: its models on the same "
        "held-out samples with this eval_backend, eval_batch_size and device (every other option is the run's), "
        "into out=; real.json and real.md then say per arm and seed on how many samples it decides as the run did "
        "(a number checked with a second backend). A parallel or merged run: rescore each run it joined "
        "(<out>/runs/<unit>), then merge= the rescored folders",
    )


def recipe_overrides(text: str) -> dict[str, str]:
    """`overrides=` as {dotted key: value}; one RecipeError line for a part that is not `key=value`."""
    pairs = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or "." not in key:
            raise RecipeError(f"overrides={text!r}: {part!r} is not a dotted recipe key=value (e.g. "
                              "'training.num_train_epochs=2'); separate several with ';'")  # fmt: skip
        pairs[key.strip()] = value.strip()
    return pairs


def validate(o: RealOptions) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(arms, seeds) of a run (not `rescore=` or `merge=`); every option that cannot run is refused in one line
    before anything runs."""
    arms = comma_choices(o.arms, tuple(ARMS), "arms")
    seeds = comma_seeds(o.seeds)
    for name in ("train_pairs", "batch_pairs", "resamples"):
        if getattr(o, name) < 1:
            raise RecipeError(f"{name} must be >= 1, got {getattr(o, name)}")
    recipe_overrides(o.overrides)  # a malformed one is refused before anything runs (the recipes load in run())
    if not 0 < o.validation_share < 1:
        raise RecipeError(f"validation_share must be in (0, 1), got {o.validation_share}")
    if o.eval_samples < 0 or o.curve_every < 0:
        raise RecipeError("eval_samples and curve_every must be >= 0")
    if o.curve_every and o.curve_samples < 1:
        raise RecipeError(f"curve_samples must be >= 1 with curve_every={o.curve_every} (or curve_every=0: no curve)")
    if not Path(o.data).is_dir():
        raise RecipeError(f"data={o.data}: not a folder; give the TicToc v1 release's data/ folder")
    if o.timer and not Path(o.timelychat_sample).is_file():
        raise RecipeError(f"timelychat_sample={o.timelychat_sample}: no such file (or timer=false)")
    if o.parallel < 0:
        raise RecipeError(f"parallel must be >= 0, got {o.parallel}")
    return arms, seeds


def resolve_device(o: RealOptions) -> None:
    """Turn `auto` into what runs (the summary's settings say what did): the device, the evaluation backend and its
    batch size. A GPU asked for and not there, or vLLM asked for and not installed, is refused before any training."""
    import importlib.util

    import torch

    cuda = torch.cuda.is_available()
    if o.device == "cuda" and not cuda:
        raise RecipeError("device=cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is False); device=cpu")
    if o.device == "auto":
        o.device = "cuda" if cuda else "cpu"
    vllm = importlib.util.find_spec("vllm") is not None
    if o.eval_backend == "vllm" and not vllm:
        raise RecipeError(
            "eval_backend=vllm: vllm is not installed in this Python (make experiment-real uses .venv-vllm on a "
            "CPU); eval_backend=hf scores with transformers instead"
        )
    if o.eval_backend == "auto":
        o.eval_backend = "vllm" if vllm else "hf"
    if o.eval_batch_size < 0:
        raise RecipeError(f"eval_batch_size must be >= 0, got {o.eval_batch_size}")
    if o.eval_batch_size == 0:
        o.eval_batch_size = 64 if o.device == "cuda" else 8
    logger.info("device %s; held-out evaluation: eval.backend=%s, eval.batch_size=%d", o.device, o.eval_backend,
                o.eval_batch_size)  # fmt: skip


def refuse_options_not_used(o: RealOptions, command: str, own: tuple[str, ...], keeps: str) -> None:
    """`merge=` and `rescore=` take only the options `own`; any other one given (not at its default) would be
    ignored without a word, so it is refused, naming each. `keeps`: who keeps their own ("merged runs keep their")."""
    defaults = RealOptions()
    given = [f.name for f in fields(RealOptions) if f.name not in own
             and getattr(o, f.name) != getattr(defaults, f.name)]  # fmt: skip
    if given:
        raise RecipeError(f"{command}: {', '.join(f'{k}={getattr(o, k)}' for k in given)}: {keeps} own arms, seeds, "
                          f"samples, recipe; give only {', '.join(own)}")  # fmt: skip
