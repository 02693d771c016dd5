"""Time stamps and gaps as the model reads them: ISO-8601 stamps `[2025-12-04T10:22:44Z]` and the elapsed badge."""

from __future__ import annotations

from datetime import datetime, timezone

ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def parse_time(value: str | datetime) -> datetime:
    """ISO-8601 (trailing Z allowed) to an aware UTC datetime; naive times are taken as UTC."""
    if isinstance(value, datetime):
        dt = value
    else:
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def format_time(value: str | datetime) -> str:
    """ISO-8601 in UTC with a Z, whole seconds: `2025-12-04T10:22:44Z` (naive times are taken as UTC)."""
    return parse_time(value).strftime(ISO_FORMAT)


def format_timestamp(value: str | datetime) -> str:
    """The stamp placed at the start of a message: `[2025-12-04T10:22:44Z]`."""
    return "[" + format_time(value) + "]"


# Units of the elapsed-time badge, largest first (30-day months, 365-day years: the badge is a reading aid).
_ELAPSED_UNITS = (
    ("year", 365 * 86400),
    ("month", 30 * 86400),
    ("day", 86400),
    ("hour", 3600),
    ("minute", 60),
    ("second", 1),
)


def format_elapsed(seconds: float) -> str:
    """A gap as its two largest non-zero units, rounded down: `3 minutes 13 seconds`, `2 months 4 days`."""
    if seconds < 0:
        raise ValueError(f"elapsed time is negative ({seconds} s): messages are out of order")
    rest, parts = int(seconds), []
    for unit, size in _ELAPSED_UNITS:
        n, rest = divmod(rest, size)
        if n and len(parts) < 2:
            parts.append(f"{n} {unit}" + ("" if n == 1 else "s"))
        elif parts:  # stop after the first zero below the leading unit: "1 day 5 seconds" would mislead
            break
    return " ".join(parts) or "0 seconds"


def elapsed_badge(messages: list[dict], now: str | datetime) -> str:
    """` (+3 minutes 13 seconds since the last tool result)`, or "" when no tool result carries a time."""
    last = next((m.get("time") for m in reversed(messages) if m.get("role") == "tool" and m.get("time")), None)
    if last is None:
        return ""
    return f" (+{format_elapsed((parse_time(now) - parse_time(last)).total_seconds())} since the last tool result)"
