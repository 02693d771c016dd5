"""Prompt-cache offset-DPO (`timealign.train.prompt_cache`, `dpo.prompt_cache`): each pair's prompt runs once as a
causal forward, both completions continue from its key/value cache, and the numbers are those of TRL's own unshared
rows and of the tree layout (`timealign.train.shared_prompt`).

Every comparison runs the real paths on the same weights and pairs, in float32, with prompts of different lengths in
one micro-batch (left padding in the prompt forward) and a pair whose prompt is one token (nothing of it cached):
per-pair log-probs of each supported architecture (sdpa and eager) against plain unpadded forwards and the tree, their
gradients against the tree's, and one `OffsetDPOTrainer` step (loss, every parameter gradient, every metric, the
reference log-probs of each reference source) against TRL's layout (`shared_prompt=False`) and the tree.
"""

from __future__ import annotations

import pytest
import torch
from dpo_layouts import TOL, assert_same, load_model, make_config, perturb, plain_logps, step, synthetic_pairs

from timealign.config import load_recipe
from timealign.train import prompt_cache, shared_prompt
from timealign.train.odpo import OffsetDPOTrainer

FUSED_OUTPUTS = ("log_probs", "entropy", "mean_logits", "is_top1")  # what DPOTrainer asks of the fused LM head
# (prompt, chosen, rejected) lengths: prompts of different lengths in one micro-batch, one prompt of a single token
LENGTHS = ((9, 3, 5), (1, 6, 1), (12, 2, 2), (4, 0, 3))


def random_model(model_type, vocab_size, attn="sdpa", **config):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(
        model_type,
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        **config,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn).float()


def examples(lengths=LENGTHS):
    return [
        {
            "prompt_ids": list(range(5, 5 + p)),
            "chosen_ids": list(range(60, 60 + c)),
            "rejected_ids": list(range(90, 90 + r)),
        }
        for p, c, r in lengths
    ]


def collators(**kwargs):
    """(tree, cache) collators with the settings of one TRL `DataCollatorForPreference`."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    trl = DataCollatorForPreference(pad_token_id=0, **kwargs)
    return shared_prompt.SharedPromptCollator.replacing(trl), prompt_cache.PromptCacheCollator.replacing(trl)


LAYOUTS = {"trl": dict(shared_prompt=False), "tree": dict(shared_prompt=True), "cache": dict(prompt_cache=True)}


def build(tmp_path, model_dir, tokenizer, dataset, layout, source="reload", **config):
    """An OffsetDPOTrainer of `layout` (LAYOUTS) whose reference is `source`: reload (TRL loads it from the path),
    ref_model, precompute, lora, lora_precompute."""
    from peft import LoraConfig

    args = make_config(
        tmp_path / f"{layout}-{source}", precompute_ref_log_probs=source.endswith("precompute"), **config
    )
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = OffsetDPOTrainer(
        model=load_model(model_dir),
        ref_model=load_model(model_dir) if source == "ref_model" else None,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora if source.startswith("lora") else None,
        **LAYOUTS[layout],
    )
    perturb(trainer.model)  # after the precompute: the reference stays the loaded weights
    return trainer


# ------------------------------------------------------------------------------------------- the collator's layout


@pytest.mark.parametrize("max_length", [None, 10, 3])
def test_cache_rows_hold_trls_rows(max_length):
    """Prompt row (left-padded, without its last token) + each completion row (the last prompt token, then the
    completion) is TRL's row, TRL's keep_start truncation included; positions continue the prompt's."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    pairs = examples()
    trl = DataCollatorForPreference(pad_token_id=0, max_length=max_length)(pairs)
    batch = collators(max_length=max_length)[1](pairs)
    n = len(pairs)
    assert batch["prompt_input_ids"].size(0) == n and batch["completion_input_ids"].size(0) == 2 * n
    for i in range(n):
        keep = batch["prompt_attention_mask"][i].bool()
        prompt = batch["prompt_input_ids"][i][keep].tolist()
        assert not keep.any() or keep[-1]  # left padding: every prompt ends at the last column
        assert batch["prompt_position_ids"][i][keep].tolist() == list(range(len(prompt)))
        for branch, row in enumerate((i, n + i)):  # TRL: [chosen rows; rejected rows]
            r = 2 * i + branch
            keep_c = batch["completion_attention_mask"][r].bool()
            completion = batch["completion_input_ids"][r][keep_c].tolist()
            trl_keep = trl["attention_mask"][row].bool()
            assert prompt + completion == trl["input_ids"][row][trl_keep].tolist()
            assert trl["completion_mask"][row][trl_keep].sum() == len(completion) - 1
            positions = batch["completion_position_ids"][r][keep_c].tolist()
            assert positions == list(range(len(prompt), len(prompt) + len(completion)))
    tree = shared_prompt.PairTree(collators(max_length=max_length)[0](pairs))
    cache = prompt_cache.CachedPairs(batch)
    assert cache.unshared_token_count() == tree.unshared_token_count() == trl["attention_mask"].sum()
    for which in ("target_chosen", "target_rejected"):  # the same scored tokens
        assert getattr(cache, which).sum() == getattr(tree, which).sum()


def test_pad_to_multiple_of_and_empty_prompts():
    batch = collators(pad_to_multiple_of=8)[1](examples())
    assert batch["prompt_input_ids"].size(1) == 16 and batch["completion_input_ids"].size(1) == 8
    one_token = collators()[1](examples(((1, 2, 1), (1, 0, 3))))
    assert one_token["prompt_input_ids"].shape == (2, 0)  # nothing to cache: the completions carry the prompt
    with pytest.raises(ValueError, match="pair 1 of the batch has an empty prompt"):
        collators()[1](examples(((2, 1, 1), (0, 1, 1))))


# ------------------------------------------------------------------------------- architectures and attention kinds


def fused(model):
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model, outputs=FUSED_OUTPUTS)
    return model


def layout_logps(model, attn, pairs, layout) -> tuple[torch.Tensor, object]:
    """[2, pairs] per-pair log-probs of `layout` (tree | cache) through TRL's fused LM head, and its outputs."""
    tree_collator, cache_collator = collators()
    if layout == "cache":
        batch = prompt_cache.CachedPairs(cache_collator(pairs))
        outputs = batch.forward(model)
    else:
        batch = shared_prompt.PairTree(tree_collator(pairs))
        outputs = model(**batch.model_inputs(attn, torch.float32), labels=batch.labels, fused_lm_head=True)
    return torch.stack(batch.pair_sums(outputs.log_probs)), (batch, outputs)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("model_type", shared_prompt.SUPPORTED_MODEL_TYPES)
def test_cached_forward_equals_unshared_rows_and_tree(model_type, attn, tiny_tokenizer):
    """Each supported decoder (GQA heads) continues from the left-padded prompt cache: per-pair log-probs equal plain
    unpadded prompt+completion rows and the tree; the per-token entropy, mean logit and top-1 of the scored tokens
    (TRL's metrics) equal the tree's; the gradient of every parameter equals the tree's."""
    model = fused(random_model(model_type, len(tiny_tokenizer), attn))
    pairs = examples()
    expected = torch.tensor([plain_logps(model, ex) for ex in pairs]).T
    results = {}
    for layout in ("tree", "cache"):
        model.zero_grad()
        logps, (batch, outputs) = layout_logps(model, attn, pairs, layout)
        torch.testing.assert_close(logps.detach(), expected, **TOL)
        (logps * torch.linspace(0.5, 1.5, logps.numel()).view_as(logps)).sum().backward()
        results[layout] = {
            "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
            **{k: torch.stack(batch.pair_sums(getattr(outputs, k).detach().float())) for k in FUSED_OUTPUTS},
        }
    tree, cache = results["tree"], results["cache"]
    for key in FUSED_OUTPUTS:  # per pair and branch: sums of log-probs, entropies, mean logits, top-1 hits
        torch.testing.assert_close(cache[key], tree[key], **TOL, msg=lambda m, key=key: f"{key}: {m}")
    for name, grad in tree["grads"].items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(cache["grads"][name], grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("model_type", ["mistral", "qwen2"])
def test_sliding_window_shorter_than_the_prompt(model_type, tiny_tokenizer):
    """A sliding window shorter than the prompts (the tree refuses such rows): the cache keeps the window's last keys
    and left padding keeps index distances equal to position distances, so the log-probs are those of plain rows."""
    window = dict(sliding_window=4, use_sliding_window=True, max_window_layers=0)
    model = fused(random_model(model_type, len(tiny_tokenizer), **window))
    pairs = examples()
    expected = torch.tensor([plain_logps(model, ex) for ex in pairs]).T
    full = random_model(model_type, len(tiny_tokenizer))  # the same weights without the window
    assert not torch.allclose(torch.tensor([plain_logps(full, ex) for ex in pairs]).T, expected, **TOL)
    with torch.no_grad():
        got, _ = layout_logps(model, "sdpa", pairs, "cache")
    torch.testing.assert_close(got, expected, **TOL)


# --------------------------------------------------------------------------------- one step against the other paths


@pytest.mark.parametrize("source", ["reload", "ref_model", "precompute", "lora", "lora_precompute"])
def test_step_equals_trl_and_tree(tmp_path, tiny_model_dir, tiny_tokenizer, source):
    """Loss, every gradient, every metric and the reference log-probs (ref model, PEFT base with adapters disabled,
    the precomputed columns) of one step equal TRL's layout and the tree's."""
    dataset = synthetic_pairs(tiny_tokenizer)
    trainers = {layout: build(tmp_path, tiny_model_dir, tiny_tokenizer, dataset, layout, source) for layout in LAYOUTS}
    assert isinstance(trainers["cache"].data_collator.base, prompt_cache.PromptCacheCollator)
    if source.endswith("precompute"):  # the precompute ran on the cached layout and gave TRL's columns
        for column in ("ref_chosen_logps", "ref_rejected_logps"):
            torch.testing.assert_close(
                torch.tensor(trainers["cache"].train_dataset[column]),
                torch.tensor(trainers["trl"].train_dataset[column]),
                **TOL,
            )
    steps = {layout: step(trainer) for layout, trainer in trainers.items()}
    assert_same(steps["cache"], steps["trl"])
    assert_same(steps["cache"], steps["tree"])


def test_training_and_eval_logs_equal_tree(tmp_path, tiny_model_dir, tiny_tokenizer):
    """Trainer.train (2 optimizer steps of 2 micro-batches of 2 pairs with different prompt lengths) and evaluate: the
    same logs as the tree layout."""
    dataset = synthetic_pairs(tiny_tokenizer)
    logs = {}
    for layout in ("tree", "cache"):
        trainer = OffsetDPOTrainer(
            model=load_model(tiny_model_dir),
            args=make_config(
                tmp_path / layout,
                per_device_train_batch_size=2,
                per_device_eval_batch_size=2,
                gradient_accumulation_steps=2,
                eval_strategy="no",
            ),
            train_dataset=dataset,
            eval_dataset=dataset,
            processing_class=tiny_tokenizer,
            **LAYOUTS[layout],
        )
        trainer.train()
        logs[layout] = [*trainer.state.log_history[:2], trainer.evaluate()]
    for tree, ours in zip(logs["tree"], logs["cache"], strict=True):
        assert set(ours) == set(tree)
        for key, value in tree.items():
            if "runtime" not in key and "per_second" not in key and key != "epoch":
                assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-5), key


# --------------------------------------------------------------------------------------------------- refusals


def test_the_recipe_key_defaults_off():
    assert load_recipe("tiny", {}).dpo.prompt_cache is False
    assert load_recipe("tiny", {"dpo.prompt_cache": "true"}).dpo.prompt_cache is True


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and "dpo.prompt_cache" in message
    return message


def test_settings_it_cannot_handle_are_refused(tmp_path, tiny_model_dir, tiny_tokenizer):
    """One line each, naming dpo.prompt_cache and the fix."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dataset = synthetic_pairs(tiny_tokenizer)

    def trainer(model=None, config=None, **kwargs):
        return OffsetDPOTrainer(
            model=model or load_model(tiny_model_dir),
            args=config or make_config(tmp_path),
            train_dataset=dataset,
            processing_class=tiny_tokenizer,
            **kwargs,
        )

    with pytest.raises(ValueError) as err:
        trainer(shared_prompt=False, prompt_cache=True)
    assert "needs dpo.shared_prompt=true" in one_line(err)
    with pytest.raises(ValueError) as err:
        trainer(prompt_cache=True, padding_free=True)
    assert "set dpo.padding_free=false" in one_line(err)
    with pytest.raises(ValueError) as err:
        trainer(config=make_config(tmp_path, gradient_checkpointing=True), prompt_cache=True)
    assert "set training.gradient_checkpointing=false" in one_line(err)
    for attn in ("flex_attention", "flash_attention_2"):
        config = AutoConfig.for_model(
            "llama", vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
        config._attn_implementation = attn
        with pytest.raises(ValueError) as err:
            prompt_cache.check_model(config)
        assert f"not {attn!r}; set model.attn_implementation=sdpa" in one_line(err)
    with pytest.raises(ValueError) as err:  # at construction, before the tree's own check (which takes flex)
        trainer(load_model(tiny_model_dir, "flex_attention"), prompt_cache=True)
    assert "'flex_attention'" in one_line(err)
    gpt2 = AutoConfig.for_model("gpt2", vocab_size=len(tiny_tokenizer), n_embd=32, n_layer=1, n_head=2)
    with pytest.raises(ValueError) as err:
        trainer(AutoModelForCausalLM.from_config(gpt2), prompt_cache=True)
    assert "verified for model types llama" in one_line(err) and "'gpt2'" in str(err.value)
    # Gradient checkpointing turned on after construction: refused at the forward, not silently cache-less.
    cached = trainer(prompt_cache=True)
    cached.model.gradient_checkpointing_enable()
    with pytest.raises(ValueError) as err:
        step(cached)
    assert "transformers drops the prompt's key/value cache" in one_line(err)
    # A prompt-cache collator on the tree layout (and the other way round) is refused.
    _, cache_collator = collators()
    with pytest.raises(ValueError, match="PromptCacheCollator needs dpo.prompt_cache=true"):
        trainer(data_collator=cache_collator)
    with pytest.raises(ValueError, match="not a prompt-cache batch"):
        prompt_cache.CachedPairs(collators()[0](examples()))


def test_the_recipe_refuses_what_the_trainer_would(tmp_path):
    """The same refusals when the recipe loads (exit 2 from every command), before any model or data is read."""
    from timealign.config import RecipeError

    for overrides, expected in (
        ({"dpo.shared_prompt": "false"}, "dpo.prompt_cache=true is a layout of the shared prompt"),
        ({"dpo.padding_free": "true"}, "dpo.prompt_cache and dpo.padding_free are two layouts"),
        ({"training.gradient_checkpointing": "true"}, "needs training.gradient_checkpointing=false"),
    ):
        with pytest.raises(RecipeError, match=expected):
            load_recipe("tiny", {"dpo.prompt_cache": "true", **overrides}, task="dpo")
    assert load_recipe("tiny", {"dpo.prompt_cache": "true"}, task="dpo").dpo.prompt_cache is True
