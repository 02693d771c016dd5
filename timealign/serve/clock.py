"""The gateway's clock: the time of every message of every conversation, kept in an embedded SQLite file.

The chat API has no time per message, but a timealign checkpoint reads one in front of each message. A message's time
is the client's (its `timestamp` field) or else the moment the gateway first saw it; a message seen again (the client
resends the history with each request) keeps the time it got the first time, so the gaps the model reads are the
real ones, and a restart of the gateway loses no clock: the times live in SQLite, not in memory.

A message is known by its conversation and everything up to it: the key of message i is a chained SHA-256 over the
conversation id (the `X-Conversation-Id` header, or "" without one) and the canonical form of messages 0..i (role,
text, tool-call names and arguments, never times or ids). Without the header the history is the identity: two
conversations with identical histories so far share their times. The gateway's own replies are recorded at the time
they were generated (the reply's stamp in the prompt), so when the client sends one back it keeps that time.

Times are UTC: the system wall clock (`time.time()`), and a client timestamp with a UTC offset converted to UTC
(ISO 8601; one without an offset is taken as UTC; a number is Unix seconds). Arrival times are kept in whole seconds
(`2025-08-11T14:02:57Z`, what the prompt shows); a client's ISO string is kept as written (the `paper` protocol
prints it as given, as the TicToc authors' code did).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from timealign.config.options import RecipeError
from timealign.render.chat import parse_tool_arguments
from timealign.render.timefmt import format_time, parse_time

MEMORY = ":memory:"  # store=:memory: keeps the clock in memory only (lost on restart)
SCHEMA = "CREATE TABLE IF NOT EXISTS message_time (key TEXT PRIMARY KEY, time TEXT NOT NULL, seen REAL NOT NULL)"


class ClockError(ValueError):
    """A client timestamp that cannot be read, or times out of order; the request gets a 400."""


def canonical(message: dict) -> str:
    """The parts of a message that identify it, whatever form the client sends it back in."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or call
        try:
            arguments = parse_tool_arguments(fn.get("arguments"))
        except ValueError:
            arguments = fn.get("arguments")
        calls.append([fn.get("name"), arguments])
    return json.dumps([message.get("role"), message.get("content") or "", calls], ensure_ascii=False, sort_keys=True)


def message_keys(conversation: str, messages: list[dict]) -> list[str]:
    """The chained key of each message (see the module docstring)."""
    keys, digest = [], hashlib.sha256(conversation.encode("utf-8")).hexdigest()
    for message in messages:
        digest = hashlib.sha256((digest + "\x00" + canonical(message)).encode("utf-8")).hexdigest()
        keys.append(digest)
    return keys


def client_time(value: Any, index: int) -> str:
    """A message's `timestamp` field as the time string the renderers read: an ISO string as the client wrote it
    (checked; the `timealign` protocol shows it in UTC, the `paper` protocol as written, as the authors' code did),
    Unix seconds as `2025-08-11T14:02:57Z`."""
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, (int, float)):
            return format_time(datetime.fromtimestamp(float(value), tz=timezone.utc))
        if isinstance(value, str):
            parse_time(value)
            return value
        raise TypeError
    except (TypeError, ValueError, OverflowError, OSError):
        raise ClockError(
            f"messages[{index}].timestamp must be an ISO 8601 time (2025-08-11T14:02:57Z) or Unix seconds, "
            f"got {value!r}"
        ) from None


def now_utc() -> datetime:
    return datetime.fromtimestamp(time.time(), tz=timezone.utc)


class StoreError(RecipeError):
    """`store=` names no file the clock can use: not a SQLite database, another program's database, a folder."""


class ClockStore:
    """Message times in SQLite (`path`, or ":memory:"), safe to share between the server's threads. A path that
    cannot hold them is a StoreError naming `store=` (one line, exit 2) before the gateway binds its port."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = None
        try:
            if self.path != MEMORY:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables - {"message_time"}:  # another program's database: neither add to it nor change its journal
                self._refuse(f"a SQLite database of another program, with tables {', '.join(sorted(tables))}")
            self._db.execute("PRAGMA journal_mode=WAL" if self.path != MEMORY else "PRAGMA journal_mode=MEMORY")
            self._db.execute(SCHEMA)
        except (sqlite3.Error, OSError) as err:  # sqlite3 names neither the file nor the option
            self._refuse(f"{type(err).__name__}: {err}")

    def _refuse(self, why: str) -> None:
        if self._db is not None:
            self._db.close()
        raise StoreError(
            f"store={self.path} cannot hold the gateway's clock ({why}): give a new file (it is created) or the "
            f"store of an earlier `timealign serve`; store={MEMORY} keeps the times in memory only"
        ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _get(self, keys: list[str]) -> dict[str, str]:
        found = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            rows = self._db.execute(
                f"SELECT key, time FROM message_time WHERE key IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
            found.update(rows)
        return found

    def stamp(self, conversation: str, messages: list[dict], now: datetime | None = None) -> list[str | None]:
        """The ISO time of each message (None for a system message without a client timestamp), recording new ones.

        Client timestamps win (and are recorded); a message seen before keeps its recorded time; any other message
        gets `now`, its arrival. Times must not go backwards from one timed message to the next (ClockError)."""
        now = now or now_utc()
        keys = message_keys(conversation, messages)
        times: list[str | None] = []
        with self._lock:
            known = self._get(keys)
            new = []
            for i, (message, key) in enumerate(zip(messages, keys)):
                given = message.get("timestamp")
                if given is not None:
                    value = client_time(given, i)
                    new.append((key, value))
                elif key in known:
                    value = known[key]
                elif message.get("role") == "system":
                    value = None  # the renderer stamps no system message; its time would only move the template date
                else:
                    value = format_time(now)
                    new.append((key, value))
                times.append(value)
            previous = None
            for i, value in enumerate(times):
                if value is None:
                    continue
                if previous is not None and parse_time(value) < parse_time(previous[1]):
                    raise ClockError(
                        f"messages[{i}] is timed {value}, before messages[{previous[0]}] ({previous[1]}): message "
                        "times must not go backwards"
                    )
                previous = (i, value)
            self._put(new)
        return times

    def record_reply(self, conversation: str, messages: list[dict], reply: dict, time_iso: str) -> None:
        """Remember the gateway's reply to `messages` at `time_iso`, for when the client sends it back."""
        key = message_keys(conversation, [*messages, reply])[-1]
        with self._lock:
            self._put([(key, time_iso)])

    def _put(self, rows: list[tuple[str, str]]) -> None:
        if rows:
            seen = time.time()
            self._db.executemany(
                "INSERT OR REPLACE INTO message_time (key, time, seen) VALUES (?, ?, ?)",
                [(key, value, seen) for key, value in rows],
            )
