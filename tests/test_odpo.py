"""OffsetDPOTrainer (ODPO): loss = -log sigmoid(beta * (lr_w - lr_l) - delta), on the real TRL code path.

Expected numbers are computed here from the formula with `math`, never from the implementation.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from datasets import Dataset
from dpo_layouts import BETA
from dpo_layouts import make_config as layouts_config

from timealign.train.odpo import OffsetDPOTrainer

LOG2 = 0.693147  # -log sigmoid(0)
LOSS_AT_1_5 = 1.701413  # -log sigmoid(-1.5)


def odpo_loss(lr_w: float, lr_l: float, delta: float, beta: float = BETA) -> float:
    """-log sigmoid(x) = log(1 + exp(-x)), x = beta * (lr_w - lr_l) - delta."""
    x = beta * (lr_w - lr_l) - delta
    return math.log(1.0 + math.exp(-x))


def step0_loss(margins) -> float:
    """Policy == reference at step 0, so every log-ratio is 0 and the loss is the mean of -log sigmoid(-delta)."""
    return sum(odpo_loss(0.0, 0.0, d) for d in margins) / len(margins)


def load_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def make_dataset(tokenizer, margins, margin_column: str = "margin") -> Dataset:
    """Standard (non-conversational) preference rows as the data pipeline emits them, plus junk metadata."""
    rows = {"id": [], "scenario": [], "label": [], "prompt": [], "chosen": [], "rejected": [], margin_column: []}
    for i, m in enumerate(margins):
        messages = [{"role": "user", "content": f"Is the store open now? It is {10 + i} minutes later."}]
        rows["prompt"].append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        rows["chosen"].append('<tool_call>{"name": "search", "arguments": {}}</tool_call><|im_end|>')
        rows["rejected"].append(f"It is still open, {i} hours ago.")  # no EOS: TRL appends it
        rows["id"].append(f"row-{i}")
        rows["scenario"].append("store_hours")
        rows["label"].append("tool_call")
        rows[margin_column].append(float(m))
    return Dataset.from_dict(rows)


def make_config(tmp_path, **overrides):
    """The layout tests' config (tests/dpo_layouts.py) with room for the tiny pairs and all of them in one batch."""
    # the whole tiny dataset is one batch: step-0 loss is over all rows
    return layouts_config(tmp_path, **{"max_length": 96, "per_device_train_batch_size": 8, **overrides})


class ForwardKwargsRecorder:
    """Forward pre-hook recording the keyword names every model call receives."""

    def __init__(self):
        self.calls: list[set[str]] = []
        self.handles = []

    def attach(self, module):
        self.handles.append(module.register_forward_pre_hook(self._hook, with_kwargs=True))
        return self

    def _hook(self, _module, _args, kwargs):
        self.calls.append(set(kwargs))

    def assert_no_margin(self, *names):
        assert self.calls, "the hooked model was never called"
        for keys in self.calls:
            assert "input_ids" in keys
            for name in ("margin", *names):
                assert name not in keys, f"{name!r} reached the model's forward: {sorted(keys)}"


# --------------------------------------------------------------------------------------------------------------------
# 1. Loss math on TRL's loss path with hand-chosen log-ratios


def unit_trainer(tmp, model_dir, tokenizer, **kwargs) -> OffsetDPOTrainer:
    """A trainer over four tiny pairs whose batches carry the reference log-probs (set by hand in the tests)."""
    return OffsetDPOTrainer(
        model=load_model(model_dir),
        args=make_config(tmp, precompute_ref_log_probs=True),
        train_dataset=make_dataset(tokenizer, [0.0, 1.5, 0.5, 1.0]),
        processing_class=tokenizer,
        **kwargs,
    )


@pytest.fixture(scope="module")
def precompute_trainer(tiny_model_dir, tiny_tokenizer, tmp_path_factory):
    return unit_trainer(tmp_path_factory.mktemp("odpo-unit"), tiny_model_dir, tiny_tokenizer)


def completion_logp(model, prompt_ids, completion_ids) -> float:
    """Summed log-prob of the completion, computed independently of TRL (unpadded forward, plain log_softmax)."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    token_logps = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
    return token_logps[len(prompt_ids) - 1 :].sum().item()


def batch_with_logratios(trainer, policy, lr_w, lr_l, margins):
    """The trainer's pairs as one collated batch whose reference log-probs make policy - ref the chosen log-ratios
    (`policy` has the untrained trainer's weights), with the margins, and a junk column the collator must drop."""
    examples = []
    for row, w, l, d in zip(trainer.train_dataset, lr_w, lr_l, margins, strict=True):
        examples.append(
            {
                "prompt_ids": row["prompt_ids"],
                "chosen_ids": row["chosen_ids"],
                "rejected_ids": row["rejected_ids"],
                "ref_chosen_logps": completion_logp(policy, row["prompt_ids"], row["chosen_ids"]) - w,
                "ref_rejected_logps": completion_logp(policy, row["prompt_ids"], row["rejected_ids"]) - l,
                "margin": d,
                "scenario": "junk",
            }
        )
    return trainer.data_collator(examples)


@pytest.mark.parametrize(
    "lr_w, lr_l, deltas",
    [
        ([0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]),  # step 0, delta 0: log 2
        ([0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.5, 1.5, 1.5, 1.5]),  # step 0, delta 1.5
        ([0.5, -2.0, 3.0, 10.0], [-1.0, 1.0, 2.0, -4.0], [0.0, 0.0, 0.0, 0.0]),
        ([0.5, -2.0, 3.0, 10.0], [-1.0, 1.0, 2.0, -4.0], [1.5, 1.5, 1.5, 1.5]),
        ([0.5, -2.0, 3.0, 10.0], [-1.0, 1.0, 2.0, -4.0], [0.0, 1.5, 0.25, 1.0]),  # mixed batch
    ],
)
def test_loss_matches_formula(precompute_trainer, tiny_model_dir, lr_w, lr_l, deltas):
    trainer = precompute_trainer
    policy = load_model(tiny_model_dir).eval()  # same weights as the (untrained) trainer policy
    batch = batch_with_logratios(trainer, policy, lr_w, lr_l, deltas)
    assert torch.equal(batch["margin"], torch.tensor(deltas, dtype=torch.float32))

    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)

    expected = sum(map(odpo_loss, lr_w, lr_l, deltas)) / len(deltas)
    assert loss.item() == pytest.approx(expected, abs=2e-5)
    if all(v == 0 for v in lr_w + lr_l):
        assert loss.item() == pytest.approx(LOG2 if deltas[0] == 0 else LOSS_AT_1_5, abs=2e-5)

    # Logged rewards are the true (un-shifted) ones; the offset metrics are added.
    metrics = trainer._metrics["train"]
    margins = [BETA * (w - l) for w, l in zip(lr_w, lr_l)]
    n = len(deltas)
    assert metrics["rewards/chosen"][-1] == pytest.approx(sum(BETA * w for w in lr_w) / n, abs=2e-5)
    assert metrics["rewards/rejected"][-1] == pytest.approx(sum(BETA * l for l in lr_l) / n, abs=2e-5)
    assert metrics["rewards/margins"][-1] == pytest.approx(sum(margins) / n, abs=2e-5)
    if any(m != 0 for m in margins):  # ties (policy == ref) are float noise either way
        assert metrics["rewards/accuracies"][-1] == pytest.approx(sum(m > 0 for m in margins) / n)
    assert metrics["offset/mean"][-1] == pytest.approx(sum(deltas) / n)
    if all(abs(m - d) > 1e-3 for m, d in zip(margins, deltas)):  # margin == offset ties are float noise too
        above = sum(m > d for m, d in zip(margins, deltas)) / n
        assert metrics["rewards/margin_above_offset"][-1] == pytest.approx(above)


# --------------------------------------------------------------------------------------------------------------------
# 1b. Margin modes (dpo.margin_mode), by hand: m is the pair's margin column


def mode_loss(lr_w: float, lr_l: float, m: float, mode: str) -> float:
    if mode == "offset":
        return odpo_loss(lr_w, lr_l, m)
    if mode == "plain":
        return odpo_loss(lr_w, lr_l, 0.0)
    if mode == "log_offset":
        return odpo_loss(lr_w, lr_l, math.log(1.0 + m))
    assert mode == "weight"
    return m * odpo_loss(lr_w, lr_l, 0.0)


@pytest.fixture(scope="module")
def unshared_trainer(tiny_model_dir, tiny_tokenizer, tmp_path_factory):
    return unit_trainer(tmp_path_factory.mktemp("odpo-unit-trl"), tiny_model_dir, tiny_tokenizer, shared_prompt=False)


# weight mode in TRL's layout is refused (test_weight_mode_needs_the_shared_layout)
@pytest.mark.parametrize(
    "layout, mode",
    [("shared", m) for m in ("offset", "plain", "log_offset", "weight")]
    + [("trl", m) for m in ("offset", "plain", "log_offset")],
)
def test_margin_modes_match_hand_computation(layout, mode, precompute_trainer, unshared_trainer, tiny_model_dir):
    trainer = precompute_trainer if layout == "shared" else unshared_trainer
    lr_w, lr_l, margins = [0.5, -2.0, 3.0, 10.0], [-1.0, 1.0, 2.0, -4.0], [0.0, 1.5, 0.25, 1.0]
    batch = batch_with_logratios(trainer, load_model(tiny_model_dir).eval(), lr_w, lr_l, margins)
    trainer.model.train()
    trainer.margin_mode = mode
    try:
        loss = trainer.compute_loss(trainer.model, batch)
    finally:
        trainer.margin_mode = "offset"
    expected = sum(mode_loss(w, l, m, mode) for w, l, m in zip(lr_w, lr_l, margins)) / len(margins)
    assert loss.item() == pytest.approx(expected, abs=2e-5)
    metrics = trainer._metrics["train"]
    offsets = {
        "offset": margins,
        "plain": [0.0] * 4,
        "weight": [0.0] * 4,
        "log_offset": [math.log1p(m) for m in margins],
    }[mode]
    assert metrics["offset/mean"][-1] == pytest.approx(sum(offsets) / 4, abs=1e-6)
    assert metrics["rewards/margins"][-1] == pytest.approx(
        sum(BETA * (w - l) for w, l in zip(lr_w, lr_l)) / 4, abs=2e-5
    )
    if mode == "weight":
        assert metrics["weight/mean"][-1] == pytest.approx(sum(margins) / 4)


@pytest.mark.parametrize("layout", ["trl", "shared", "cache"])
def test_sft_term_matches_hand_computation(layout, tmp_path, tiny_model_dir, tiny_tokenizer):
    """loss_type ["sigmoid", "sft"] with loss_weights [w1, w2]: w1 x the offset loss + w2 x the mean negative log-prob
    of the micro-batch's chosen tokens (TRL's "sft"), in TRL's layout (TRL computes it), the tree and the prompt cache
    (timealign computes it); the chosen tokens' log-probs from plain unpadded forwards."""
    trainer = OffsetDPOTrainer(
        model=load_model(tiny_model_dir),
        args=make_config(tmp_path, precompute_ref_log_probs=True, loss_type=["sigmoid", "sft"],
                         loss_weights=[0.75, 0.5]),
        train_dataset=make_dataset(tiny_tokenizer, [0.0, 1.5, 0.5, 1.0]),
        processing_class=tiny_tokenizer,
        shared_prompt=layout != "trl",
        prompt_cache=layout == "cache",
    )  # fmt: skip
    policy = load_model(tiny_model_dir).eval()
    lr_w, lr_l, margins = [0.5, -2.0, 3.0, 10.0], [-1.0, 1.0, 2.0, -4.0], [0.0, 1.5, 0.25, 1.0]
    batch = batch_with_logratios(trainer, policy, lr_w, lr_l, margins)
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    rows = list(trainer.train_dataset)
    chosen_logps = sum(completion_logp(policy, r["prompt_ids"], r["chosen_ids"]) for r in rows)
    chosen_tokens = sum(len(r["chosen_ids"]) for r in rows)
    offset_loss = sum(map(odpo_loss, lr_w, lr_l, margins)) / len(margins)
    assert loss.item() == pytest.approx(0.75 * offset_loss + 0.5 * -chosen_logps / chosen_tokens, abs=2e-5)
    metrics = trainer._metrics["train"]  # the rewards are the offset loss's, the SFT term leaves them alone
    assert metrics["rewards/margins"][-1] == pytest.approx(
        sum(BETA * (w - l) for w, l in zip(lr_w, lr_l)) / 4, abs=2e-5
    )


def test_weight_mode_needs_the_shared_layout(tmp_path, tiny_model_dir, tiny_tokenizer):
    with pytest.raises(ValueError, match="dpo.shared_prompt=true"):
        OffsetDPOTrainer(
            model=load_model(tiny_model_dir),
            args=make_config(tmp_path),
            train_dataset=make_dataset(tiny_tokenizer, [1.0]),
            processing_class=tiny_tokenizer,
            shared_prompt=False,
            margin_mode="weight",
        )
    with pytest.raises(ValueError, match="unknown margin_mode 'bogus'"):
        OffsetDPOTrainer(
            model=load_model(tiny_model_dir),
            args=make_config(tmp_path),
            train_dataset=make_dataset(tiny_tokenizer, [1.0]),
            processing_class=tiny_tokenizer,
            margin_mode="bogus",
        )


# --------------------------------------------------------------------------------------------------------------------
# 2. Integration: full fine-tuning, ref=None (reloaded by TRL) and an explicit ref model


@pytest.mark.parametrize("explicit_ref", [False, True])
def test_train_full_finetune_margin_0_vs_1_5(tmp_path, tiny_model_dir, tiny_tokenizer, explicit_ref):
    first = {}
    for margin in (0.0, 1.5):
        model = load_model(tiny_model_dir)
        ref_model = load_model(tiny_model_dir) if explicit_ref else None
        recorder = ForwardKwargsRecorder().attach(model)
        if ref_model is not None:
            recorder.attach(ref_model)
        trainer = OffsetDPOTrainer(
            model=model,
            ref_model=ref_model,
            args=make_config(tmp_path / f"m{margin}"),
            train_dataset=make_dataset(tiny_tokenizer, [margin] * 8),
            processing_class=tiny_tokenizer,
        )
        if ref_model is None:  # TRL loaded it from model.config._name_or_path
            assert trainer.ref_model is not None
            recorder.attach(trainer.ref_model)
        trainer.train()
        recorder.assert_no_margin("id", "scenario", "label")

        logs = [entry for entry in trainer.state.log_history if "loss" in entry]
        assert len(logs) == 2
        step0 = logs[0]
        assert step0["loss"] == pytest.approx(step0_loss([margin] * 8), abs=1e-5)
        assert step0["offset/mean"] == pytest.approx(margin)
        # True rewards: policy == ref at step 0, so 0 (the shifted reference would have given -1.5 here).
        assert step0["rewards/margins"] == pytest.approx(0.0, abs=1e-5)
        assert step0["rewards/chosen"] == pytest.approx(0.0, abs=1e-5)
        if margin > 0:  # with delta 0 a zero margin vs zero offset is a float-noise tie
            assert step0["rewards/margin_above_offset"] == 0.0
        assert logs[1]["loss"] != step0["loss"]  # it trained
        first[margin] = step0["loss"]

    assert first[0.0] == pytest.approx(LOG2, abs=1e-5)
    assert first[1.5] == pytest.approx(LOSS_AT_1_5, abs=1e-5)
    assert first[1.5] - first[0.0] == pytest.approx(math.log(1 + math.exp(1.5)) - math.log(2), abs=1e-5)


def test_train_mixed_margins_wandb_and_save(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    margins = [0.0, 0.1, 0.5, 1.5, 1.0, 0.0, 1.5, 0.3]
    model = load_model(tiny_model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = OffsetDPOTrainer(
        model=model,
        args=make_config(tmp_path, report_to=["wandb"], run_name="odpo-test"),
        train_dataset=make_dataset(tiny_tokenizer, margins),
        processing_class=tiny_tokenizer,
    )
    try:
        trainer.train()
    finally:
        wandb.finish()  # flushes the offline run (the Trainer leaves it open)

    step0 = trainer.state.log_history[0]
    assert step0["loss"] == pytest.approx(step0_loss(margins), abs=1e-5)
    assert step0["offset/mean"] == pytest.approx(sum(margins) / len(margins), abs=1e-6)
    assert step0["rewards/margins"] == pytest.approx(0.0, abs=1e-5)
    for key in ("rewards/accuracies", "logps/chosen", "entropy", "grad_norm", "learning_rate"):
        assert key in step0  # the rest of TRL's logging still works

    # W&B (offline) received the custom metrics through report_to. wandb >= 0.2x writes no summary file offline and
    # has no Python reader for the run log, but history keys are stored as plain protobuf strings in it.
    # The wandb-core service writes the file asynchronously; on a loaded machine it can lag `finish()` a little.
    run_logs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_logs) == 1
    keys = ("train/loss", "train/offset/mean", "train/rewards/margin_above_offset", "train/rewards/margins")
    deadline = time.monotonic() + 60
    while True:
        raw = run_logs[0].read_bytes()
        if all(key.encode() in raw for key in keys) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for key in keys:
        assert key.encode() in raw, key

    out = tmp_path / "saved"
    trainer.save_model(str(out))
    reloaded = load_model(out)
    state = reloaded.state_dict()
    trained = trainer.model.state_dict()
    assert all(torch.equal(state[k], trained[k].cpu()) for k in state)
    assert any(not torch.equal(state[k], before[k]) for k in state)


# --------------------------------------------------------------------------------------------------------------------
# 3. precompute_ref_log_probs and LoRA paths


def test_precompute_ref_log_probs(tmp_path, tiny_model_dir, tiny_tokenizer):
    margins = [1.5, 0.0, 0.7, 1.2]
    model = load_model(tiny_model_dir)
    recorder = ForwardKwargsRecorder().attach(model)
    eval_margins = [0.0, 1.5, 1.5, 0.2]
    trainer = OffsetDPOTrainer(
        model=model,
        # remove_unused_columns=False: the junk columns reach the collator and must be dropped there
        args=make_config(tmp_path, precompute_ref_log_probs=True, remove_unused_columns=False),
        train_dataset=make_dataset(tiny_tokenizer, margins, margin_column="delta"),
        eval_dataset=make_dataset(tiny_tokenizer, eval_margins, margin_column="delta"),
        processing_class=tiny_tokenizer,
        margin_column="delta",
    )
    assert trainer.ref_model is None
    for dataset in (trainer.train_dataset, trainer.eval_dataset):
        assert {"ref_chosen_logps", "ref_rejected_logps", "delta"} <= set(dataset.column_names)
    assert recorder.calls  # the precompute ran the policy as reference

    metrics = trainer.evaluate()  # eval path (prediction_step) before any update: policy == reference
    assert metrics["eval_loss"] == pytest.approx(step0_loss(eval_margins), abs=1e-5)
    assert metrics["eval_offset/mean"] == pytest.approx(sum(eval_margins) / len(eval_margins), abs=1e-6)
    assert metrics["eval_rewards/margins"] == pytest.approx(0.0, abs=1e-5)

    trainer.train()
    recorder.assert_no_margin("delta", "id", "scenario", "label", "ref_chosen_logps", "prompt")

    step0 = trainer.state.log_history[0]
    assert step0["loss"] == pytest.approx(step0_loss(margins), abs=1e-5)
    assert step0["offset/mean"] == pytest.approx(sum(margins) / len(margins), abs=1e-6)
    assert step0["rewards/margins"] == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("precompute", [False, True])
def test_lora(tmp_path, tiny_model_dir, tiny_tokenizer, precompute):
    from peft import LoraConfig

    margins = [1.5] * 4 + [0.0] * 4
    model = load_model(tiny_model_dir)
    recorder = ForwardKwargsRecorder().attach(model)
    trainer = OffsetDPOTrainer(
        model=model,
        args=make_config(tmp_path, precompute_ref_log_probs=precompute),
        train_dataset=make_dataset(tiny_tokenizer, margins),
        processing_class=tiny_tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    assert trainer.ref_model is None  # reference = base with adapters disabled
    trainer.train()
    recorder.assert_no_margin("id", "scenario", "label")

    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logs[0]["loss"] == pytest.approx(step0_loss(margins), abs=1e-5)
    assert logs[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-5)
    assert logs[1]["rewards/margins"] > 0.0  # the adapter learned, the reference (base) did not move


# --------------------------------------------------------------------------------------------------------------------
# Refusals


def test_missing_or_negative_margin_is_an_error(tmp_path, tiny_model_dir, tiny_tokenizer):
    model = load_model(tiny_model_dir)
    no_margin = make_dataset(tiny_tokenizer, [0.5] * 4).remove_columns("margin")
    with pytest.raises(ValueError, match="'margin'"):
        OffsetDPOTrainer(
            model=model, args=make_config(tmp_path), train_dataset=no_margin, processing_class=tiny_tokenizer
        )
    with pytest.raises(ValueError, match="'offset'"):
        OffsetDPOTrainer(
            model=model,
            args=make_config(tmp_path),
            train_dataset=make_dataset(tiny_tokenizer, [0.5] * 4),
            processing_class=tiny_tokenizer,
            margin_column="offset",
        )
    with pytest.raises(ValueError, match=">= 0"):
        OffsetDPOTrainer(
            model=model,
            args=make_config(tmp_path),
            train_dataset=make_dataset(tiny_tokenizer, [0.5, -0.1, 0.0, 1.5]),
            processing_class=tiny_tokenizer,
        )


@pytest.mark.parametrize(
    "overrides",
    [
        {"loss_type": ["hinge"]},
        {"loss_type": ["sft"]},
        {"loss_type": ["sigmoid", "hinge"]},
        {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, -0.5]},
        {"label_smoothing": 0.1},
        {"f_divergence_type": "js_divergence"},
        {"ld_alpha": 0.5},
        {"use_weighting": True},
    ],
)
def test_unsupported_loss_settings_are_errors(tmp_path, tiny_model_dir, tiny_tokenizer, overrides):
    with pytest.raises(ValueError, match="OffsetDPOTrainer"):
        OffsetDPOTrainer(
            model=load_model(tiny_model_dir),
            args=make_config(tmp_path, **overrides),
            train_dataset=make_dataset(tiny_tokenizer, [0.5] * 4),
            processing_class=tiny_tokenizer,
        )
