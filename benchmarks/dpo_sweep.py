"""Part 2b of bench_dpo: how the shared-prompt gain grows with the prompt/completion length ratio (a PNG).

Synthetic pairs of exact token lengths (the tiny tokenizer encodes " price", " the" and " and" as one token each:
prompt = " price" x P, chosen = " the" x C, rejected = " and" x C), so every pair in a batch has the same length
and padding plays no part: the ratio is the shared prompt's alone. For every (P, C) of the grid: stock
`trl.DPOTrainer` and `OffsetDPOTrainer(shared_prompt=True)`, both with the reference forward every step, same model,
batch and steps; steps/s of each, alternating which goes first. Drawn as speed-up against P / C, one line per C.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.dpo_options import DpoBenchOptions
from benchmarks.harness import log, table


def sweep_pairs(n: int, prompt_tokens: int, completion_tokens: int):
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": " price" * prompt_tokens,
                "chosen": " the" * completion_tokens,
                "rejected": " and" * completion_tokens,
                "margin": 1.0,
            }
            for _ in range(n)
        ]
    )


def bench_sweep(opts: DpoBenchOptions) -> dict:
    import torch
    from transformers import AutoTokenizer

    from benchmarks.dpo_trainers import tiny_config
    from benchmarks.dpo_variants import build_trainer
    from benchmarks.trainer_ab import timed_train
    from timealign.models.tiny import ensure_tiny_model

    model_dir = ensure_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = [int(x) for x in opts.sweep_prompts.split(",")]
    completions = [int(x) for x in opts.sweep_completions.split(",")]
    steps = opts.sweep_steps
    config = tiny_config(opts, precompute=False)
    config.pop("precompute_ref_log_probs")
    config.update(
        max_steps=steps,
        per_device_train_batch_size=opts.sweep_batch_size,
        max_length=max(prompts) + max(completions) + 8,
    )
    points = []
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        for p in prompts:
            for c in completions:
                data = sweep_pairs(opts.sweep_batch_size * steps, p, c)

                def build(kind, workdir, callbacks, data=data):
                    return build_trainer(kind, model_dir, data, tokenizer, config, workdir, callbacks)

                order = ("trl", "shared_prompt") if len(points) % 2 == 0 else ("shared_prompt", "trl")
                res = {kind: timed_train(kind, build, Path(tmp), steps, 1, lambda: None) for kind in order}
                point = {
                    "prompt_tokens": p,
                    "completion_tokens": c,
                    "ratio_prompt_completion": p / c,
                    "trl_steps_per_s": res["trl"]["steps_per_s"],
                    "shared_steps_per_s": res["shared_prompt"]["steps_per_s"],
                    "speedup": res["shared_prompt"]["steps_per_s"] / res["trl"]["steps_per_s"],
                }
                points.append(point)
                log(
                    f"sweep P={p} C={c}: stock {point['trl_steps_per_s']:.3f} steps/s, shared "
                    f"{point['shared_steps_per_s']:.3f} -> x{point['speedup']:.2f}"
                )
    return {
        "batch_size": opts.sweep_batch_size,
        "timed_steps": steps - 1,
        "threads": torch.get_num_threads(),
        "points": points,
    }


def plot_sweep(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One panel per completion length, prompt tokens on x: the lines never cross, so no point needs a text label
    # (labels on a shared P/C axis piled up where two lengths met at one ratio).
    completions = sorted({pt["completion_tokens"] for pt in res["points"]})
    fig, axes = plt.subplots(
        1, len(completions), figsize=(3.2 * len(completions) + 0.6, 3.6), sharey=True, squeeze=False
    )
    for ax, c in zip(axes[0], completions):
        pts = sorted((pt for pt in res["points"] if pt["completion_tokens"] == c), key=lambda q: q["prompt_tokens"])
        ax.plot([q["prompt_tokens"] for q in pts], [q["speedup"] for q in pts], marker="o", color="#1f77b4")
        for q in pts:
            ax.annotate(
                f"x{q['speedup']:.2f}",
                (q["prompt_tokens"], q["speedup"]),
                fontsize=7,
                ha="center",
                textcoords="offset points",
                xytext=(0, 6),
            )
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.margins(x=0.1, y=0.15)  # room for the first, last and highest labels inside the frame
        ax.set_xscale("log", base=2)
        ax.set_xticks([q["prompt_tokens"] for q in pts], [str(q["prompt_tokens"]) for q in pts], fontsize=7)
        ax.set_title(f"completion {c} tokens", fontsize=8)
        ax.set_xlabel("prompt tokens")
    ax = axes[0][0]
    fig.suptitle(f"Shared-prompt offset-DPO vs stock TRL DPO (tiny model, CPU, batch {res['batch_size']})", fontsize=9)
    ax.set_ylabel("shared-prompt steps/s / stock TRL steps/s")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report_sweep(res: dict, png: Path | None) -> None:
    print(
        f"\n## 2b. Gain vs prompt/completion length (synthetic pairs of exact lengths, batch {res['batch_size']}, "
        f"{res['timed_steps']} timed steps each, reference forward every step in both)"
    )
    rows = [
        [
            str(p["prompt_tokens"]),
            str(p["completion_tokens"]),
            f"{p['ratio_prompt_completion']:.1f}",
            f"{p['trl_steps_per_s']:.3f}",
            f"{p['shared_steps_per_s']:.3f}",
            f"{p['speedup']:.2f}",
        ]
        for p in res["points"]
    ]
    print(table(["prompt", "completion", "P/C", "stock TRL steps/s", "shared steps/s", "speed-up"], rows))
    if png is not None:
        print(f"drawn: {png}")
