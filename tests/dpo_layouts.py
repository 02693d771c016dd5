"""Builders and comparisons shared by the DPO layout-equality tests (tests/test_shared_prompt.py: the tree,
tests/test_prompt_cache.py: the key/value cache): tiny-model trainers on synthetic pairs, one training step with its
reference log-probs, and the float32 comparison of two steps (loss, every gradient, every metric)."""

from __future__ import annotations

import pytest
import torch
from accelerate.utils import is_peft_model
from datasets import Dataset

BETA = 0.1
TOL = dict(rtol=1e-5, atol=1e-5)


def load_model(path, attn="sdpa"):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn)


def make_config(tmp_path, **overrides):
    from trl import DPOConfig

    kwargs = dict(
        output_dir=str(tmp_path / "out"),
        bf16=False,
        gradient_checkpointing=False,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        max_length=None,
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=1e-3,
        beta=BETA,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    kwargs.update(overrides)
    return DPOConfig(**kwargs)


def synthetic_pairs(tokenizer, margins=(0.0, 0.5, 1.5, 0.25)) -> Dataset:
    """Pairs of different prompt lengths; chosen longer than rejected in some, shorter in others (so both rows and
    trees get padding)."""
    rows = {"prompt": [], "chosen": [], "rejected": [], "margin": [], "scenario": []}
    for i, margin in enumerate(margins):
        messages = [
            {"role": "user", "content": "Is the store open now? " * (1 + 2 * i)},
            {"role": "assistant", "content": "Let me check the latest data for you."},
            {"role": "user", "content": f"It is {10 + i} minutes later."},
        ]
        rows["prompt"].append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        rows["chosen"].append('<tool_call>{"name": "search", "arguments": {}}</tool_call>' + " again" * (3 * i))
        rows["rejected"].append("It is still open. " * (4 - i))
        rows["margin"].append(float(margin))
        rows["scenario"].append("junk")
    return Dataset.from_dict(rows)


def perturb(model, seed=0, scale=0.02):
    """The same deterministic change of the trainable weights in both trainers (policy != reference)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.requires_grad:
                param.add_(scale * torch.randn(param.shape, generator=generator))


def step(trainer) -> dict:
    """One training forward + backward on the whole dataset as one micro-batch."""
    examples = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    batch = trainer._prepare_inputs(trainer.data_collator(examples))
    trainer.model.train()
    trainer.model.zero_grad()
    with trainer.compute_loss_context_manager():
        loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    out = {
        "loss": loss.detach(),
        "metrics": {k: v[-1] for k, v in trainer._metrics["train"].items()},
        "grads": {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad},
    }
    # Per-pair log-probs ([chosen; rejected] x pairs) through each layout's reference path: of the policy (PEFT: its
    # base, adapters disabled) and of the reference model if there is one.
    key = "base_logps" if is_peft_model(trainer.model) else "policy_logps"
    out[key] = torch.stack(trainer.compute_ref_log_probs(trainer.model, batch))
    if trainer.ref_model is not None:
        out["ref_logps"] = torch.stack(trainer.compute_ref_log_probs(trainer.ref_model, batch))
    return out


def assert_same(ours: dict, theirs: dict):
    """Two `step` results agree: loss, reference log-probs, every (nonzero) gradient, every metric."""
    torch.testing.assert_close(ours["loss"], theirs["loss"], **TOL)
    for key in ("ref_logps", "policy_logps", "base_logps"):
        if key in theirs:
            torch.testing.assert_close(ours[key], theirs[key], **TOL)
    assert ours["grads"].keys() == theirs["grads"].keys() and theirs["grads"]
    for name, grad in theirs["grads"].items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(ours["grads"][name], grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")
    assert set(ours["metrics"]) == set(theirs["metrics"])
    for key, value in theirs["metrics"].items():
        assert ours["metrics"][key] == pytest.approx(value, rel=1e-5, abs=metric_tolerance(key, theirs["metrics"])), (
            key
        )


def assert_same_logs(ours: list[dict], theirs: list[dict]):
    """Trainer logs (train steps, then evaluate) equal key by key to 1e-5, timings and the epoch aside."""
    for mine, reference in zip(ours, theirs, strict=True):
        assert set(mine) == set(reference)
        for key, value in reference.items():
            if "runtime" not in key and "per_second" not in key and key != "epoch":
                assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-5), key


def metric_tolerance(key: str, metrics: dict) -> float:
    """1e-5; for a reward (beta times a difference of two summed log-probs) also the fp32 rounding of those sums,
    which either layout rounds in its own order: 64 float32 epsilons (7.6e-6) of their size."""
    if key in ("rewards/chosen", "rewards/rejected", "rewards/margins"):
        size = max(abs(metrics["logps/chosen"]), abs(metrics["logps/rejected"]))
        return 1e-5 + BETA * 64 * torch.finfo(torch.float32).eps * size
    return 1e-5


def plain_logps(model, example) -> tuple[float, float]:
    """Summed completion log-probs from one unpadded causal forward per completion (no TRL, no tree, no cache)."""

    def logp(completion):
        ids = torch.tensor([example["prompt_ids"] + completion])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        token_logps = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
        return token_logps[len(example["prompt_ids"]) - 1 :].sum().item()

    return logp(example["chosen_ids"]), logp(example["rejected_ids"])
