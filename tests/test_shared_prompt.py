"""Shared-prompt offset-DPO (`timealign.train.shared_prompt`): one [prompt | chosen | rejected] tree per pair gives
the numbers of TRL's own unshared rows [prompt+chosen; prompt+rejected].

Every comparison runs the real TRL path (`OffsetDPOTrainer(shared_prompt=False)`, which is TRL's `_compute_loss`,
or stock `trl.DPOTrainer`) and the shared path on the same weights and pairs, in float32: per-pair log-probs, loss,
every parameter gradient and every logged metric agree within 1e-5 (relative, or absolute near 0). Per-pair log-probs
are also checked against a plain unpadded forward of the model (log_softmax of its logits), independent of both.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
import yaml
from dpo_layouts import (
    TOL,
    assert_same,
    assert_same_logs,
    load_model,
    make_config,
    metric_tolerance,
    perturb,
    plain_logps,
    step,
    synthetic_pairs,
)
from helpers import REPO_ROOT, cluster_launch, run_checked

from timealign.config import RecipeError, load_recipe
from timealign.train import shared_prompt
from timealign.train.odpo import OffsetDPOTrainer


def build(tmp_path, model_dir, tokenizer, dataset, shared, source="reload", gc=False, attn="sdpa", **kwargs):
    """An OffsetDPOTrainer whose reference is `source`: reload (TRL loads it from the path), ref_model, precompute,
    lora, lora_precompute."""
    from peft import LoraConfig

    name = f"{'shared' if shared else 'trl'}-{source}-{kwargs.get('padding_free', False)}"
    args = make_config(
        tmp_path / name, precompute_ref_log_probs=source.endswith("precompute"), gradient_checkpointing=gc
    )
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = OffsetDPOTrainer(
        model=load_model(model_dir, attn),
        ref_model=load_model(model_dir, attn) if source == "ref_model" else None,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora if source.startswith("lora") else None,
        shared_prompt=shared,
        **kwargs,
    )
    perturb(trainer.model)  # after the precompute: the reference stays the loaded weights
    if gc:  # as Trainer.train turns it on (these tests call compute_loss directly)
        trainer.model.gradient_checkpointing_enable(trainer.args.gradient_checkpointing_kwargs)
    return trainer


# ------------------------------------------------------------------------------------------- the collator's layout


def trl_rows(batch, half):
    """TRL's rows of a DataCollatorForPreference batch: (tokens, completion flags) per row of one half."""
    n = batch["input_ids"].size(0) // 2
    rows = range(n) if half == "chosen" else range(n, 2 * n)
    out = []
    for r in rows:
        keep = batch["attention_mask"][r].bool()
        out.append((batch["input_ids"][r][keep].tolist(), batch["completion_mask"][r][keep].tolist()))
    return out


@pytest.mark.parametrize("max_length", [None, 6, 3])
@pytest.mark.parametrize("padding_free", [False, True])
def test_tree_rows_hold_trls_rows(max_length, padding_free):
    """Each tree is TRL's chosen row and rejected row with the prompt once, TRL's keep_start truncation included."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    examples = [
        {"prompt_ids": [11, 12, 13, 14], "chosen_ids": [21, 22], "rejected_ids": [31, 32, 33], "junk": 1},
        {"prompt_ids": [15, 16], "chosen_ids": [23, 24, 25, 26], "rejected_ids": [34]},
    ]
    trl_collator = DataCollatorForPreference(pad_token_id=0, max_length=max_length)
    trl = trl_collator(examples)
    ours = shared_prompt.SharedPromptCollator.replacing(trl_collator, padding_free=padding_free)(examples)
    assert ours["input_ids"].size(0) == (1 if padding_free else 2)
    b = shared_prompt.BRANCH
    for i in range(2):
        at = ours["pair_ids"] == i
        ids, pos, branch = ours["input_ids"][at].tolist(), ours["position_ids"][at].tolist(), ours["branch_ids"][at]
        prompt = [t for t, k in zip(ids, branch) if k == b["prompt"]]
        chosen = [t for t, k in zip(ids, branch) if k == b["chosen"]]
        rejected = [t for t, k in zip(ids, branch) if k == b["rejected"]]
        assert (prompt + chosen, [0] * len(prompt) + [1] * len(chosen)) == trl_rows(trl, "chosen")[i]
        assert (prompt + rejected, [0] * len(prompt) + [1] * len(rejected)) == trl_rows(trl, "rejected")[i]
        bridge = (branch == b["bridge"]).nonzero()[:, 0].tolist()
        assert len(bridge) == 1 and ids[bridge[0]] == prompt[-1] and pos[bridge[0]] == len(prompt) - 1
        n = len(prompt)
        assert pos == [*range(n + len(chosen)), n - 1, *range(n, n + len(rejected))]
    padding = ours["pair_ids"] < 0
    assert not padding.any() if padding_free else padding.any()
    assert (ours["input_ids"][padding] == 0).all()
    # TRL's token count (its num_tokens metric) is kept: each row's non-padding tokens
    assert shared_prompt.PairTree(ours).unshared_token_count() == trl["attention_mask"].sum()


def test_mask_is_the_tree():
    """Pair 0: prompt a b, chosen c, bridge b', rejected r; pair 1 packed behind it (padding_free)."""
    b = shared_prompt.BRANCH
    branch = torch.tensor([[b[k] for k in ("prompt", "prompt", "chosen", "bridge", "rejected", "prompt", "chosen")]])
    pair = torch.tensor([[0, 0, 0, 0, 0, 1, 1]])
    got = shared_prompt.tree_attention_mask(pair, branch)[0, 0].int().tolist()
    assert got == [
        [1, 0, 0, 0, 0, 0, 0],  # a
        [1, 1, 0, 0, 0, 0, 0],  # b
        [1, 1, 1, 0, 0, 0, 0],  # c: prompt and itself
        [1, 1, 0, 0, 0, 0, 0],  # b': the prompt only (exactly b's keys)
        [1, 1, 0, 0, 1, 0, 0],  # r: prompt and its own branch, not c, not b'
        [0, 0, 0, 0, 0, 1, 0],  # next pair: never the first
        [0, 0, 0, 0, 0, 1, 1],
    ]


def test_keep_end_and_empty_prompts_are_refused():
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    collator = shared_prompt.SharedPromptCollator.replacing(
        DataCollatorForPreference(pad_token_id=0, max_length=4, truncation_mode="keep_end")
    )
    fits = {"prompt_ids": [1, 2], "chosen_ids": [3, 4], "rejected_ids": [5]}
    assert collator([fits])["input_ids"].tolist() == [[1, 2, 3, 4, 2, 5]]
    with pytest.raises(ValueError, match="pair 1 of the batch.*keep_end.*dpo.shared_prompt=false"):
        collator([fits, {"prompt_ids": [1, 2, 3], "chosen_ids": [4, 5], "rejected_ids": [6]}])
    with pytest.raises(ValueError, match="pair 0 of the batch has an empty prompt"):
        collator([{"prompt_ids": [], "chosen_ids": [4], "rejected_ids": [6]}])


# ------------------------------------------------------------------------------- architectures and attention kinds


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("model_type", shared_prompt.SUPPORTED_MODEL_TYPES)
def test_tree_forward_equals_unshared_rows(model_type, attn, tiny_tokenizer):
    """transformers passes the 4D tree mask and the restarting positions through each supported decoder (GQA
    heads): the model's own log-probs of every completion equal those of plain unpadded prompt+completion rows."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    torch.manual_seed(0)
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tiny_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn).eval()
    examples = [
        {
            "prompt_ids": list(range(5, 5 + p)),
            "chosen_ids": list(range(60, 60 + c)),
            "rejected_ids": list(range(90, 90 + r)),
        }
        for p, c, r in ((9, 3, 5), (4, 6, 1), (12, 2, 2))
    ]
    expected = torch.tensor([plain_logps(model, ex) for ex in examples]).T  # [2, pairs]
    for padding_free in (False, True):
        collator = shared_prompt.SharedPromptCollator.replacing(
            DataCollatorForPreference(pad_token_id=0), padding_free=padding_free
        )
        tree = shared_prompt.PairTree(collator(examples))
        shared_prompt.check_model(model.config, tree.input_ids.size(1))
        with torch.no_grad():
            logits = model(**tree.model_inputs(attn, torch.float32)).logits[:, :-1].float()
        labels = tree.labels[:, 1:]
        token_logps = torch.log_softmax(logits, -1).gather(2, labels.clamp(min=0)[..., None])[..., 0]
        got = torch.stack(tree.pair_sums(token_logps.masked_fill(labels == -100, 0)))
        torch.testing.assert_close(got, expected, **TOL)


def test_models_it_cannot_handle_are_refused(tmp_path, tiny_model_dir, tiny_tokenizer):
    from transformers import AutoConfig, AutoModelForCausalLM

    dataset = synthetic_pairs(tiny_tokenizer)
    flash = AutoConfig.for_model(
        "llama", vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    flash._attn_implementation = "flash_attention_2"  # no arbitrary mask (flash-attn itself is absent on CPU)
    with pytest.raises(ValueError, match="model.attn_implementation='flash_attention_2'.*dpo.shared_prompt=false"):
        shared_prompt.check_model(flash)
    flex = load_model(tiny_model_dir, "flex_attention")  # a BlockMask of the tree (tree_block_mask)
    OffsetDPOTrainer(model=flex, args=make_config(tmp_path), train_dataset=dataset, processing_class=tiny_tokenizer)
    OffsetDPOTrainer(
        model=flex,
        args=make_config(tmp_path),
        train_dataset=dataset,
        processing_class=tiny_tokenizer,
        shared_prompt=False,
    )  # TRL's layout takes any attention
    config = AutoConfig.for_model("gpt2", vocab_size=len(tiny_tokenizer), n_embd=32, n_layer=1, n_head=2)
    with pytest.raises(ValueError, match="verified for model types llama.*'gpt2'"):
        OffsetDPOTrainer(
            model=AutoModelForCausalLM.from_config(config),
            args=make_config(tmp_path),
            train_dataset=dataset,
            processing_class=tiny_tokenizer,
        )
    window = AutoConfig.for_model(
        "mistral",
        sliding_window=8,
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    window._attn_implementation = "sdpa"
    shared_prompt.check_model(window, row_length=8)
    with pytest.raises(ValueError, match="row of 9 tokens is longer than the model's sliding window"):
        shared_prompt.check_model(window, row_length=9)


def test_settings_that_are_not_exact_are_refused(tmp_path, tiny_model_dir, tiny_tokenizer):
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    common = dict(
        args=make_config(tmp_path), train_dataset=synthetic_pairs(tiny_tokenizer), processing_class=tiny_tokenizer
    )
    model = load_model(tiny_model_dir)
    with pytest.raises(ValueError, match="needs shared_prompt=True"):
        OffsetDPOTrainer(model=model, shared_prompt=False, padding_free=True, **common)
    with pytest.raises(RecipeError, match="dpo.padding_free=true .* needs dpo.shared_prompt=true"):
        load_recipe("tiny", {"dpo.padding_free": "true", "dpo.shared_prompt": "false"})
    with pytest.raises(ValueError, match="compute_metrics"):
        OffsetDPOTrainer(model=model, compute_metrics=lambda _: {}, **common)

    class Custom(DataCollatorForPreference):
        pass

    with pytest.raises(ValueError, match="custom data_collator \\(Custom\\)"):
        OffsetDPOTrainer(model=model, data_collator=Custom(pad_token_id=0), **common)


# --------------------------------------------------------------------------------- one step against TRL's own path


@pytest.mark.parametrize(
    "source, gc",
    [("reload", False), ("ref_model", True), ("precompute", False), ("lora", True), ("lora_precompute", False)],
)
def test_synthetic_step_equals_trl(tmp_path, tiny_model_dir, tiny_tokenizer, source, gc):
    dataset = synthetic_pairs(tiny_tokenizer)
    trl_trainer = build(tmp_path, tiny_model_dir, tiny_tokenizer, dataset, False, source, gc)
    shared = build(tmp_path, tiny_model_dir, tiny_tokenizer, dataset, True, source, gc)
    assert shared.model.is_gradient_checkpointing == gc
    if source.endswith("precompute"):  # the precompute ran on the tree layout and gave TRL's columns
        for column in ("ref_chosen_logps", "ref_rejected_logps"):
            torch.testing.assert_close(
                torch.tensor(shared.train_dataset[column]), torch.tensor(trl_trainer.train_dataset[column]), **TOL
            )
    assert_same(step(shared), step(trl_trainer))


def count_mask_builds(monkeypatch, builder: str) -> list:
    """Wrap `shared_prompt.<builder>` (a mask builder) so each call appends its pair_ids shape to the list returned."""
    built, real = [], getattr(shared_prompt, builder)

    def counted(pair_ids, branch_ids):
        built.append(pair_ids.shape)
        return real(pair_ids, branch_ids)

    monkeypatch.setattr(shared_prompt, builder, counted)
    return built


@pytest.mark.parametrize("source", ["reload", "ref_model", "lora"])
def test_one_mask_per_batch_for_policy_and_reference(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch, source):
    """The policy's forward and the reference's use the batch's one tree mask (built once, not once a forward)."""
    built = count_mask_builds(monkeypatch, "tree_attention_mask")
    trainer = build(tmp_path, tiny_model_dir, tiny_tokenizer, synthetic_pairs(tiny_tokenizer), True, source)
    batch = trainer._prepare_inputs(trainer.data_collator([trainer.train_dataset[i] for i in range(4)]))
    with trainer.compute_loss_context_manager():
        trainer.compute_loss(trainer.model, batch).backward()
    assert len(built) == 1, built  # the step ran both forwards (the reference is not precomputed) on one mask


def test_padding_free_step_equals_trl(tmp_path, tiny_model_dir, tiny_tokenizer):
    dataset = synthetic_pairs(tiny_tokenizer)
    trl = step(build(tmp_path, tiny_model_dir, tiny_tokenizer, dataset, False, "precompute"))
    packed = build(tmp_path, tiny_model_dir, tiny_tokenizer, dataset, True, "precompute", padding_free=True)
    batch = packed.data_collator([packed.train_dataset[i] for i in range(4)])
    assert batch["input_ids"].size(0) == 1 and (batch["pair_ids"] >= 0).all()  # one row, no padding
    assert_same(step(packed), trl)


def forward_only(trainer, masks_built: list) -> dict:
    """`step` without the backward (torch has no FlexAttention backward on CPU): loss, every logged metric, and the
    per-pair log-probs of the policy and of the reference model through the trainer's reference path;
    `masks_for_loss`: how many masks `masks_built` gained during the loss (its policy and reference forwards)."""
    examples = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    batch = trainer._prepare_inputs(trainer.data_collator(examples))
    trainer.model.train()
    masks_built.clear()
    with torch.no_grad(), trainer.compute_loss_context_manager():
        loss = trainer.compute_loss(trainer.model, batch)
    return {
        "rows": batch["input_ids"].size(0),
        "masks_for_loss": len(masks_built),
        "loss": loss,
        "metrics": {k: v[-1] for k, v in trainer._metrics["train"].items()},
        "policy_logps": torch.stack(trainer.compute_ref_log_probs(trainer.model, batch)),
        "ref_logps": torch.stack(trainer.compute_ref_log_probs(trainer.ref_model, batch)),
    }


@pytest.fixture
def fresh_flex_compiles():
    """Each flex test compiles its own kernels: dynamo turns a recompiled function dynamic, and torch 2.13's CPU
    flex_attention template with symbolic sizes emits C++ that does not compile (`cur_kvSplitSize8` undeclared, seen
    on AVX-512 CPUs when the packed test's lengths ran before the v1 pairs'). Reset before and after so no test
    inherits another's graphs or their dynamic sizes."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.usefixtures("fresh_flex_compiles")
def test_packed_flex_equals_unpacked_sdpa_and_trl_rows(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch):
    """dpo.padding_free with model.attn_implementation=flex_attention (the micro-batch's pairs in one row, one
    block-sparse BlockMask) on CPU, fp32, forward only: the precomputed reference log-probs, the policy's and the
    reference model's per-pair log-probs, the ODPO loss and every logged metric equal the unpacked tree rows' (sdpa)
    and TRL's own rows'; the one BlockMask is built once for the policy's forward and the reference's."""
    dataset = synthetic_pairs(tiny_tokenizer)
    layouts = {
        "trl": (False, "sdpa", False),
        "tree": (True, "sdpa", False),
        "packed_flex": (True, "flex_attention", True),
    }
    built = count_mask_builds(monkeypatch, "tree_block_mask")
    steps, columns = {}, {}
    for name, (shared, attn, packed) in layouts.items():
        kwargs = {"padding_free": True} if packed else {}
        trainer = build(
            tmp_path / name, tiny_model_dir, tiny_tokenizer, dataset, shared, "ref_model", attn=attn, **kwargs
        )
        steps[name] = forward_only(trainer, built)
        if packed:  # one row; the policy's forward and the reference model's shared its one BlockMask
            assert steps[name]["rows"] == 1 and steps[name]["masks_for_loss"] == 1, built
        pre = build(
            tmp_path / name, tiny_model_dir, tiny_tokenizer, dataset, shared, "precompute", attn=attn, **kwargs
        )
        columns[name] = torch.tensor([pre.train_dataset[k] for k in ("ref_chosen_logps", "ref_rejected_logps")])
    for name in ("tree", "packed_flex"):
        torch.testing.assert_close(columns[name], columns["trl"], **TOL)
        ours, trl = steps[name], steps["trl"]
        torch.testing.assert_close(ours["loss"], trl["loss"], **TOL)
        for key in ("policy_logps", "ref_logps"):
            torch.testing.assert_close(ours[key], trl[key], **TOL)
        assert set(ours["metrics"]) == set(trl["metrics"])
        for key, value in trl["metrics"].items():
            assert ours["metrics"][key] == pytest.approx(value, rel=1e-5, abs=metric_tolerance(key, trl["metrics"]))


def test_metrics_equal_stock_trl(tmp_path, tiny_model_dir, tiny_tokenizer):
    """With every offset 0 ODPO is DPO: loss and every metric stock `trl.DPOTrainer` logs are the same."""
    from trl import DPOTrainer

    dataset = synthetic_pairs(tiny_tokenizer, margins=(0.0,) * 4)
    stock = DPOTrainer(
        model=load_model(tiny_model_dir),
        args=make_config(tmp_path / "stock"),
        train_dataset=dataset.remove_columns("margin"),
        processing_class=tiny_tokenizer,
    )
    perturb(stock.model)
    trl = step(stock)
    ours = step(build(tmp_path, tiny_model_dir, tiny_tokenizer, dataset, True))
    assert set(ours["metrics"]) - set(trl["metrics"]) == {"offset/mean", "rewards/margin_above_offset"}
    ours["metrics"] = {k: v for k, v in ours["metrics"].items() if k in trl["metrics"]}
    assert_same(ours, trl)


def test_training_and_eval_logs_equal_trl(tmp_path, tiny_model_dir, tiny_tokenizer):
    """Trainer.train (2 optimizer steps, gradient accumulation 2) and evaluate: the same logs either way."""
    dataset = synthetic_pairs(tiny_tokenizer)
    logs = {}
    for shared in (False, True):
        trainer = OffsetDPOTrainer(
            model=load_model(tiny_model_dir),
            args=make_config(
                tmp_path / str(shared),
                per_device_train_batch_size=1,
                gradient_accumulation_steps=2,
                eval_strategy="no",
            ),
            train_dataset=dataset,
            eval_dataset=dataset,
            processing_class=tiny_tokenizer,
            shared_prompt=shared,
        )
        trainer.train()
        logs[shared] = [*trainer.state.log_history[:2], trainer.evaluate()]
    assert_same_logs(logs[True], logs[False])


# -------------------------------------------------------------------------------------------- real TicToc v1 pairs


@pytest.fixture(scope="module")
def v1_pairs(tictoc_v1_dir, tiny_tokenizer, tmp_path_factory):
    """Three real v1 train pairs through data prep and the shared PromptRenderer (as train/dpo.py renders them)."""
    from timealign.config.schema import DataSection
    from timealign.data.pairs import load_prepared, prepare
    from timealign.render.chat import PromptRenderer
    from timealign.train.dpo import render_split

    out = tmp_path_factory.mktemp("v1")
    prepare(DataSection(source="v1", path=str(tictoc_v1_dir)), out)
    train = load_prepared(out)["train"].select(range(3))
    rendered = render_split(train, PromptRenderer(tiny_tokenizer), "Rendering v1 pairs")
    # Large offsets keep -logsigmoid in its linear regime, so the gradient is a fixed combination of the per-pair
    # log-prob gradients. With small offsets its slope depends on the log-ratios, i.e. on differences of summed
    # log-probs of about -2000 here, which fp32 rounds to 2.4e-4 in either layout (differently): that moves the slope,
    # and so every gradient, by ~2e-5 relative (the synthetic pairs test small offsets, with sums of ~-200).
    return rendered.map(lambda row, i: {"margin": [20.0, 30.0, 40.0][i]}, with_indices=True)


@pytest.mark.parametrize("padding_free", [False, True])
def test_real_v1_step_equals_trl(tmp_path, tiny_model_dir, tiny_tokenizer, v1_pairs, padding_free):
    trl_trainer = build(tmp_path, tiny_model_dir, tiny_tokenizer, v1_pairs, False)
    trl = step(trl_trainer)
    ours = step(build(tmp_path, tiny_model_dir, tiny_tokenizer, v1_pairs, True, padding_free=padding_free))
    assert_same(ours, trl)
    # ... and both equal a plain unpadded forward of each prompt+completion
    plain = [plain_logps(trl_trainer.model.eval(), ex) for ex in trl_trainer.train_dataset]
    torch.testing.assert_close(ours["policy_logps"], torch.tensor(plain).T, **TOL)
    prompt_tokens = sum(len(ex["prompt_ids"]) for ex in trl_trainer.train_dataset)
    assert prompt_tokens > 2000  # real TicToc prompts: the shared part is most of each row


@pytest.mark.usefixtures("fresh_flex_compiles")
def test_flex_block_mask_forward_equals_dense_on_real_v1_pairs(tiny_model_dir, tiny_tokenizer, v1_pairs):
    """model.attn_implementation=flex_attention: the BlockMask built from the same tree rule gives the dense sdpa
    mask's per-pair log-probs (forward, fp32) on real v1 pairs, padded and padding-free, and skips blocks no query
    sees. (torch has no flex backward on CPU: the gradient check needs a GPU.)"""
    from transformers import AutoModelForCausalLM
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    def ids(text):
        return tiny_tokenizer(text, add_special_tokens=False)["input_ids"]

    examples = [
        {"prompt_ids": ids(row["prompt"]), "chosen_ids": ids(row["chosen"]), "rejected_ids": ids(row["rejected"])}
        for row in v1_pairs
    ]
    assert min(len(ex["prompt_ids"]) for ex in examples) > 128  # more than one block per prompt
    models = {
        attn: AutoModelForCausalLM.from_pretrained(
            tiny_model_dir, dtype=torch.float32, attn_implementation=attn
        ).eval()
        for attn in ("sdpa", "flex_attention")
    }
    for padding_free in (False, True):
        collator = shared_prompt.SharedPromptCollator.replacing(
            DataCollatorForPreference(pad_token_id=0), padding_free=padding_free
        )
        tree = shared_prompt.PairTree(collator(examples))
        labels = tree.labels[:, 1:]
        got = {}
        for attn, model in models.items():
            shared_prompt.check_model(model.config, tree.input_ids.size(1))
            with torch.no_grad():
                logits = model(**tree.model_inputs(attn, torch.float32)).logits[:, :-1].float()
            token_logps = torch.log_softmax(logits, -1).gather(2, labels.clamp(min=0)[..., None])[..., 0]
            got[attn] = token_logps.masked_fill(labels == -100, 0)
        # every scored token's log-prob to 1e-5; the per-pair sums (about -2000 here) to fp32's rounding of a sum
        torch.testing.assert_close(got["flex_attention"], got["sdpa"], rtol=0, atol=1e-5)
        torch.testing.assert_close(
            torch.stack(tree.pair_sums(got["flex_attention"])),
            torch.stack(tree.pair_sums(got["sdpa"])),
            rtol=1e-6,
            atol=1e-5,
        )
        block_mask = shared_prompt.tree_block_mask(tree.pair_ids, tree.branch_ids)
        assert block_mask.sparsity() > (40 if padding_free else 0)  # % of blocks skipped: other pairs, padding
    with pytest.raises(ValueError, match="no FlexAttention backward on CPU"):
        tree.model_inputs("flex_attention", torch.float32)  # grad enabled here: training would fail in backward


# ----------------------------------------------------------------------------------- several processes (slow, CPU)


@pytest.fixture(scope="module")
def cluster_env(train_env, prepared):  # conftest.py's fixtures
    return train_env, prepared


def _losses(out) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in json.loads((out / "train_log.json").read_text()) if "loss" in e}


@pytest.fixture(scope="module")
def unshared_baseline(cluster_env, tmp_path_factory):
    """1 process, TRL's layout, global batch 4, 2 steps."""
    env, data_dir = cluster_env
    out = tmp_path_factory.mktemp("baseline") / "run"
    run_checked(
        [
            sys.executable,
            str(REPO_ROOT / "train/dpo.py"),
            "recipe=tiny",
            f"data.prepared_dir={data_dir}",
            "data.synthetic_trajectories=8",
            f"output_dir={out}",
            "training.max_steps=2",
            "training.logging_steps=1",
            "training.per_device_train_batch_size=4",
            "training.save_strategy=no",
            "dpo.shared_prompt=false",
        ],
        env,
    )
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, padding_free, prompt_cache", [("ddp", True, False), ("zero2", False, True), ("zero3", False, False)]
)
def test_two_processes_equal_one_unshared(
    cluster_env, unshared_baseline, tmp_path, config, padding_free, prompt_cache
):
    """2 CPU processes (DDP over gloo, DeepSpeed ZeRO-2, ZeRO-3) with the shared prompt, 2 pairs each: the losses of
    the 1-process run on TRL's layout (ZeRO-2 with the prompt-cache layout, `dpo.prompt_cache`: two forwards, one
    backward). FSDP cannot run on CPU (accelerate 1.15 drops the FSDP plugin under use_cpu;
    see test_cluster.test_fsdp_two_processes), so it is not covered here."""
    if config != "ddp":
        pytest.importorskip("deepspeed", reason="DeepSpeed not installed (pip install -e '.[deepspeed]')")
    env, data_dir = cluster_env
    out = tmp_path / config
    env, args = cluster_launch(
        env,
        data_dir,
        out,
        "training.max_steps=2",
        f"accelerate_config={config}",
        "training.per_device_train_batch_size=2",
        "dpo.shared_prompt=true",
        f"dpo.padding_free={str(padding_free).lower()}",
        f"dpo.prompt_cache={str(prompt_cache).lower()}",
        job="790",
        cpu_env=config == "ddp",
    )
    run_checked(args, env)
    recipe = yaml.safe_load((out / "timealign_recipe.yaml").read_text())  # what build_trainer gave the trainer
    assert recipe["dpo"] == {
        "shared_prompt": True,
        "padding_free": padding_free,
        "margin_mode": "offset",
        "prompt_cache": prompt_cache,
    }
    info = json.loads((out / "run_info.json").read_text())
    assert info["world_size"] == 2
    assert info["model_wrapper"] == ("DistributedDataParallel" if config == "ddp" else "DeepSpeedEngine")
    assert _losses(out) == pytest.approx(_losses(unshared_baseline), abs=1e-5)
    assert sorted(_losses(out)) == [1, 2]
