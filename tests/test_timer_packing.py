"""TIMER SFT with packing (timer.packing): several rendered dialogs per row, the time-token mask kept token for token,
positions restarting per dialog, attention inside each dialog; the loss equals the unpacked loss and a hand
computation over separate forward passes (Eqs. 4-5), and with lambda = 1 TRL's own (packed and unpacked) SFT loss."""

import copy
import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch

from timealign.render.timer import TOKEN_RESPONSE as R
from timealign.render.timer import TOKEN_TIME as T

N_DIALOGS = 8
MAX_LENGTH = 256  # several synthetic dialogs (~60-120 tokens) per packed row


@pytest.fixture(scope="module")
def base(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from timealign.train.timer import add_timer_tokens_to_model

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    add_timer_tokens_to_model(model, tok)
    # The stock random tiny model is nearly uniform; redraw the weights so a token attending to another dialog
    # would change the loss far above float32 noise.
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():
            if p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model, tok


@pytest.fixture(scope="module")
def rows(base):
    """Real rendered TIMER rows of synthetic dialogs (with the tau = 0 counterparts), as train/sft.py makes them."""
    from datasets import Dataset

    from timealign.config import TimerSection
    from timealign.data.synthetic.dialogs import generate_timelychat
    from timealign.data.timelychat import timelychat_dialog
    from timealign.render.timer import TimerRenderer
    from timealign.train.sft import featurize

    _, tok = base
    timer = TimerSection(emit_instant_counterpart=True)
    dialogs = [timelychat_dialog(r, "synthetic", i) for i, r in enumerate(generate_timelychat(N_DIALOGS, seed=3))]
    ds = featurize(
        Dataset.from_list([d.to_row() for d in dialogs]), TimerRenderer.for_timer(tok, timer), timer, MAX_LENGTH
    )
    data = [{k: r[k] for k in ("input_ids", "labels", "token_types")} for r in ds]
    lengths = [len(r["input_ids"]) for r in data]
    assert len(data) == 2 * N_DIALOGS and max(lengths) <= MAX_LENGTH and sum(lengths) > 2 * MAX_LENGTH
    return data


def hand_sums(model, data):
    """Per-type NLL sums and counts from one separate forward pass per dialog (no packing, no padding)."""
    sums, counts = {T: 0.0, R: 0.0}, {T: 0, R: 0}
    with torch.no_grad():
        for row in data:
            ids = torch.tensor([row["input_ids"]])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
            nll = -logp.gather(1, ids[0, 1:, None])[:, 0]
            for j, (kind, label) in enumerate(zip(row["token_types"][1:], row["labels"][1:])):
                if kind in sums and label != -100:
                    sums[kind] += nll[j].item()
                    counts[kind] += 1
    return sums, counts


def config(tmp_path, batch, **extra):
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to=[],
        per_device_train_batch_size=batch,
        per_device_eval_batch_size=batch,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        dataloader_num_workers=0,
        seed=0,
        max_length=MAX_LENGTH,
        disable_tqdm=True,
        **extra,
    )


def timer_trainer(
    model, tok, data, tmp_path, *, packing, batch=64, lambda_time=1.0, norm="tokens", layout=None, **extra
):
    from datasets import Dataset

    from timealign.train.timer import TimerSFTTrainer

    return TimerSFTTrainer(
        model=model,
        args=config(tmp_path, batch, packing=packing, **extra),
        train_dataset=Dataset.from_list(data),
        processing_class=tok,
        lambda_time=lambda_time,
        loss_normalization=norm,
        packing_layout=layout,
    )


def whole_batch(trainer):
    """Every (packed) row of the train dataset collated into one batch, as the trainer's dataloader makes it."""
    ds = trainer.train_dataset
    return trainer._prepare_inputs(trainer.data_collator([ds[i] for i in range(len(ds))]))


@pytest.mark.parametrize("layout", ["rows", "flat"])
def test_packing_keeps_every_row_and_its_time_mask_token_for_token(base, rows, tmp_path, layout):
    model, tok = base
    trainer = timer_trainer(copy.deepcopy(model), tok, rows, tmp_path, packing=True, layout=layout)
    assert trainer.data_collator.layout == layout
    packed = trainer.train_dataset
    assert len(packed) < len(rows)  # several dialogs share a row
    assert set(packed.column_names) == {"input_ids", "labels", "token_types", "seq_lengths"}
    segments = Counter()
    for row in packed:
        assert len(row["input_ids"]) == len(row["labels"]) == len(row["token_types"]) == sum(row["seq_lengths"])
        assert sum(row["seq_lengths"]) <= MAX_LENGTH
        start = 0
        for n in row["seq_lengths"]:
            segments[tuple(tuple(row[k][start : start + n]) for k in ("input_ids", "labels", "token_types"))] += 1
            start += n
    original = Counter(tuple(tuple(r[k]) for k in ("input_ids", "labels", "token_types")) for r in rows)
    assert segments == original  # every dialog once, ids/labels/types aligned at the same offsets

    # The collated batch: no attention mask; token types laid out like the ids; positions restart per dialog.
    batch = whole_batch(trainer)
    assert "attention_mask" not in batch
    batch_rows = [list(packed)] if layout == "flat" else [[row] for row in packed]
    assert batch["input_ids"].shape[0] == len(batch_rows)
    for b, group in enumerate(batch_rows):
        flat = {k: [x for row in group for x in row[k]] for k in ("input_ids", "labels", "token_types")}
        n_real = len(flat["input_ids"])
        assert batch["input_ids"][b, :n_real].tolist() == flat["input_ids"]
        assert batch["token_types"][b].tolist() == flat["token_types"] + [0] * (batch["input_ids"].shape[1] - n_real)
        assert (batch["labels"][b, n_real:] == -100).all() and (batch["position_ids"][b, n_real:] == 0).all()
        starts, pos = set(), 0
        for row in group:
            for n in row["seq_lengths"]:
                starts.add(pos)
                assert batch["position_ids"][b, pos : pos + n].tolist() == list(range(n))
                pos += n
        # the only labels changed: each dialog's first (never a target: position j predicts token j + 1)
        changed = [i for i, (x, y) in enumerate(zip(batch["labels"][b].tolist(), flat["labels"])) if x != y]
        assert set(changed) <= starts
    assert (batch["token_types"] == T).sum() == sum(t == T for r in rows for t in r["token_types"])


@pytest.mark.parametrize(
    "attn,layout,lambda_time,norm",
    [
        ("sdpa", "rows", 2.5, "tokens"),
        ("eager", "rows", 0.5, "per_type"),
        ("sdpa", "flat", 0.5, "per_type"),
        ("eager", "flat", 2.5, "tokens"),
    ],
)
def test_packed_loss_equals_unpacked_and_the_hand_computation(base, rows, tmp_path, attn, layout, lambda_time, norm):
    model0, tok = base
    model0 = copy.deepcopy(model0)
    model0.config._attn_implementation = attn  # how attention is kept inside each dialog depends on it
    sums, n = hand_sums(model0, rows)
    if norm == "tokens":  # Eqs. 4-5 with one shared token normalizer
        want = (sums[R] + lambda_time * sums[T]) / (n[T] + n[R])
    else:
        want = sums[R] / n[R] + lambda_time * sums[T] / n[T]

    losses, grads = {}, {}
    for packing in (False, True):
        trainer = timer_trainer(
            copy.deepcopy(model0),
            tok,
            rows,
            tmp_path / str(packing),
            packing=packing,
            lambda_time=lambda_time,
            norm=norm,
            layout=layout if packing else None,
        )
        trainer.model.eval()
        with torch.no_grad():
            losses[packing] = trainer.compute_loss(trainer.model, whole_batch(trainer)).item()
        logs = {}
        trainer.log(logs)
        assert logs["eval_loss_time"] == pytest.approx(sums[T] / n[T], rel=1e-5)
        assert logs["eval_loss_response"] == pytest.approx(sums[R] / n[R], rel=1e-5)
        trainer.train()  # one optimizer step over every dialog (one batch holds them all)
        first = trainer.state.log_history[0]
        assert first["loss"] == pytest.approx(want, rel=1e-4)
        assert first["num_tokens"] == sum(len(r["input_ids"]) for r in rows)  # real tokens, not padding
        grads[packing] = first["grad_norm"]
    assert losses[False] == pytest.approx(want, rel=1e-5)
    assert losses[True] == pytest.approx(want, rel=1e-5)
    assert grads[True] == pytest.approx(grads[False], rel=1e-4)  # the same gradient, not only the same loss


def test_lambda_one_packed_equals_trl_sft_loss(base, rows, tmp_path):
    """lambda = 1, one shared normalizer: TRL's SFT loss on the same input_ids/labels, packed by TRL itself (bfd,
    padding-free) and unpacked."""
    from datasets import Dataset
    from trl import SFTTrainer

    model0, tok = base
    plain = Dataset.from_list([{k: r[k] for k in ("input_ids", "labels")} for r in rows])
    stock = {}
    for packing in (False, True):
        trainer = SFTTrainer(
            model=copy.deepcopy(model0),
            args=config(tmp_path / f"trl{packing}", 64, packing=packing),
            train_dataset=plain,
            processing_class=tok,
        )
        trainer.train()
        stock[packing] = trainer.state.log_history[0]["loss"]
    ours = timer_trainer(copy.deepcopy(model0), tok, rows, tmp_path / "timer", packing=True)
    ours.train()
    assert stock[True] == pytest.approx(stock[False], rel=1e-5)
    assert ours.state.log_history[0]["loss"] == pytest.approx(stock[True], rel=1e-5)


def test_refusals(base, rows, tmp_path):
    model, tok = base
    with pytest.raises(ValueError, match="wrapped"):
        timer_trainer(copy.deepcopy(model), tok, rows, tmp_path, packing=True, packing_strategy="wrapped")
    with pytest.raises(ValueError, match="padding_free only with packing"):
        timer_trainer(copy.deepcopy(model), tok, rows, tmp_path, packing=False, padding_free=True)
    with pytest.raises(ValueError, match="eval_packing=True only with packing=True"):
        timer_trainer(copy.deepcopy(model), tok, rows, tmp_path, packing=False, eval_packing=True)


def test_layout_follows_the_attention_implementation(base):
    from timealign.train.packing import packed_layout

    model, _ = base
    assert model.config._attn_implementation == "sdpa" and packed_layout(model) == "rows"
    flash = copy.deepcopy(model.config)
    flash._attn_implementation = "flash_attention_2"
    assert packed_layout(type("M", (), {"config": flash})()) == "flat"  # varlen kernels take one flattened row


def test_padding_stats():
    from timealign.train.packing import padding_stats

    out = padding_stats([3, 5, 2, 2, 4], batch_size=2)  # batches [3, 5] [2, 2] [4]
    assert (out["tokens"], out["slots"], out["batches"]) == (16, 10 + 4 + 4, 3)
    assert out["padding_share"] == pytest.approx(2 / 18)
    assert padding_stats([3, 5, 2], batch_size=2, padding_free=True)["padding_share"] == 0.0


@pytest.mark.slow
def test_sft_cli_with_timer_packing(tmp_path):
    """train/sft.py recipe=tiny-timer timer.packing=true: data prep -> packed TIMER SFT -> saved model and log."""
    from helpers import REPO_ROOT

    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", TIMEALIGN_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "train/sft.py"),
            "recipe=tiny-timer",
            "timer.packing=true",
            f"output_dir={out}",
            "timer.synthetic_dialogs=24",
            "timer.synthetic_eval_dialogs=4",
            "training.max_steps=3",
            "training.logging_steps=1",
            "training.per_device_train_batch_size=2",
            "training.max_length=256",
            "training.eval_strategy=steps",
            "training.eval_steps=3",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    log = json.loads((out / "train_log.json").read_text())
    steps = [e for e in log if "loss" in e]
    assert len(steps) == 3 and all(e["loss"] > 0 and e["loss_time"] > 0 for e in steps)
    # two packed rows of 256 per step: far more tokens per step than two unpacked dialogs (~60-120 tokens each)
    assert steps[-1]["num_tokens"] > 3 * 2 * 256 * 0.6
    assert any("eval_loss_time" in e for e in log)
    assert (out / "config.json").exists() or (out / "model.safetensors").exists()
