"""TicToc samples as offset-DPO pair rows: TRL's conversational preference layout plus metadata columns.

`build_pairs` turns samples into rows: chosen/rejected are a re-issued tool call and a direct answer, oriented by the
label, with offset delta = |S - 1.5| (or a configured value per label). The `prompt` column keeps each message in
one fixed schema (`prompt_messages`) that still holds what the paper protocol renders differently.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from typing import Any, Iterable

from timealign.config.validate import DIRECT_ANSWERS as DIRECT_ANSWER_STRATEGIES
from timealign.data.records import LoadResult, check_on_error, reject_count, reject_reasons
from timealign.data.tictoc_layout import LEVEL_NAMES, PREFER_TOOL, TicTocFormatError, TicTocSample
from timealign.render.chat import parse_tool_arguments


def _call_function(call: dict) -> tuple[str, Any]:
    fn = call.get("function") or call
    return fn["name"], fn.get("arguments")


def _values(arguments: Any) -> list[str]:
    """Every leaf value of a tool call's arguments, as strings."""
    if isinstance(arguments, dict):
        return [v for value in arguments.values() for v in _values(value)]
    if isinstance(arguments, list):
        return [v for item in arguments for v in _values(item)]
    return [str(arguments)]


def relevant_tool_call(sample: TicTocSample) -> dict:
    """The earlier call to re-issue: the one whose argument values the question mentions most; ties -> latest.

    Returns {"name", "arguments"} with arguments as in the trajectory (JSON string or mapping).
    """
    question = (sample.history[-1].get("content") or "").lower()
    best, best_score = None, -1
    for msg in sample.history:
        for call in msg.get("tool_calls") or []:
            name, arguments = _call_function(call)
            score = sum(1 for v in _values(parse_tool_arguments(arguments)) if v and v.lower() in question)
            if score >= best_score:  # >=: the latest call wins ties
                best, best_score = {"name": name, "arguments": arguments}, score
    if best is None:
        raise TicTocFormatError(sample.source, sample.id, "no earlier tool call to re-issue")
    return best


def tool_call_message(sample: TicTocSample) -> dict:
    call = relevant_tool_call(sample)
    arguments = json.dumps(parse_tool_arguments(call["arguments"]))
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "callretry", "type": "function", "function": {"name": call["name"], "arguments": arguments}}
        ],
    }


def direct_answer_text(sample: TicTocSample, strategy: str = "latest_tool_result") -> str:
    """The sample's own direct answer, or one built by a documented strategy when the data has none.

    latest_tool_result: answer from the most recent tool result, as the agent would without a new call.
    last_assistant_text: repeat the agent's most recent text answer (the stale-context reply).
    generate: a model's answer, written into `sample.direct_answer` by data prep beforehand
    (`timealign.data.generated_answers`); a sample the model would not answer is built with latest_tool_result.
    """
    if sample.direct_answer:
        return sample.direct_answer
    if strategy == "latest_tool_result":
        for msg in reversed(sample.history):
            if msg.get("role") == "tool":
                name = msg.get("name") or "the tool"
                return f"Based on the latest result from {name}: {msg.get('content') or ''}".strip()
        raise TicTocFormatError(sample.source, sample.id, "no tool result to answer from")
    if strategy == "last_assistant_text":
        for msg in reversed(sample.history):
            if msg.get("role") == "assistant" and msg.get("content"):
                return msg["content"]
        raise TicTocFormatError(sample.source, sample.id, "no earlier assistant answer to reuse")
    if strategy == "generate":
        raise ValueError(
            f"{sample.source} {sample.id}: direct_answer=generate needs the generated text in the sample "
            "first (timealign.data.generated_answers.generate_direct_answers, run by data prep)"
        )
    raise ValueError(f"unknown direct-answer strategy {strategy!r}; known: {', '.join(DIRECT_ANSWER_STRATEGIES)}")


def margin_for(sample: TicTocSample, default_margins: dict[str, float]) -> float:
    """delta = |S - 1.5| from the annotators' mean score; the configured per-label value when S is unknown."""
    if sample.score is not None:
        return abs(sample.score - 1.5)
    return float(default_margins[sample.label])


def _message_record(msg: dict) -> dict:
    """A fixed message schema, so Arrow stores every message alike, keeping what the paper protocol renders.

    The data's own shape survives (the authors' handlers render each differently): `tool_calls` absent (None) vs
    an empty list; a call's `id` absent (None); arguments given as a string (kept as written, even a Python-literal
    one) vs as a mapping (stored as its JSON text, with `arguments_mapping` true, since one Arrow column cannot hold
    both; `json.loads` gives the mapping back exactly, as it was read from JSON)."""
    calls = None
    if msg.get("tool_calls") is not None:
        calls = []
        for call in msg["tool_calls"]:
            name, arguments = _call_function(call)
            mapping = isinstance(arguments, dict)
            raw = json.dumps(arguments, ensure_ascii=False) if mapping else arguments
            calls.append(
                {
                    "id": call.get("id"),
                    "type": "function",
                    "function": {"name": name, "arguments": raw},
                    "arguments_mapping": mapping,
                }
            )
    return {
        "role": msg["role"],
        "content": msg.get("content"),
        "time": msg.get("time"),
        "tool_calls": calls,
        "tool_call_id": msg.get("tool_call_id"),
        "name": msg.get("name"),
    }


def prompt_messages(sample: TicTocSample) -> list[dict]:
    """The pair's `prompt` column: the sample's history in the fixed message schema (what training renders)."""
    return [_message_record(m) for m in sample.history]


def build_pair(sample: TicTocSample, *, default_margins: dict[str, float], direct_answer: str) -> dict:
    """One row of TRL's conversational preference layout plus our metadata columns."""
    tool = tool_call_message(sample)
    direct = {"role": "assistant", "content": direct_answer_text(sample, direct_answer)}
    chosen, rejected = (tool, direct) if sample.label == PREFER_TOOL else (direct, tool)
    return {
        "prompt": prompt_messages(sample),
        "chosen": [_message_record(chosen)],
        "rejected": [_message_record(rejected)],
        "tools": json.dumps(sample.tools),
        "margin": margin_for(sample, default_margins),
        "id": sample.id,
        "scenario": sample.scenario.name,
        "sensitivity": sample.scenario.sensitivity,
        "split": sample.scenario.split,
        "elapse_level": sample.elapse_level,
        "label": sample.label,
        "score": sample.score,
        "num_turns": sample.num_turns,
        "source": sample.source,
    }


def build_pairs(
    samples: Iterable[TicTocSample],
    *,
    default_margins: dict[str, float],
    direct_answer: str = "latest_tool_result",
    min_margin: float = 0.0,
    on_error: str = "raise",
) -> LoadResult[dict]:
    """Pairs for every sample; `samples` of the result hold the pair rows (dicts)."""
    check_on_error(on_error)
    result = LoadResult()
    for sample in samples:
        if sample.score is not None and abs(sample.score - 1.5) < min_margin:
            result.reject(sample.source, sample.id, f"annotator margin |S-1.5| below min_margin {min_margin}")
            continue
        result.add(
            on_error, lambda s=sample: build_pair(s, default_margins=default_margins, direct_answer=direct_answer)
        )
    return result


def manifest(rows: list[dict], rejects: list[dict]) -> dict:
    """Counts per split, label and elapse level, plus the rejects with their reasons."""
    per_split: dict[str, Any] = {}
    for split in sorted({r["split"] for r in rows}):
        in_split = [r for r in rows if r["split"] == split]
        per_split[split] = {
            "pairs": len(in_split),
            "by_label": dict(Counter(r["label"] for r in in_split)),
            "by_elapse_level": {
                LEVEL_NAMES[k]: v for k, v in sorted(Counter(r["elapse_level"] for r in in_split).items())
            },
            "by_sensitivity": dict(Counter(r["sensitivity"] for r in in_split)),
            "scenarios": len({r["scenario"] for r in in_split}),
        }
    return {
        "pairs": len(rows),
        "splits": per_split,
        "rejects": reject_count(rejects),  # records: a rejected file counts the records it holds
        "reject_reasons": reject_reasons(rejects),
    }


def sample_to_dict(sample: TicTocSample) -> dict:
    out = asdict(sample)
    out["scenario"] = sample.scenario.name
    return out
