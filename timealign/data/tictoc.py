"""TicToc loaders, validation and margin-weighted preference pairs.

Three input layouts become one `TicTocSample` list:
- v1 release (`load_v1`): one JSON file per (label, elapse level), `prefer{Tool,NoTool}_elapse_{k}.json`; the last
  user message's `time` is a list with one timestamp per elapse level. Any other .json/.jsonl file in the folder
  (another spelling, such as `prefertool_elapse_1.json`) is an error listing them: its records would be lost.
- annotated (`load_annotated`): JSON list or JSONL, one record per (trajectory, elapse level) carrying the
  annotators' mean score `score` (S in [0, 3]), `elapse_level`, optionally `direct_answer` and `scenario`.
- hub (`timealign.data.hub.load_tictoc_release`): a release as published (hub id or local folder), in either
  layout, detected from its files.

Every record is checked before it becomes a sample; a failed check raises `TicTocFormatError` naming the file and
the record (with `on_error="skip"` the record is rejected with that reason and the rest kept):
- the record is a JSON object with a string `id` (or none), all its text valid UTF-8;
- messages follow the chat order (`CHAT_ORDER`, as OpenAI chat completions accept it): roles are system, user,
  assistant and tool only; at most one system message, and only first; then a user message; an assistant message
  has text, tool calls or both; a tool message answers an unanswered call of the latest assistant message with
  calls (only tool messages stand between), by its `tool_call_id` (and `name`, when given); every call is answered
  before the next user or assistant message; the last message is the user's question. User and assistant
  messages otherwise follow each other freely (two user messages in a row are allowed, as OpenAI allows them);
- a tool call has a unique `id` or none (then the next tool message without a `tool_call_id` answers it), names a
  function declared in the record's tool schemas, and has arguments that are a mapping (given as one, or as a JSON
  or Python-literal dict string as in the v1 release) at most `MAX_ARGUMENT_DEPTH` levels deep; `tool_calls: []`
  on an assistant message is allowed (no call);
- every message has an ISO-8601 time with a timezone (`Z` or an offset), not going backwards; a time without one
  is an error unless `assume_timezone` (the recipe's `data.assume_timezone`) names the zone it is in, and then it
  is rewritten with that zone's offset;
- no record repeats an earlier one: the same (id, elapse level), or the same conversation and tools at the same
  elapse level under another id, is rejected as a duplicate naming the earlier record.

`build_pairs` turns samples into TRL's conversational preference layout: chosen/rejected are a re-issued tool call
and a direct answer, oriented by the label, with offset delta = |S - 1.5| (or a configured value per label).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any, Iterable

from timealign.config import RecipeError
from timealign.config.validate import DIRECT_ANSWERS as DIRECT_ANSWER_STRATEGIES
from timealign.data.records import (
    LoadResult,
    RecordError,
    check_on_error,
    data_files,
    read_records,
    reject_count,
    undecodable,
)
from timealign.data.scenarios import Scenario, UnknownScenarioError, get_scenario, resolve_scenario_id
from timealign.render.chat import parse_tool_arguments

PREFER_TOOL = "prefer_tool"
PREFER_NO_TOOL = "prefer_no_tool"
V1_FILE = re.compile(r"^prefer(Tool|NoTool)_elapse_(\d+)\.json$")
V1_LEVELS = 3  # small, medium, large gap before the final user message
LEVEL_NAMES = ("small", "medium", "large")
ORIENTATIONS = ("tool_high", "tool_low")
ROLES = ("system", "user", "assistant", "tool")
MAX_ARGUMENT_DEPTH = 32  # deeper tool arguments are refused: rendering and pair building recurse through them
CHAT_ORDER = (
    "system? user, then user / assistant turns; an assistant message with tool calls is followed by one "
    "tool message per call (matching tool_call_id; calls without an id in order, answered by tool messages "
    "without one) before the next user or assistant message; the last "
    "message is the user's question"
)


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


def timezone_for(name: str | None) -> tzinfo | None:
    """`data.assume_timezone` as a tzinfo: None (naive times are an error), `UTC`, an IANA name (`Europe/Berlin`)
    or a fixed offset (`+02:00`). An unknown name is a RecipeError."""
    if name is None:
        return None
    text = str(name).strip()
    if text.upper() in ("UTC", "Z"):
        return timezone.utc
    offset = re.fullmatch(r"([+-])(\d\d):?(\d\d)", text)
    if offset:
        sign = 1 if offset.group(1) == "+" else -1
        return timezone(sign * timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3))))
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise RecipeError(
            f"data.assume_timezone={name!r} is not a time zone: use UTC, an IANA name such as "
            "Europe/Berlin (needs the system's tz database or the tzdata package), or an offset such "
            "as +02:00"
        ) from None


def _record_id(record: Any, index: int) -> str:
    """The record's `id` when it is a usable string, else `#<index>` (`_check_record` reports a bad one)."""
    rid = record.get("id") if isinstance(record, dict) else None
    if isinstance(rid, str) and rid.strip() and undecodable(rid) is None:
        return rid
    return f"#{index}"


def _check_record(record: Any, source: str, rid: str) -> None:
    if not isinstance(record, dict):
        raise TicTocFormatError(source, rid, f"record is not a JSON object (got a {type(record).__name__})")
    value = record.get("id")
    if value is not None and not (isinstance(value, str) and value.strip()):
        raise TicTocFormatError(source, rid, f"`id` must be a non-empty string, got {type(value).__name__} {value!r}")
    bad = undecodable(record)
    if bad:
        raise TicTocFormatError(
            source,
            rid,
            f"text that is not valid UTF-8 at {bad} (is the file in another encoding, e.g. Latin-1? save it as UTF-8)",
        )


def _declared_functions(tools: Any, source: str, rid: str) -> set[str]:
    """Names of the functions the record's tool schemas declare (OpenAI `{"type": "function", "function": {...}}`
    or a bare `{"name": ...}`)."""
    if not isinstance(tools, list):
        raise TicTocFormatError(
            source, rid, f"the tool schemas (`function`) must be a list, got {type(tools).__name__}"
        )
    names = set()
    for j, schema in enumerate(tools):
        fn = schema.get("function", schema) if isinstance(schema, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise TicTocFormatError(source, rid, f"tool schema {j} has no function name")
        names.add(name)
    return names


def _depth(value: Any) -> int:
    """Nesting depth of mappings and lists (a scalar: 0), iteratively (the value may be very deep)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
        else:
            continue
        deepest = max(deepest, level + 1)
    return deepest


def _arguments(arguments: Any, source: str, rid: str, where: str) -> None:
    if isinstance(arguments, (dict, list)) and _depth(arguments) > MAX_ARGUMENT_DEPTH:
        raise TicTocFormatError(
            source, rid, f"{where}: tool-call arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
        )
    try:
        parsed = parse_tool_arguments(arguments)
    except ValueError as err:
        raise TicTocFormatError(source, rid, f"{where}: {err}") from None
    except (RecursionError, MemoryError):  # json / ast give up on very deep nesting
        raise TicTocFormatError(
            source,
            rid,
            f"{where}: tool-call arguments nest too deeply to parse (more than "
            f"{MAX_ARGUMENT_DEPTH} levels are refused)",
        ) from None
    if not isinstance(parsed, dict):
        raise TicTocFormatError(
            source,
            rid,
            f"{where}: tool-call arguments must be a mapping of parameter names to "
            f"values, got {type(parsed).__name__}",
        )
    if _depth(parsed) > MAX_ARGUMENT_DEPTH:
        raise TicTocFormatError(
            source, rid, f"{where}: tool-call arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
        )


def _check_tool_calls(history: list[dict], tools: Any, source: str, rid: str) -> None:
    """Each call: on an assistant message, a unique `id` when it has one, a declared function, mapping arguments.

    `tool_calls: []` (an assistant message that makes no call) and a call without an `id` (its result is the next
    tool message without a `tool_call_id`) are allowed: the layout has them, and the paper protocol renders them as
    the authors' handlers do (timealign/render/paper.py)."""
    declared = _declared_functions(tools, source, rid)
    ids: dict[str, int] = {}
    for i, msg in enumerate(history):
        calls = msg.get("tool_calls")
        if calls is None:
            continue
        if msg["role"] != "assistant":
            raise TicTocFormatError(
                source,
                rid,
                f"history[{i}] ({msg['role']}) has tool calls; only assistant messages make them (swapped roles?)",
            )
        if not isinstance(calls, list):
            raise TicTocFormatError(source, rid, f"history[{i}].tool_calls must be a list of calls")
        for j, call in enumerate(calls):
            where = f"history[{i}].tool_calls[{j}]"
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise TicTocFormatError(source, rid, f"history[{i}] has a tool call without a function name")
            if fn["name"] not in declared:
                known = ", ".join(sorted(declared)) or "none"
                raise TicTocFormatError(
                    source,
                    rid,
                    f"{where} calls {fn['name']!r}, which the record's tool schemas "
                    f"do not declare (declared: {known})",
                )
            call_id = call.get("id")
            if call_id is None:
                _arguments(fn.get("arguments"), source, rid, where)
                continue
            if not isinstance(call_id, str) or not call_id:
                raise TicTocFormatError(
                    source, rid, f"{where}: `id` must be a non-empty string (or absent), got {call_id!r}"
                )
            if call_id in ids:
                raise TicTocFormatError(
                    source, rid, f"{where} reuses the call id {call_id!r} of history[{ids[call_id]}]"
                )
            ids[call_id] = i
            _arguments(fn.get("arguments"), source, rid, where)


def _check_order(history: list[dict], source: str, rid: str) -> None:
    """The chat order (module docstring); `_check_tool_calls` has checked the calls themselves."""
    pending: dict[str, str] = {}  # unanswered calls of the latest assistant message with calls: id -> function
    unnamed: list[str] = []  # its unanswered calls without an id, in order: their functions
    calls_at: int | None = None  # that message's index while only tool messages have followed it
    first = 1 if history[0]["role"] == "system" else 0
    for i, msg in enumerate(history):
        role = msg["role"]
        if role not in ROLES:
            raise TicTocFormatError(
                source,
                rid,
                f"history[{i}] has the unknown role {role!r}; roles are "
                f"{', '.join(ROLES)} (a prompt would leave the message out)",
            )
        if role == "system":
            if i != 0:
                raise TicTocFormatError(
                    source,
                    rid,
                    f"history[{i}] is a system message; only the first message may be one (swapped roles?)",
                )
            continue
        if role == "tool":
            if calls_at is None:
                raise TicTocFormatError(
                    source,
                    rid,
                    f"history[{i}] is a tool result with no assistant tool call right before it (swapped roles?)",
                )
            call_id, name = msg.get("tool_call_id"), msg.get("name")
            if call_id is None and unnamed:  # answers the first unanswered call that has no id
                if name is not None and name != unnamed[0]:
                    raise TicTocFormatError(
                        source,
                        rid,
                        f"history[{i}] is named {name!r} but answers (by order: no tool_call_id) the call to "
                        f"{unnamed[0]!r} of history[{calls_at}]",
                    )
                unnamed.pop(0)
                continue
            if call_id not in pending:
                open_ids = ", ".join(map(repr, pending)) or "none left"
                raise TicTocFormatError(
                    source,
                    rid,
                    f"history[{i}] answers tool_call_id {call_id!r}, which is no "
                    f"unanswered call of history[{calls_at}] ({open_ids})",
                )
            if name is not None and name != pending[call_id]:
                raise TicTocFormatError(
                    source, rid, f"history[{i}] is named {name!r} but answers call {call_id!r} to {pending[call_id]!r}"
                )
            del pending[call_id]
            continue
        if pending or unnamed:
            open_calls = [repr(c) for c in pending] + [f"a call to {name!r} without id" for name in unnamed]
            raise TicTocFormatError(
                source,
                rid,
                f"history[{i}] ({role}) comes before every tool call of history"
                f"[{calls_at}] has its result (unanswered: "
                f"{', '.join(open_calls)}); chat order: {CHAT_ORDER}",
            )
        calls_at = None
        if i == first and role != "user":
            raise TicTocFormatError(
                source,
                rid,
                f"history[{i}] is {'an' if role == 'assistant' else 'a'} {role} "
                "message, but the conversation starts with the user's (after an "
                "optional system message; swapped roles?)",
            )
        if role == "assistant":
            if msg.get("tool_calls"):
                pending = {c["id"]: c["function"]["name"] for c in msg["tool_calls"] if c.get("id") is not None}
                unnamed = [c["function"]["name"] for c in msg["tool_calls"] if c.get("id") is None]
                calls_at = i
            elif not (isinstance(msg.get("content"), str) and msg["content"].strip()):
                raise TicTocFormatError(
                    source, rid, f"history[{i}] is an assistant message with neither text nor tool calls"
                )


def _check_history(
    history: Any, source: str, rid: str, final_time_is_list: bool, tools: Any, zone: tzinfo | None = None
) -> list[dict]:
    """Structure, chat order, tool calls and times, shared by every layout; raises TicTocFormatError.

    Returns the history, with times that had no timezone rewritten in `zone` (copies of those messages).
    """
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
    _check_tool_calls(history, tools, source, rid)
    _check_order(history, source, rid)
    history = list(history)
    previous = None
    for i, msg in enumerate(history[:-1]):
        t, written = _parse(msg["time"], source, rid, f"history[{i}].time", zone)
        if written is not msg["time"]:
            history[i] = dict(msg, time=written)
        if previous is not None and t < previous:
            raise TicTocFormatError(source, rid, f"times go backwards at history[{i}] ({msg['time']})")
        previous = t
    final = last["time"]
    if final_time_is_list:
        if not isinstance(final, list) or len(final) != V1_LEVELS:
            got = len(final) if isinstance(final, list) else type(final).__name__
            raise TicTocFormatError(
                source, rid, f"the last message's `time` must list {V1_LEVELS} times (one per elapse level), got {got}"
            )
        parsed = [_parse(t, source, rid, f"final time {k}", zone) for k, t in enumerate(final)]
        times = [t for t, _ in parsed]
        if any(b <= a for a, b in zip(times, times[1:])):
            raise TicTocFormatError(source, rid, "the final user times are not increasing with the elapse level")
        first_final = times[0]
        if any(w is not t for (_, w), t in zip(parsed, final)):
            history[-1] = dict(last, time=[w for _, w in parsed])
    else:
        if isinstance(final, list):
            raise TicTocFormatError(source, rid, "the last message's `time` must be one timestamp in this layout")
        first_final, written = _parse(final, source, rid, "final time", zone)
        if written is not final:
            history[-1] = dict(last, time=written)
    if previous is not None and first_final < previous:
        raise TicTocFormatError(source, rid, "the final user message is earlier than the message before it")
    return history


def _parse(value: Any, source: str, rid: str, what: str, zone: tzinfo | None = None) -> tuple[datetime, Any]:
    """(the time in UTC, the value to keep): the value itself, or when it had no timezone and `zone` is set, the same
    wall-clock time written with that zone's offset (`Z` for UTC)."""
    try:
        if isinstance(value, datetime):
            dt = value
        else:
            text = value.strip()
            dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except (TypeError, ValueError, AttributeError):
        raise TicTocFormatError(source, rid, f"{what} is not an ISO-8601 time: {value!r}") from None
    if dt.tzinfo is not None and dt.utcoffset() is not None:
        return dt.astimezone(timezone.utc), value
    if zone is None:
        raise TicTocFormatError(
            source,
            rid,
            f"{what} has no timezone: {value!r}; write it with Z or an offset "
            "(2024-05-01T09:00:00Z), or set data.assume_timezone (e.g. UTC) to "
            "read such times in that zone",
        )
    aware = dt.replace(tzinfo=zone)
    if isinstance(value, datetime):
        return aware.astimezone(timezone.utc), aware
    written = aware.isoformat()
    return aware.astimezone(timezone.utc), written[:-6] + "Z" if written.endswith("+00:00") else written


def _resolve(record: dict, source: str, rid: str, unknown: str) -> Scenario:
    name = record.get("scenario")
    if name is not None and not isinstance(name, str):
        raise TicTocFormatError(source, rid, f"`scenario` must be a string, got {type(name).__name__} {name!r}")
    try:
        if name:
            try:
                return get_scenario(name)
            except KeyError:
                return resolve_scenario_id(name, unknown=unknown)
        return resolve_scenario_id(rid, unknown=unknown)
    except UnknownScenarioError as err:
        raise TicTocFormatError(source, rid, str(err)) from None


def _unique(result: LoadResult, sample: TicTocSample, position: str, has_id: bool) -> TicTocSample:
    """The sample, unless an earlier kept one has the same (id, elapse level), or the same conversation and tools at
    the same elapse level: then a TicTocFormatError naming both."""
    content = hashlib.sha256(
        json.dumps([sample.history, sample.tools], sort_keys=True, default=str, ensure_ascii=True).encode()
    ).hexdigest()
    id_key = ("tictoc id", sample.id if has_id else (sample.source, sample.id), sample.elapse_level)
    content_key = ("tictoc content", content, sample.elapse_level)
    mine = {
        "source": sample.source,
        "id": sample.id,
        "position": position,
        "label": sample.label,
        "score": sample.score,
        "content": content,
    }
    for key in (id_key, content_key):
        first = result.seen.get(key)
        if first is None:
            continue
        earlier = f"record {first['id']!r} ({first['position']}) of {first['source']}"
        if key is content_key and first["id"] != sample.id:
            how = "the same conversation and tools at the same elapse level under another id"
        elif first["label"] != sample.label:
            how = (
                f"same id and elapse level, but labelled {first['label']} there and {sample.label} here: "
                "contradicting labels"
            )
        elif first["content"] != content:
            how = "same id and elapse level, another conversation (an id names one trajectory per elapse level)"
        elif first["score"] != sample.score:
            how = f"same id, elapse level and conversation, score {first['score']} there and {sample.score} here"
        else:
            how = "an exact copy (same id, elapse level, conversation and label)"
        raise TicTocFormatError(sample.source, sample.id, f"this record ({position}) duplicates {earlier}: {how}")
    result.seen[id_key] = result.seen[content_key] = mine
    return sample


# ---------------------------------------------------------------------------------------------- loaders


def _stray_reason(path: Path) -> str:
    """Why a .json/.jsonl file of a v1 folder is not read."""
    match = V1_FILE.match(path.name)
    if match:
        return f"elapse level {match.group(2)} in the file name; levels are 0-{V1_LEVELS - 1}"
    loose = re.match(V1_FILE.pattern, path.name, re.IGNORECASE)
    if loose:
        kind = "Tool" if loose.group(1).lower() == "tool" else "NoTool"
        return f"differs only in letter case from prefer{kind}_elapse_{loose.group(2)}.json"
    return "matches no prefer{Tool,NoTool}_elapse_{0,1,2}.json name"


def load_v1(
    folder: str | Path,
    *,
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
    orientation: str = "tool_high",
) -> LoadResult[TicTocSample]:
    """The v1 release folder: label and elapse level come from each file's name.

    Every other .json/.jsonl file there is an error listing them all (`on_error="skip"`: one reject per file).
    `assume_timezone`: the zone of times written without one (None: such a time is an error). A record that
    carries its annotators' scores (`score`: their mean S, or `scores`: one per annotator) keeps S, read with
    `orientation`; it must agree with the file's label.
    """
    check_on_error(on_error)
    label_from_score(0.0, orientation)  # validates the orientation up front
    zone = timezone_for(assume_timezone)
    folder = Path(folder)
    candidates = sorted(p for p in folder.glob("*") if p.is_file() and p.suffix.lower() in (".json", ".jsonl"))
    files = [p for p in candidates if V1_FILE.match(p.name) and int(V1_FILE.match(p.name).group(2)) < V1_LEVELS]
    stray = [p for p in candidates if p not in files]
    result = LoadResult()
    if stray:
        if on_error != "skip":
            listed = "; ".join(f"{p.name} ({_stray_reason(p)})" for p in stray)
            raise TicTocFormatError(
                str(folder),
                None,
                f"{len(stray)} data file(s) that a TicToc v1 folder does not hold, so their records "
                f"would be lost: {listed}. v1 files are named exactly "
                "prefer{Tool,NoTool}_elapse_{0,1,2}.json: rename or move the others",
            )
        for path in stray:
            result.reject_file(str(path), f"not a TicToc v1 file name: {_stray_reason(path)}")
    if not files:
        raise FileNotFoundError(f"{folder}: no prefer{{Tool,NoTool}}_elapse_{{k}}.json files (TicToc v1 layout)")
    for path in files:
        kind, level = V1_FILE.match(path.name).groups()
        label, level = (PREFER_TOOL if kind == "Tool" else PREFER_NO_TOOL), int(level)
        source = str(path)
        try:
            entries = read_records(path, TicTocFormatError, jsonl=False)
        except TicTocFormatError as err:
            if on_error != "skip":
                raise
            result.reject(err.source, None, err.reason)
            continue
        for idx, (_, record, _) in enumerate(entries):
            rid = _record_id(record, idx)

            def make(record=record, rid=rid, idx=idx):
                sample = _v1_sample(record, rid, source, label, level, unknown, zone, orientation)
                return _unique(result, sample, f"#{idx}", rid == record.get("id"))

            result.add(on_error, make)
    return result


def _v1_score(record: dict, source: str, rid: str, label: str, orientation: str) -> float | None:
    """The annotators' mean S of a v1 record that carries it (`score`, or `scores` per annotator), else None."""
    if record.get("score") is None and record.get("scores") is None:
        return None
    raw = record.get("score") if record.get("score") is not None else record.get("scores")
    values = raw if isinstance(raw, list) else [raw]
    if not values or any(not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 3 for v in values):
        raise TicTocFormatError(source, rid, f"annotator scores must be numbers in [0, 3], got {raw!r}")
    score = sum(values) / len(values)
    said = label_from_score(score, orientation)
    if said != label:
        raise TicTocFormatError(
            source,
            rid,
            f"score S={score:g} means {said or 'a tie'} with "
            f"data.score_orientation={orientation}, but the file says {label} (set "
            "data.score_orientation to match the release)",
        )
    return score


def _v1_sample(
    record: Any,
    rid: str,
    source: str,
    label: str,
    level: int,
    unknown: str,
    zone: tzinfo | None = None,
    orientation: str = "tool_high",
) -> TicTocSample:
    _check_record(record, source, rid)
    tools = record.get("function")
    tools = [] if tools is None else tools
    history = _check_history(record.get("history"), source, rid, final_time_is_list=True, tools=tools, zone=zone)
    final = dict(history[-1], time=history[-1]["time"][level])
    return TicTocSample(
        id=rid,
        scenario=_resolve(record, source, rid, unknown),
        history=history[:-1] + [final],
        tools=list(tools),
        elapse_level=level,
        label=label,
        source=source,
        score=_v1_score(record, source, rid, label, orientation),
    )


def label_from_score(score: float, orientation: str) -> str | None:
    """Which side of the tie (S = 1.5) the annotators were on; None for an exact tie."""
    if orientation not in ORIENTATIONS:
        raise ValueError(f"score_orientation must be one of {ORIENTATIONS}, got {orientation!r}")
    if score == 1.5:
        return None
    tool_side = score > 1.5 if orientation == "tool_high" else score < 1.5
    return PREFER_TOOL if tool_side else PREFER_NO_TOOL


def _annotated_sample(
    record: Any, rid: str, source: str, orientation: str, unknown: str, zone: tzinfo | None = None
) -> TicTocSample:
    _check_record(record, source, rid)
    tools = record.get("function", record.get("tools"))
    tools = [] if tools is None else tools
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except (json.JSONDecodeError, RecursionError):
            raise TicTocFormatError(
                source, rid, f"the tool schemas are a string that is not JSON: {tools[:80]!r}"
            ) from None
    history = _check_history(record.get("history"), source, rid, final_time_is_list=False, tools=tools, zone=zone)
    level = record.get("elapse_level")
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level < V1_LEVELS:
        raise TicTocFormatError(source, rid, f"`elapse_level` must be 0, 1 or 2, got {level!r}")
    score = record.get("score")
    if not isinstance(score, (int, float)) or isinstance(score, bool) or not 0.0 <= score <= 3.0:
        raise TicTocFormatError(source, rid, f"`score` must be the annotators' mean in [0, 3], got {score!r}")
    stated = record.get("score_orientation")
    if stated is not None and stated != orientation:
        raise TicTocFormatError(
            source,
            rid,
            f"record says score_orientation={stated!r} but the recipe uses {orientation!r} "
            "(set data.score_orientation to match the data)",
        )
    label = label_from_score(float(score), orientation)
    if label is None:
        raise TicTocFormatError(source, rid, "score 1.5 is an exact tie: no preferred action")
    direct = record.get("direct_answer")
    if direct is not None and not isinstance(direct, str):
        raise TicTocFormatError(source, rid, f"`direct_answer` must be a string, got {type(direct).__name__}")
    return TicTocSample(
        id=rid,
        scenario=_resolve(record, source, rid, unknown),
        history=history,
        tools=list(tools),
        elapse_level=level,
        label=label,
        score=float(score),
        direct_answer=direct,
        source=source,
    )


def annotated_records(
    records: Iterable[Any],
    source: str,
    result: LoadResult[TicTocSample] | None = None,
    *,
    orientation: str = "tool_high",
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
    positions: Iterable[str] | None = None,
) -> LoadResult[TicTocSample]:
    """Samples from records already in memory, in the annotated layout (`generate_annotated`'s output, hub rows).

    `source` names them in errors and rejects; a record without an `id` is called `#<index>`. The samples and
    rejects are added to `result` (a new one when None), which is returned; a record repeating one already in
    `result` is a duplicate. `orientation`, `on_error`, `unknown` and `assume_timezone` are as in `load_annotated`;
    `positions` names each record's place in its file for duplicate messages (default `#<index>`).
    """
    check_on_error(on_error)
    zone = timezone_for(assume_timezone)
    result = LoadResult() if result is None else result
    positions = iter(positions) if positions is not None else None
    for idx, record in enumerate(records):
        rid = _record_id(record, idx)
        position = next(positions) if positions is not None else f"#{idx}"

        def make(record=record, rid=rid, position=position):
            sample = _annotated_sample(record, rid, source, orientation, unknown, zone)
            return _unique(result, sample, position, rid == record.get("id"))

        result.add(on_error, make)
    return result


def load_annotated(
    path: str | Path | list[Path],
    *,
    orientation: str = "tool_high",
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
) -> LoadResult[TicTocSample]:
    """A JSON list or JSONL file (or a folder of them, or a list of such files) of annotated records.

    `assume_timezone`: the zone of times written without one (None: such a time is an error).
    """
    check_on_error(on_error)
    label_from_score(0.0, orientation)  # validates the orientation up front
    timezone_for(assume_timezone)
    result = LoadResult()
    for file in path if isinstance(path, list) else data_files(Path(path)):
        source = str(file)
        try:
            entries = read_records(file, TicTocFormatError)
        except TicTocFormatError as err:
            if on_error != "skip":
                raise
            result.reject(source, None, err.reason)
            continue
        records, positions = [], []
        for idx, (line, record, error) in enumerate(entries):
            if error is not None:
                if on_error != "skip":
                    raise TicTocFormatError(source, line, error)
                result.reject(source, line, error)
                continue
            records.append(record)
            positions.append(line or f"#{idx}")
        annotated_records(
            records,
            source,
            result,
            orientation=orientation,
            on_error=on_error,
            unknown=unknown,
            assume_timezone=assume_timezone,
            positions=positions,
        )
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
        "reject_reasons": dict(Counter(r["reason"].split(":")[0] for r in rejects)),
    }


def sample_to_dict(sample: TicTocSample) -> dict:
    out = asdict(sample)
    out["scenario"] = sample.scenario.name
    return out
