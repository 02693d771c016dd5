"""The LM head on the labelled positions only (`timealign.train.compact_head`, `OffsetDPOTrainer(compact_lm_head=)`):
on CPU, where TRL's fused head projects every position of a shared-layout row, the trainer projects only the
completion tokens' positions, and a step gives what TRL's head gives (`compact_lm_head=False`): per-pair log-probs
of each reference source, loss, every gradient, every logged metric, in float32 on the same weights and pairs. On the
tiny model for the tree (padded rows, padding-free) and the prompt cache, and on smol (49k vocabulary, tied head).
The projected positions are counted on TRL's kernel (`trl.kernels.ChunkedLogProbFunction`, both paths call it).
"""

from __future__ import annotations

import pytest
import torch
from dpo_layouts import assert_same, assert_same_logs, load_model, make_config, perturb, step, synthetic_pairs

from timealign.train import compact_head
from timealign.train.odpo import OffsetDPOTrainer

LAYOUTS = {"tree": {}, "padding_free": {"padding_free": True}, "cache": {"prompt_cache": True}}


@pytest.fixture
def projected(monkeypatch):
    """Rows of hidden states each call of TRL's head kernel projects (the kernel itself runs unchanged)."""
    from trl.kernels import ChunkedLogProbFunction

    rows: list[int] = []
    apply = ChunkedLogProbFunction.apply

    def counted(hidden, *args):
        rows.append(hidden.size(0))
        return apply(hidden, *args)

    monkeypatch.setattr(ChunkedLogProbFunction, "apply", counted)
    return rows


def build(tmp_path, model_dir, tokenizer, dataset, compact, layout="tree", source="reload"):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = OffsetDPOTrainer(
        model=load_model(model_dir),
        ref_model=load_model(model_dir) if source == "ref_model" else None,
        args=make_config(tmp_path / f"{layout}-{source}-{compact}"),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora if source == "lora" else None,
        compact_lm_head=compact,
        **LAYOUTS[layout],
    )
    perturb(trainer.model)  # the policy differs from the reference
    return trainer


def labelled_and_all(trainer) -> tuple[int, int]:
    """(labelled positions, all positions) of the whole dataset's micro-batch in the trainer's layout."""
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(trainer.train_dataset))])
    tree = trainer._pairs(batch)
    return int((tree.labels[:, 1:] != -100).sum()), tree.labels[:, 1:].numel()


@pytest.mark.parametrize(
    "layout,source",
    [("tree", "reload"), ("tree", "ref_model"), ("tree", "lora"), ("padding_free", "reload"), ("cache", "reload")],
)
def test_compact_step_equals_trls_head(tmp_path, tiny_model_dir, tiny_tokenizer, projected, layout, source):
    dataset = synthetic_pairs(tiny_tokenizer)
    steps, rows = {}, {}
    for compact in (False, True):
        trainer = build(tmp_path, tiny_model_dir, tiny_tokenizer, dataset, compact, layout, source)
        projected.clear()
        steps[compact] = step(trainer)
        rows[compact] = list(projected)
    assert_same(steps[True], steps[False])
    # What each head projected: policy, then each reference forward of `step` (and the loss's own reference).
    labelled, everything = labelled_and_all(trainer)
    # tree rows: the prompt is most of the row; the cache's completion rows: padding and the leading prompt token
    assert labelled < (everything if layout == "cache" else everything / 2)
    assert rows[True] == [labelled] * len(rows[True]) and rows[False] == [everything] * len(rows[False])
    assert len(rows[True]) == len(rows[False]) >= 2


def test_compact_training_logs_equal_trls_head(tmp_path, tiny_model_dir, tiny_tokenizer):
    """Trainer.train (2 optimizer steps of 2 micro-batches) and evaluate log the same numbers either way."""
    dataset = synthetic_pairs(tiny_tokenizer)
    logs = {}
    for compact in (False, True):
        trainer = OffsetDPOTrainer(
            model=load_model(tiny_model_dir),
            args=make_config(
                tmp_path / str(compact),
                per_device_train_batch_size=2,
                per_device_eval_batch_size=2,
                gradient_accumulation_steps=2,
            ),
            train_dataset=dataset,
            eval_dataset=dataset,
            processing_class=tiny_tokenizer,
            compact_lm_head=compact,
        )
        trainer.train()
        logs[compact] = [*trainer.state.log_history[:2], trainer.evaluate()]
    assert all("rewards/margins" in "".join(full) for full in logs[False])
    assert_same_logs(logs[True], logs[False])


def test_compact_step_on_smol_equals_trls_head(tmp_path, smol_model_dir, smol_tokenizer, projected):
    """smol's tied 49,152 x 576 head (a short synthetic pair: the head's size, not the prompt's, is what is new)."""
    dataset = synthetic_pairs(smol_tokenizer, margins=(1.5,))
    steps, rows = {}, {}
    for compact in (False, True):
        trainer = OffsetDPOTrainer(
            model=load_model(smol_model_dir),
            args=make_config(tmp_path / str(compact), per_device_train_batch_size=1),
            train_dataset=dataset,
            processing_class=smol_tokenizer,
            compact_lm_head=compact,
        )
        with torch.no_grad():  # policy != reference; cheaper than `perturb` on 134M weights
            trainer.model.model.norm.weight.mul_(1.05)
        projected.clear()
        steps[compact] = step(trainer)
        rows[compact] = list(projected)
        positions = labelled_and_all(trainer)
        del trainer
    assert_same(steps[True], steps[False])
    labelled, everything = positions
    # the policy's forward, the loss's reference forward, `step`'s policy and reference log-probs
    assert rows[True] == [labelled] * 4 and rows[False] == [everything] * 4


def test_where_it_applies(tiny_model_dir):
    """Not where TRL compacts itself (its rule, read from its kernel module), nor on a transformed head."""
    from trl.kernels.chunked_logprob import _use_triton

    for device in ("cpu", "cuda", "xpu", "meta"):
        assert compact_head.trl_compacts(torch.device(device)) == _use_triton(torch.device(device)), device
    model = load_model(tiny_model_dir)
    assert compact_head.applies(model)
    model.config.final_logit_softcapping = 30.0
    assert not compact_head.applies(model)


def test_the_benchmark_runs_the_head_ab_alone():
    """`bench_dpo.py variants= head_ab_steps=N` (docs/bench.md): part 2c without the variants; off by default."""
    import sys

    from helpers import REPO_ROOT

    from timealign.config.cli import parse

    sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of scripts beside the package (test_benchmarks.py)
    from benchmarks.bench_dpo import COMMAND

    assert parse(COMMAND, []).options.head_ab_steps == 0
    options = parse(COMMAND, ["model=smol", "variants=", "head_ab_steps=6"]).options
    assert (options.variants, options.head_ab_steps) == ("", 6)
