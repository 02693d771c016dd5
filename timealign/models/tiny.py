"""The embedded tiny default: a random-weight Llama-architecture model and an offline tokenizer.

Nothing is downloaded. The tokenizer is a byte-level BPE trained in milliseconds on a small embedded corpus, with
single-digit number pieces (so timestamps tokenize digit by digit) and a ChatML-style chat template that supports
tools. `<tool_call>` is one special token, so "call a tool or answer directly" is the very first completion token.

The model keeps head_dim = 64 because vLLM's CPU attention refuses smaller heads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from timealign.models.cache import build_once, default_cache_dir

TINY_NAME = "tiny"  # `model.name_or_path: tiny` in a recipe selects this model (random weights)
TINY_AGENT_NAME = "tiny-agent"  # the same model after a short format warm-up on synthetic agent turns
# ... and after a warm-up that also covers the final follow-ups with a coin-flip action: fluent in both actions,
# blind to time (`make experiment`'s base; rendered with the elapsed badge, one retrieval round per trajectory)
TINY_BLIND_AGENT_NAME = "tiny-agent-blind"
BLIND_AGENT_SETTINGS = {"final_turns": True, "elapsed": True, "max_rounds": 1, "trajectories": 80, "epochs": 3}
TINY_FORMAT_VERSION = "4"  # bump when the files written below change, so stale caches are rebuilt
TINY_META = "timealign_tiny.json"  # written last into every built folder: its presence means "complete"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

# The conversation part of timealign's ChatML tool templates (tiny's and smol's): each non-system message in a turn,
# its tool calls as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, then the generation prompt.
CHATML_TURNS = (
    "{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content %}{{ message.content }}{%- endif %}"
    "{%- if message.tool_calls %}{%- for call in message.tool_calls %}"
    "{%- set fn = call.function if call.function is defined else call %}"
    "{{ '<tool_call>{\"name\": \"' + fn.name + '\", \"arguments\": ' + (fn.arguments | tojson) + '}</tool_call>' }}"
    "{%- endfor %}{%- endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)

# ChatML-style template. Tools are listed in the system turn as JSON; a tool call is rendered as
# <tool_call>{"name": ..., "arguments": {...}}</tool_call>. Tool results come back in a "tool" turn.
TINY_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{ '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{ '# Tools' }}{%- for tool in tools %}{{ '\\n' + (tool | tojson) }}{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}" + CHATML_TURNS
)

# Enough English, JSON and ISO-time text for useful merges; bytes not covered still encode (byte-level BPE).
_CORPUS = """
You are a helpful assistant. What is the current price of the stock? Let me check the latest data for you.
The weather forecast for tomorrow is sunny with a high of 21 degrees and a low of 12 degrees.
Your flight is booked. The hotel room is available at 129 dollars per night. The package is on route.
How long will it take? Is it still open? Can you compare the two options? Which one is cheaper now?
The score is 2 to 1 in the second half. The order book shows 500 shares at the best bid and 300 at the ask.
The baggage allowance is one carry-on bag and one personal item; checked bags cost 35 dollars each.
The population of the city was estimated at 850000 people in the latest official census release.
{"name": "get_stock_price", "arguments": {"symbol": "ACME"}} {"price": 101.25, "currency": "USD"}
{"type": "function", "function": {"name": "search", "description": "Retrieve data", "parameters":
{"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
[2025-12-04T10:22:44Z] [2023-03-21T10:00:05Z] minutes hours days months seconds ago later since
the a an and or of to in on at for with from by is are was were be been it this that these those
user assistant system tool result status available booked cancelled delayed open closed rate level
"""


def _training_text() -> list[str]:
    """The embedded corpus plus synthetic TicToc conversations, so the demo's prompts tokenize compactly."""
    from timealign.data.synthetic import generate_annotated

    lines = [line for line in _CORPUS.splitlines() if line]
    lines += ["<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_start|>tool\n"] * 20
    for record in generate_annotated(40, seed=12345):
        lines += [json.dumps(tool) for tool in record["function"]]
        for message in record["history"]:
            lines.append(message.get("content") or "")
            lines += [json.dumps(call["function"]) for call in message.get("tool_calls") or []]
        lines.append(record.get("direct_answer") or "")
    return [line for line in lines if line]


def _build_tokenizer(vocab_size: int = 2048):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<tool_call>", "</tool_call>"],
        padding_side="left",
        model_max_length=4096,
    )
    fast.chat_template = TINY_CHAT_TEMPLATE
    return fast


def build_tiny_model(
    out_dir: str | os.PathLike,
    *,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 4096,
    seed: int = 0,
) -> Path:
    """Write a random-weight Llama model and its tokenizer to `out_dir`; returns the folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    tokenizer = _build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / TINY_META).write_text(json.dumps({"format": TINY_FORMAT_VERSION, "seed": seed}))
    return out


def ensure_tiny_model(cache_dir: str | os.PathLike | None = None) -> Path:
    """Return the folder of the tiny model, building it once (atomic rename, safe under several processes)."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return build_once(base / f"tiny-llama-v{TINY_FORMAT_VERSION}", build_tiny_model, TINY_META)


def build_tiny_agent(
    out_dir: str | os.PathLike,
    base_dir: str | os.PathLike,
    *,
    trajectories: int = 80,
    epochs: int = 3,
    seed: int = 777,
    final_turns: bool = False,
    elapsed: bool = False,
    max_rounds: int = 2,
    learning_rate: float = 2e-3,
) -> Path:
    """A tiny *agent*: the random tiny model given a short SFT on the earlier turns of synthetic trajectories.

    A random-weight model emits neither tool calls nor answers, so no preference training can change its decisions.
    Real users start from instruct models that already call tools; this warm-up plays that part on CPU. It trains
    only on the agent turns INSIDE histories (a request -> a tool call, a tool result -> an answer) of train-split
    scenarios, never on a final follow-up question, so it teaches the format and no time rule: the result calls
    tools on most follow-ups regardless of the gap, the paper's temporally blind starting point.

    `final_turns=True` also trains on the final follow-ups, with the action (tool call or direct answer) drawn by a
    coin flip that ignores the gap, half of them rendered without timestamps: a base that is fluent in both
    actions, uses neither time nor the label, and calls on about half of all follow-ups (`make experiment`'s base).
    `elapsed` renders the time-elapsed badge (PromptRenderer.elapsed); `max_rounds` is the generator's.
    """
    import random

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from timealign.config import DataSection
    from timealign.data.records import LoadResult
    from timealign.data.synthetic import generate_annotated
    from timealign.data.tictoc import annotated_records
    from timealign.data.tictoc_pairs import build_pair
    from timealign.render.chat import PromptRenderer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    data = DataSection(timestamps=True, elapsed=elapsed)
    renderers = [PromptRenderer.for_data(tokenizer, data), PromptRenderer.for_data(tokenizer, data, timestamps=False)]
    records = generate_annotated(trajectories, seed=seed, split="train", max_rounds=max_rounds)
    rng = random.Random(seed)
    rows = []
    for record in records:
        if record["elapse_level"] != 0:  # the three levels share the history; use it once
            continue
        history, tools = record["history"], record["function"]
        for i, message in enumerate(history):
            if message["role"] == "assistant":
                rows.append(
                    {
                        "prompt": renderers[0].prompt(history[:i], tools),
                        "completion": renderers[0].completion(history[:i], message, tools),
                    }
                )
    if final_turns:
        loaded = LoadResult()
        annotated_records(
            records, "tiny-agent warm-up", loaded, orientation="tool_high", on_error="raise", unknown="error"
        )
        for sample in loaded.samples:
            pair = build_pair(sample, default_margins={}, direct_answer="latest_tool_result")
            reply = pair["chosen" if rng.random() < 0.5 else "rejected"][0]
            renderer = renderers[rng.random() < 0.5]
            rows.append(
                {
                    "prompt": renderer.prompt(pair["prompt"], pair["tools"]),
                    "completion": renderer.completion(pair["prompt"], reply, pair["tools"]),
                }
            )
    args = SFTConfig(
        output_dir=str(Path(out_dir) / "_trainer"),
        learning_rate=learning_rate,
        num_train_epochs=epochs,
        per_device_train_batch_size=8,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        max_length=1024,
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        seed=seed,
        disable_tqdm=False,
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(base_dir),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    trainer.train()
    out = Path(out_dir)
    trainer.save_model(str(out))
    tokenizer.save_pretrained(out)
    shutil.rmtree(out / "_trainer", ignore_errors=True)
    (out / TINY_META).write_text(
        json.dumps(
            {
                "format": TINY_FORMAT_VERSION,
                "seed": seed,
                "warmup_examples": len(rows),
                "epochs": epochs,
                "final_turns": final_turns,
                "elapsed": elapsed,
                "max_rounds": max_rounds,
                "trajectories": trajectories,
            }
        )
    )
    return out


def ensure_tiny_agent(cache_dir: str | os.PathLike | None = None, *, blind: bool = False) -> Path:
    """Return the folder of `tiny-agent` (or `tiny-agent-blind`), building it once (minutes on 2 CPU cores)."""
    import logging

    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    name = TINY_BLIND_AGENT_NAME if blind else TINY_AGENT_NAME
    target = base / f"{name}-v{TINY_FORMAT_VERSION}"

    def build(staging: Path) -> None:
        logging.getLogger(__name__).warning(
            "building %s once: a short format warm-up of the tiny model (a few minutes on CPU; cached in %s)",
            name,
            target,
        )
        build_tiny_agent(staging, ensure_tiny_model(base), **(BLIND_AGENT_SETTINGS if blind else {}))

    return build_once(target, build, TINY_META)
