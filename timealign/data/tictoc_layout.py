"""The TicToc record layout: what a usable record is, checked before it becomes a `TicTocSample`.

Every record is checked before it becomes a sample; a failed check raises `TicTocFormatError` naming the file and
the record (the loaders, `timealign.data.tictoc`, may instead reject the record with that reason and keep the rest):
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
  is rewritten with that zone's offset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from timealign.config import RecipeError
from timealign.data.records import RecordError, undecodable
from timealign.data.scenarios import Scenario
from timealign.render.chat import parse_tool_arguments

PREFER_TOOL = "prefer_tool"
PREFER_NO_TOOL = "prefer_no_tool"
V1_FILE = re.compile(r"^prefer(Tool|NoTool)_elapse_(\d+)\.json$")
V1_LEVELS = 3  # small, medium, large gap before the final user message
# The files of the v1 release (its elapse level 2 has no prefer-NoTool sample): a folder lacking one is said.
V1_RELEASE_FILES = tuple(
    f"prefer{kind}_elapse_{level}.json" for kind, levels in (("Tool", 3), ("NoTool", 2)) for level in range(levels)
)
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


def label_from_score(score: float, orientation: str) -> str | None:
    """Which side of the tie (S = 1.5) the annotators were on; None for an exact tie."""
    if orientation not in ORIENTATIONS:
        raise ValueError(f"score_orientation must be one of {ORIENTATIONS}, got {orientation!r}")
    if score == 1.5:
        return None
    tool_side = score > 1.5 if orientation == "tool_high" else score < 1.5
    return PREFER_TOOL if tool_side else PREFER_NO_TOOL


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


def record_id(record: Any, index: int) -> str:
    """The record's `id` when it is a usable string, else `#<index>` (`check_record` reports a bad one)."""
    rid = record.get("id") if isinstance(record, dict) else None
    if isinstance(rid, str) and rid.strip() and undecodable(rid) is None:
        return rid
    return f"#{index}"


def check_record(record: Any, source: str, rid: str) -> None:
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


def check_history(
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
