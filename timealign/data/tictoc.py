"""TicToc loaders, validation and margin-weighted preference pairs.

Three input layouts become one `TicTocSample` list:
- v1 release (`load_v1`): one JSON file per (label, elapse level), `prefer{Tool,NoTool}_elapse_{k}.json`; the last
  user message's `time` is a list with one timestamp per elapse level.
- annotated (`load_annotated`): JSON list or JSONL, one record per (trajectory, elapse level) carrying the
  annotators' mean score `score` (S in [0, 3]), `elapse_level`, optionally `direct_answer` and `scenario`.
- hub (`load_hub`): `datasets.load_dataset(path)` rows in the annotated layout.

`build_pairs` turns samples into TRL's conversational preference layout: chosen/rejected are a re-issued tool call
and a direct answer, oriented by the label, with offset delta = |S - 1.5| (or a configured value per label).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from timealign.data.records import LoadResult, RecordError, check_on_error, data_files
from timealign.data.scenarios import Scenario, UnknownScenarioError, get_scenario, resolve_scenario_id
from timealign.render.timefmt import parse_time
from timealign.render.chat import parse_tool_arguments

PREFER_TOOL = "prefer_tool"
PREFER_NO_TOOL = "prefer_no_tool"
V1_FILE = re.compile(r"^prefer(Tool|NoTool)_elapse_(\d+)\.json$")
V1_LEVELS = 3  # small, medium, large gap before the final user message
LEVEL_NAMES = ("small", "medium", "large")
ORIENTATIONS = ("tool_high", "tool_low")


class TicTocFormatError(RecordError):
    """A TicToc record that cannot be used; the message names the file and the record id."""


@dataclass
class TicTocSample:
    id: str
    scenario: Scenario
    history: list[dict]  # OpenAI-style messages with ISO `time`; the last is the user's question (one time)
    tools: list[dict]
    elapse_level: int
    label: str  # prefer_tool | prefer_no_tool
    score: float | None = None  # annotators' mean S in [0, 3] (orientation: see DataSection.score_orientation)
    direct_answer: str | None = None
    source: str = ""

    @property
    def num_turns(self) -> int:
        """Messages other than the system prompt (the paper's length buckets: <=7, 8-12, >=13)."""
        return sum(1 for m in self.history if m.get("role") != "system")


# ---------------------------------------------------------------------------------------------- validation


def _check_history(history: Any, source: str, rid: str, final_time_is_list: bool) -> None:
    """Structure and time checks shared by every layout; raises TicTocFormatError."""
    if not isinstance(history, list) or not history:
        raise TicTocFormatError(source, rid, "`history` is missing or not a non-empty list of messages")
    for i, msg in enumerate(history):
        if not isinstance(msg, dict) or "role" not in msg:
            raise TicTocFormatError(source, rid, f"history[{i}] is not a message with a `role`")
        if "time" not in msg or msg["time"] in (None, "", []):
            raise TicTocFormatError(source, rid, f"history[{i}] ({msg['role']}) has no `time`")
    last = history[-1]
    if last["role"] != "user":
        raise TicTocFormatError(source, rid, f"the last message must be the user's question, got {last['role']!r}")
    previous = None
    for i, msg in enumerate(history[:-1]):
        t = _parse(msg["time"], source, rid, f"history[{i}].time")
        if previous is not None and t < previous:
            raise TicTocFormatError(source, rid, f"times go backwards at history[{i}] ({msg['time']})")
        previous = t
    final = last["time"]
    if final_time_is_list:
        if not isinstance(final, list) or len(final) != V1_LEVELS:
            got = len(final) if isinstance(final, list) else type(final).__name__
            raise TicTocFormatError(
                source, rid, f"the last message's `time` must list {V1_LEVELS} times (one per elapse level), got {got}")
        times = [_parse(t, source, rid, f"final time {k}") for k, t in enumerate(final)]
        if any(b <= a for a, b in zip(times, times[1:])):
            raise TicTocFormatError(source, rid, "the final user times are not increasing with the elapse level")
        first_final = times[0]
    else:
        if isinstance(final, list):
            raise TicTocFormatError(source, rid, "the last message's `time` must be one timestamp in this layout")
        first_final = _parse(final, source, rid, "final time")
    if previous is not None and first_final < previous:
        raise TicTocFormatError(source, rid, "the final user message is earlier than the message before it")


def _parse(value: Any, source: str, rid: str, what: str):
    try:
        return parse_time(value)
    except (TypeError, ValueError, AttributeError):
        raise TicTocFormatError(source, rid, f"{what} is not an ISO-8601 time: {value!r}") from None


def _check_tool_calls(history: list[dict], source: str, rid: str) -> None:
    for i, msg in enumerate(history):
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not fn.get("name"):
                raise TicTocFormatError(source, rid, f"history[{i}] has a tool call without a function name")
            try:
                parse_tool_arguments(fn.get("arguments"))
            except ValueError as err:
                raise TicTocFormatError(source, rid, f"history[{i}]: {err}") from None


def _resolve(record: dict, source: str, rid: str, unknown: str) -> Scenario:
    name = record.get("scenario")
    try:
        if name:
            try:
                return get_scenario(name)
            except KeyError:
                return resolve_scenario_id(name, unknown=unknown)
        return resolve_scenario_id(rid, unknown=unknown)
    except UnknownScenarioError as err:
        raise TicTocFormatError(source, rid, str(err)) from None


# ---------------------------------------------------------------------------------------------- loaders


def _read_json_list(path: Path) -> list:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as err:
        raise TicTocFormatError(str(path), None, f"malformed JSON: {err}") from None
    if not isinstance(data, list):
        raise TicTocFormatError(str(path), None, "expected a JSON list of records")
    return data


def load_v1(folder: str | Path, *, on_error: str = "raise", unknown: str = "error") -> LoadResult[TicTocSample]:
    """The v1 release folder: label and elapse level come from each file's name."""
    check_on_error(on_error)
    folder = Path(folder)
    files = sorted(p for p in folder.glob("*.json") if V1_FILE.match(p.name))
    if not files:
        raise FileNotFoundError(f"{folder}: no prefer{{Tool,NoTool}}_elapse_{{k}}.json files (TicToc v1 layout)")
    result = LoadResult()
    for path in files:
        kind, level = V1_FILE.match(path.name).groups()
        label, level = (PREFER_TOOL if kind == "Tool" else PREFER_NO_TOOL), int(level)
        source = str(path)
        if level >= V1_LEVELS:
            raise TicTocFormatError(source, None, f"elapse level {level} in the file name; levels are 0-{V1_LEVELS - 1}")
        try:
            records = _read_json_list(path)
        except TicTocFormatError as err:
            if on_error != "skip":
                raise
            result.reject(source, None, err.reason)
            continue
        for idx, record in enumerate(records):
            rid = record.get("id") if isinstance(record, dict) else None
            rid = rid if rid is not None else f"#{idx}"
            result.add(on_error, lambda r=record, rid=rid: _v1_sample(r, rid, source, label, level, unknown))
    return result


def _v1_sample(record: Any, rid: str, source: str, label: str, level: int, unknown: str) -> TicTocSample:
    if not isinstance(record, dict):
        raise TicTocFormatError(source, rid, "record is not a JSON object")
    history = record.get("history")
    _check_history(history, source, rid, final_time_is_list=True)
    _check_tool_calls(history, source, rid)
    final = dict(history[-1], time=history[-1]["time"][level])
    return TicTocSample(
        id=rid, scenario=_resolve(record, source, rid, unknown), history=history[:-1] + [final],
        tools=list(record.get("function") or []), elapse_level=level, label=label, source=source,
    )


def label_from_score(score: float, orientation: str) -> str | None:
    """Which side of the tie (S = 1.5) the annotators were on; None for an exact tie."""
    if orientation not in ORIENTATIONS:
        raise ValueError(f"score_orientation must be one of {ORIENTATIONS}, got {orientation!r}")
    if score == 1.5:
        return None
    tool_side = score > 1.5 if orientation == "tool_high" else score < 1.5
    return PREFER_TOOL if tool_side else PREFER_NO_TOOL


def _annotated_sample(record: Any, rid: str, source: str, orientation: str, unknown: str) -> TicTocSample:
    if not isinstance(record, dict):
        raise TicTocFormatError(source, rid, "record is not a JSON object")
    history = record.get("history")
    _check_history(history, source, rid, final_time_is_list=False)
    _check_tool_calls(history, source, rid)
    level = record.get("elapse_level")
    if not isinstance(level, int) or not 0 <= level < V1_LEVELS:
        raise TicTocFormatError(source, rid, f"`elapse_level` must be 0, 1 or 2, got {level!r}")
    score = record.get("score")
    if not isinstance(score, (int, float)) or not 0.0 <= score <= 3.0:
        raise TicTocFormatError(source, rid, f"`score` must be the annotators' mean in [0, 3], got {score!r}")
    stated = record.get("score_orientation")
    if stated is not None and stated != orientation:
        raise TicTocFormatError(
            source, rid, f"record says score_orientation={stated!r} but the recipe uses {orientation!r} "
                         "(set data.score_orientation to match the data)")
    label = label_from_score(float(score), orientation)
    if label is None:
        raise TicTocFormatError(source, rid, "score 1.5 is an exact tie: no preferred action")
    tools = record.get("function", record.get("tools")) or []
    if isinstance(tools, str):
        tools = json.loads(tools)
    return TicTocSample(
        id=rid, scenario=_resolve(record, source, rid, unknown), history=history, tools=list(tools),
        elapse_level=level, label=label, score=float(score), direct_answer=record.get("direct_answer"), source=source,
    )


def annotated_records(records: Iterable[Any], source: str, result: LoadResult[TicTocSample] | None = None, *,
                      orientation: str = "tool_high", on_error: str = "raise",
                      unknown: str = "error") -> LoadResult[TicTocSample]:
    """Samples from records already in memory, in the annotated layout (`generate_annotated`'s output, hub rows).

    `source` names them in errors and rejects; a record without an `id` is called `#<index>`. The samples and
    rejects are added to `result` (a new one when None), which is returned. `orientation`, `on_error` and `unknown`
    are as in `load_annotated`.
    """
    check_on_error(on_error)
    result = LoadResult() if result is None else result
    for idx, record in enumerate(records):
        rid = record.get("id") if isinstance(record, dict) else None
        rid = rid if rid is not None else f"#{idx}"
        result.add(on_error, lambda r=record, rid=rid: _annotated_sample(r, rid, source, orientation, unknown))
    return result


def load_annotated(path: str | Path, *, orientation: str = "tool_high", on_error: str = "raise",
                   unknown: str = "error") -> LoadResult[TicTocSample]:
    """A JSON list or JSONL file (or a folder of them) of annotated records."""
    check_on_error(on_error)
    label_from_score(0.0, orientation)  # validates the orientation up front
    result = LoadResult()
    for file in data_files(Path(path)):
        source = str(file)
        if file.suffix == ".jsonl":
            records = []
            with open(file, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as err:
                        if on_error != "skip":
                            raise TicTocFormatError(source, f"line {lineno}", f"malformed JSON: {err}") from None
                        result.reject(source, f"line {lineno}", f"malformed JSON: {err}")
        else:
            try:
                records = _read_json_list(file)
            except TicTocFormatError as err:
                if on_error != "skip":
                    raise
                result.reject(source, None, err.reason)
                continue
        annotated_records(records, source, result, orientation=orientation, on_error=on_error, unknown=unknown)
    return result


def load_hub(path: str, *, split: str = "train", orientation: str = "tool_high", on_error: str = "raise",
             unknown: str = "error") -> LoadResult[TicTocSample]:
    """`datasets.load_dataset(path, split=split)` rows in the annotated layout (hub id or local path)."""
    from datasets import load_dataset

    check_on_error(on_error)
    rows = load_dataset(path, split=split)
    result = LoadResult()
    annotated_records(rows, f"{path}[{split}]", result, orientation=orientation, on_error=on_error, unknown=unknown)
    return result


# ---------------------------------------------------------------------------------------------- pairs


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
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_retry", "type": "function",
                            "function": {"name": call["name"], "arguments": arguments}}]}


DIRECT_ANSWER_STRATEGIES = ("latest_tool_result", "last_assistant_text")


def direct_answer_text(sample: TicTocSample, strategy: str = "latest_tool_result") -> str:
    """The sample's own direct answer, or one built by a documented strategy when the data has none.

    latest_tool_result: answer from the most recent tool result, as the agent would without a new call.
    last_assistant_text: repeat the agent's most recent text answer (the stale-context reply).
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
    raise ValueError(f"unknown direct-answer strategy {strategy!r}; known: {', '.join(DIRECT_ANSWER_STRATEGIES)}")


def margin_for(sample: TicTocSample, default_margins: dict[str, float]) -> float:
    """delta = |S - 1.5| from the annotators' mean score; the configured per-label value when S is unknown."""
    if sample.score is not None:
        return abs(sample.score - 1.5)
    return float(default_margins[sample.label])


def _message_record(msg: dict) -> dict:
    """A fixed message schema, so Arrow stores every message alike (tool-call arguments stay JSON strings)."""
    calls = None
    if msg.get("tool_calls"):
        calls = []
        for call in msg["tool_calls"]:
            name, arguments = _call_function(call)
            calls.append({"id": call.get("id") or "", "type": "function",
                          "function": {"name": name, "arguments": json.dumps(parse_tool_arguments(arguments))}})
    return {"role": msg["role"], "content": msg.get("content"), "time": msg.get("time"), "tool_calls": calls,
            "tool_call_id": msg.get("tool_call_id"), "name": msg.get("name")}


def build_pair(sample: TicTocSample, *, default_margins: dict[str, float], direct_answer: str) -> dict:
    """One row of TRL's conversational preference layout plus our metadata columns."""
    tool = tool_call_message(sample)
    direct = {"role": "assistant", "content": direct_answer_text(sample, direct_answer)}
    chosen, rejected = (tool, direct) if sample.label == PREFER_TOOL else (direct, tool)
    return {
        "prompt": [_message_record(m) for m in sample.history],
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


def build_pairs(samples: Iterable[TicTocSample], *, default_margins: dict[str, float],
                direct_answer: str = "latest_tool_result", min_margin: float = 0.0,
                on_error: str = "raise") -> LoadResult[dict]:
    """Pairs for every sample; `samples` of the result hold the pair rows (dicts)."""
    check_on_error(on_error)
    result = LoadResult()
    for sample in samples:
        if sample.score is not None and abs(sample.score - 1.5) < min_margin:
            result.reject(sample.source, sample.id, f"annotator margin |S-1.5| below min_margin {min_margin}")
            continue
        result.add(on_error, lambda s=sample: build_pair(s, default_margins=default_margins,
                                                         direct_answer=direct_answer))
    return result


def manifest(rows: list[dict], rejects: list[dict]) -> dict:
    """Counts per split, label and elapse level, plus the rejects with their reasons."""
    per_split: dict[str, Any] = {}
    for split in sorted({r["split"] for r in rows}):
        in_split = [r for r in rows if r["split"] == split]
        per_split[split] = {
            "pairs": len(in_split),
            "by_label": dict(Counter(r["label"] for r in in_split)),
            "by_elapse_level": {LEVEL_NAMES[k]: v for k, v in sorted(Counter(r["elapse_level"] for r in in_split).items())},
            "by_sensitivity": dict(Counter(r["sensitivity"] for r in in_split)),
            "scenarios": len({r["scenario"] for r in in_split}),
        }
    return {
        "pairs": len(rows),
        "splits": per_split,
        "rejects": len(rejects),
        "reject_reasons": dict(Counter(r["reason"].split(":")[0] for r in rejects)),
    }


def sample_to_dict(sample: TicTocSample) -> dict:
    out = asdict(sample)
    out["scenario"] = sample.scenario.name
    return out
