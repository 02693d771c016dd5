"""The embedded tiny default: a real Llama model and offline tokenizer, and the tiny-agent warm-up."""

import json

from transformers import AutoModelForCausalLM, AutoTokenizer

from timealign.models.tiny import build_tiny_agent, ensure_tiny_model


def test_tiny_model_is_a_real_llama_with_vllm_compatible_heads(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "llama"
    assert model.config.head_dim >= 64  # vLLM's CPU attention refuses smaller heads
    assert model.config.vocab_size == len(tokenizer)
    for token in ("<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>"):
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    # Timestamps tokenize digit by digit.
    assert tokenizer.tokenize("2025")[:4] == ["2", "0", "2", "5"]
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"


def test_tiny_build_is_deterministic_and_cached(tmp_path):
    first = ensure_tiny_model(tmp_path / "a")
    second = ensure_tiny_model(tmp_path / "b")
    assert ensure_tiny_model(tmp_path / "a") == first  # cached: no rebuild
    a, b = (AutoModelForCausalLM.from_pretrained(p) for p in (first, second))
    assert all((x == y).all() for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_tiny_agent_warmup_trains_on_agent_turns(tiny_model_dir, tmp_path):
    out = build_tiny_agent(tmp_path / "agent", tiny_model_dir, trajectories=4, epochs=1)
    meta = json.loads((out / "timealign_tiny.json").read_text())
    assert meta["warmup_examples"] > 4  # every assistant turn inside the histories, never a final decision
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    agent = AutoModelForCausalLM.from_pretrained(out)
    changed = [name for (name, p), q in zip(base.named_parameters(), agent.parameters()) if not (p == q).all()]
    assert changed  # the warm-up really trained
    assert (
        AutoTokenizer.from_pretrained(out).chat_template == AutoTokenizer.from_pretrained(tiny_model_dir).chat_template
    )


def test_blind_agent_warmup_adds_coin_flip_final_turns(tiny_model_dir, tmp_path):
    plain = build_tiny_agent(tmp_path / "plain", tiny_model_dir, trajectories=4, epochs=1, max_rounds=1)
    blind = build_tiny_agent(
        tmp_path / "blind", tiny_model_dir, trajectories=4, epochs=1, max_rounds=1, final_turns=True, elapsed=True
    )
    meta_plain = json.loads((plain / "timealign_tiny.json").read_text())
    meta_blind = json.loads((blind / "timealign_tiny.json").read_text())
    # 4 trajectories x 3 elapse levels = 12 final follow-ups on top of the same in-history turns
    assert meta_blind["warmup_examples"] == meta_plain["warmup_examples"] + 12
    assert meta_blind["final_turns"] and meta_blind["elapsed"]
