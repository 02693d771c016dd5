"""TimerSFTTrainer: each loss covers exactly its tokens (checked against a hand computation of the masked CE from the
model's logits), lambda and normalization, gradient accumulation, new-token rows trained under LoRA, refusals, and the
two-step inference helper."""

import copy

import pytest
import torch

from timealign.render.timer import TOKEN_OTHER as O
from timealign.render.timer import TOKEN_RESPONSE as R
from timealign.render.timer import TOKEN_TIME as T
from timealign.render.timer import TimerRenderer, TimerTurn

# Hand-built rows: token ids and the kind of each token (0 other, 1 time, 2 response), as a renderer would mark
# `<SPK> A <TIME> 20 minutes <UTT> I am back <eos>`; filled in with real TIMER token ids below.
TYPES = [
    [O, O, O, T, T, T, R, R, R, R, O, T, R],
    [O, O, T, T, R, R, R],
    [O, T, R, R, O, O, T, T, T, R],
]


@pytest.fixture(scope="module")
def base(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from timealign.train.timer import add_timer_tokens_to_model

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids = add_timer_tokens_to_model(model, tok)
    return model, tok, ids


def rows(ids):
    g = torch.Generator().manual_seed(0)
    out = []
    for types in TYPES:
        input_ids = torch.randint(5, 1600, (len(types),), generator=g).tolist()
        for j, t in enumerate(types):  # put the new tokens where the format has them, so their rows get gradient
            if t == T and (j + 1 == len(types) or types[j + 1] != T):
                input_ids[j] = ids[2]  # <UTT> closes a time span
            if t == O and j > 0 and types[j - 1] == R:
                input_ids[j] = ids[0]  # <SPK> opens the next turn
            if t == O and j + 1 < len(types) and types[j + 1] == T:
                input_ids[j] = ids[1]  # <TIME> opens the interval
        out.append(
            {
                "input_ids": input_ids,
                "labels": [i if t else -100 for i, t in zip(input_ids, types)],
                "token_types": types,
            }
        )
    return out


def hand_ce(model, data):
    """Per-type sums and counts of -log p(token) from full logits: positions j predict token j+1."""
    sums, counts = {T: 0.0, R: 0.0}, {T: 0, R: 0}
    with torch.no_grad():
        for row in data:
            ids = torch.tensor([row["input_ids"]])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
            nll = -logp.gather(1, ids[0, 1:, None])[:, 0]
            for j, kind in enumerate(row["token_types"][1:]):
                if kind in sums:
                    sums[kind] += nll[j].item()
                    counts[kind] += 1
    return sums, counts


def make_trainer(
    model,
    tok,
    data,
    tmp_path,
    *,
    batch=3,
    accum=1,
    lambda_time=1.0,
    norm="tokens",
    peft=None,
    trainer_cls=None,
    lr=1e-3,
    max_length=None,
    **extra,
):
    from datasets import Dataset
    from trl import SFTConfig

    from timealign.train.timer import TimerSFTTrainer

    args = SFTConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to=[],
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        learning_rate=lr,
        lr_scheduler_type="constant",
        dataloader_num_workers=0,
        seed=0,
        max_length=max_length,
        disable_tqdm=True,
        **extra,
    )
    if trainer_cls is not None:
        return trainer_cls(
            model=model, args=args, train_dataset=Dataset.from_list(data), processing_class=tok, peft_config=peft
        )
    return TimerSFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(data),
        processing_class=tok,
        lambda_time=lambda_time,
        loss_normalization=norm,
        peft_config=peft,
    )


@pytest.mark.parametrize("lambda_time,norm", [(2.5, "tokens"), (0.0, "tokens"), (0.5, "per_type")])
def test_each_loss_covers_exactly_its_tokens(base, tmp_path, lambda_time, norm):
    model0, tok, ids = base
    data = rows(ids)
    model = copy.deepcopy(model0)
    sums, n = hand_ce(model, data)
    want_time, want_resp = sums[T] / n[T], sums[R] / n[R]
    if norm == "tokens":
        want_loss = (sums[R] + lambda_time * sums[T]) / (n[T] + n[R])
    else:
        want_loss = want_resp + lambda_time * want_time

    trainer = make_trainer(model, tok, data, tmp_path, lambda_time=lambda_time, norm=norm)
    # eval mode, one collated batch: the per-micro-batch path
    trainer.model.eval()
    batch = trainer._prepare_inputs(trainer.data_collator(data))
    assert batch["token_types"].tolist() == [t + [0] * (13 - len(t)) for t in TYPES]  # right-padded with "other"
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch)
    assert loss.item() == pytest.approx(want_loss, rel=1e-5)
    logs = {}
    trainer.log(logs)
    assert logs["eval_loss_time"] == pytest.approx(want_time, rel=1e-5)
    assert logs["eval_loss_response"] == pytest.approx(want_resp, rel=1e-5)
    assert logs["eval_time_tokens_frac"] == pytest.approx(n[T] / (n[T] + n[R]))

    # one real training step: the logged values are those of the weights before the update
    trainer.train()
    first = trainer.state.log_history[0]
    assert first["loss"] == pytest.approx(want_loss, rel=1e-4)
    assert first["loss_time"] == pytest.approx(want_time, rel=1e-5)
    assert first["loss_response"] == pytest.approx(want_resp, rel=1e-5)


def test_lambda_one_is_trl_sft_loss_and_accumulation_does_not_matter(base, tmp_path):
    """With lambda = 1 and one shared normalizer the loss is TRL's SFT loss on the same labels; splitting the step
    into micro-batches (GA) leaves it unchanged because counts are taken over the whole optimizer step."""
    from trl import SFTTrainer

    model0, tok, ids = base
    data = rows(ids)
    stock = make_trainer(
        copy.deepcopy(model0),
        tok,
        [{k: r[k] for k in ("input_ids", "labels")} for r in data],
        tmp_path / "stock",
        trainer_cls=SFTTrainer,
    )
    stock.train()
    full = make_trainer(copy.deepcopy(model0), tok, data, tmp_path / "full")
    full.train()
    accum = make_trainer(copy.deepcopy(model0), tok, data, tmp_path / "ga", batch=1, accum=3)
    accum.train()
    stock_loss = stock.state.log_history[0]["loss"]
    assert full.state.log_history[0]["loss"] == pytest.approx(stock_loss, rel=1e-5)
    assert accum.state.log_history[0]["loss"] == pytest.approx(stock_loss, rel=1e-5)
    for key in ("loss_time", "loss_response"):
        assert accum.state.log_history[0][key] == pytest.approx(full.state.log_history[0][key], rel=1e-5)
    # and the gradient too (its norm, taken after accumulation, before the optimizer step)
    assert accum.state.log_history[0]["grad_norm"] == pytest.approx(full.state.log_history[0]["grad_norm"], rel=1e-4)
    assert full.state.log_history[0]["grad_norm"] == pytest.approx(stock.state.log_history[0]["grad_norm"], rel=1e-4)


def _untied(model):
    model = copy.deepcopy(model)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    return model


@pytest.mark.parametrize(
    "mode,tied", [("trainable_tokens", True), ("trainable_tokens", False), ("modules_to_save", True)]
)
def test_lora_trains_the_new_token_rows(base, tmp_path, mode, tied):
    from timealign.config import LoraSection
    from timealign.train.timer import timer_lora_config

    model0, tok, ids = base
    model = copy.deepcopy(model0) if tied else _untied(model0)
    before_in = model.get_input_embeddings().weight.detach().clone()
    before_out = model.get_output_embeddings().weight.detach().clone()
    peft = timer_lora_config(LoraSection(r=4, alpha=8, dropout=0.0), model, ids, mode)
    if mode == "trainable_tokens":
        assert peft.trainable_token_indices["embed_tokens"] == ids
        assert ("lm_head" in peft.trainable_token_indices) is (not tied)
    else:
        assert set(peft.modules_to_save) == {"embed_tokens", "lm_head"}
    trainer = make_trainer(model, tok, rows(ids), tmp_path, peft=peft, lr=5e-2)
    trainer.train()
    after_in = trainer.model.get_input_embeddings().weight.detach()
    after_out = trainer.model.get_output_embeddings().weight.detach()
    new = torch.tensor(ids)
    old = torch.arange(len(tok) - 3)
    assert (after_in[new] - before_in[new]).abs().amax(dim=1).gt(0).all(), "new input rows did not change"
    assert (after_out[new] - before_out[new]).abs().amax(dim=1).gt(0).all(), "new output rows did not change"
    if mode == "trainable_tokens":  # only the new rows move
        assert torch.equal(after_in[old], before_in[old]) and torch.equal(after_out[old], before_out[old])


def test_new_token_rows_start_at_the_mean(base):
    model, tok, ids = base
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == len(tok) and ids == list(range(len(tok) - 3, len(tok)))
    assert torch.allclose(emb[ids[0]], emb[: ids[0]].mean(0), atol=1e-6)


def test_refusals(base, tmp_path):
    from datasets import Dataset
    from trl import SFTConfig

    from timealign.train.timer import TimerSFTTrainer

    model, tok, ids = base
    data = rows(ids)
    with pytest.raises(ValueError, match="wrapped"):  # packing is supported (tests/test_timer_packing.py), not wrapped
        make_trainer(
            copy.deepcopy(model), tok, data, tmp_path, packing=True, packing_strategy="wrapped", max_length=64
        )
    with pytest.raises(ValueError, match="lacks \\['token_types'\\]"):
        make_trainer(
            copy.deepcopy(model), tok, [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in data], tmp_path
        )
    with pytest.raises(ValueError, match="lambda_time"):
        TimerSFTTrainer(
            model=copy.deepcopy(model),
            args=SFTConfig(output_dir=str(tmp_path), use_cpu=True),
            train_dataset=Dataset.from_list(data),
            processing_class=tok,
            lambda_time=-1,
        )


def test_truncation_in_prepare_keeps_masks_aligned(base, tmp_path):
    model, tok, ids = base
    trainer = make_trainer(copy.deepcopy(model), tok, rows(ids), tmp_path, max_length=8)
    for row in trainer.train_dataset:
        assert len(row["input_ids"]) == len(row["labels"]) == len(row["token_types"]) <= 8


def test_two_step_inference_with_a_fake_backend(base):
    from timealign.suites.timelychat.infer import TimerInference

    _, tok, _ = base
    renderer = TimerRenderer(tok)
    context = [TimerTurn("A", "Off to the gym."), TimerTurn("B", "Have fun!")]
    calls = []

    def backend(prompts, max_new_tokens):
        calls.append(list(prompts))
        if len(calls) == 1:  # step 1: intervals
            return ["1 hour 30 minutes<UTT>ignored", "a while<UTT>", "0 minutes<|im_end|>"]
        return [f"reply {i}<SPK>B<TIME>0 minutes" for i in range(len(prompts))]  # step 2: the replies

    infer = TimerInference(backend, renderer)
    preds = infer.run([context] * 3, ["A"] * 3)
    assert calls[0] == [renderer.interval_prompt(context, "A")] * 3
    assert calls[1] == [renderer.response_prompt(context, "A", m) for m in (90, 0, 0)]
    assert [(p.minutes, p.interval_parsed, p.conditioned_on) for p in preds] == [
        (90.0, True, 90.0),
        (None, False, 0.0),
        (0.0, True, 0.0),
    ]
    assert preds[0].interval_text == "1 hour 30 minutes" and preds[1].interval_text == "a while"
    assert [p.response for p in preds] == ["reply 0", "reply 1", "reply 2"]  # cut at the next turn's <SPK>
    assert infer.respond([context], ["A"], [20]) and len(calls) == 3
    assert calls[2] == [renderer.response_prompt(context, "A", 20)]


def test_recipes_carry_the_paper_settings(tmp_path):
    from trl import SFTConfig

    from timealign.config import RecipeError, describe_fields, load_recipe

    paper = load_recipe("timer3b", task="sft")
    assert paper.task == "sft" and paper.model.name_or_path == "meta-llama/Llama-3.2-3B-Instruct"
    t = paper.training
    assert (t["num_train_epochs"], t["learning_rate"], t["bf16"]) == (3, 1e-4, True) and t["optim"].startswith("adamw")
    assert paper.timer.lambda_time == 1.0 and paper.timer.special_tokens and paper.timer.order == "time_first"
    assert paper.lora.enabled is False  # full fine-tuning, as the paper
    SFTConfig(output_dir=str(tmp_path), **dict(t, use_cpu=True, bf16=False))  # every key is a real SFTConfig field
    tiny = load_recipe(
        "tiny-timer",
        {"timer.lambda_time": "0", "timer.special_tokens": "false", "timer.order": "utterance_first"},
        task="sft",
    )
    assert tiny.model.name_or_path == "tiny" and tiny.data.source == "synthetic"
    assert tiny.training["use_cpu"] is True and tiny.training["bf16"] is False
    assert (tiny.timer.lambda_time, tiny.timer.special_tokens, tiny.timer.order) == (0.0, False, "utterance_first")
    assert "timer.lambda_time=1.0" in describe_fields()
    with pytest.raises(RecipeError, match="is a 'sft' recipe"):
        load_recipe("tiny-timer", task="dpo")
    with pytest.raises(RecipeError, match="training.beta"):  # DPO-only field, checked against SFTConfig
        load_recipe("tiny-timer", {"training.beta": "0.1"}, task="sft")
