"""Typed options from `key=value` text: dataclasses with help on each field, merged and checked by OmegaConf.

Every configurable thing in timealign is a dataclass whose fields carry their help text
(`field(default=..., metadata={"help": "..."})`, TRL's convention): recipe sections, a command's own options, a
suite's options. `build_options(cls, {"n": "200"})` turns command-line text into an instance:

- values are read by the field's declared type (`1e-6` is a float, `save_strategy=no` stays the string "no",
  `null`/`none` is None, `[a,b]` is a list), so YAML 1.1's surprises (`no` -> False) never reach a field;
- OmegaConf's structured configs then merge them onto the dataclass defaults and check every key and type;
- an unknown key fails with close matches and the list of valid keys;
- a field declared with `choices` (`metadata={"choices": (...)}`, `timealign.config.schema.opt`) refuses any other
  value, with a did-you-mean.

`describe(cls)` renders the fields and their help for `--help`.
"""

from __future__ import annotations

import dataclasses
import difflib
import textwrap
import types
import typing
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException


class RecipeError(ValueError):
    """A recipe, option or override the user wrote is wrong; the message says how to fix it."""


def field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def strip_optional(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def read_loose(text: str) -> Any:
    """A string for a loosely typed field: numbers, true/false, [lists] and {maps}; anything else stays text.

    Not plain YAML: YAML 1.1 reads `no` as False, and `save_strategy=no` must stay the string "no".
    """
    stripped = text.strip()
    if stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if stripped[:1] in ("[", "{"):
        return yaml.safe_load(stripped)
    for cast in (int, float):
        try:
            return cast(stripped)
        except ValueError:
            pass
    return text


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML/CLI value to a field's declared type (YAML reads `1e-6` as a string, for example)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("null", "none", "~"):
        return None
    base = strip_optional(tp)
    try:
        if base is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if base is int and not isinstance(value, bool):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(f"not an integer: {value!r}")
            return int(value)
        if base is float:
            return float(value)
        if base is str:
            return str(value)
        if base in (list, dict) or typing.get_origin(base) in (list, dict):
            if isinstance(value, str):
                value = yaml.safe_load(value)
            return value
    except (TypeError, ValueError) as err:
        raise RecipeError(f"{where}: cannot read {value!r} as {getattr(base, '__name__', base)}: {err}") from None
    return read_loose(value) if isinstance(value, str) else value


def unknown_key(where: str, key: str, valid: list[str]) -> RecipeError:
    close = difflib.get_close_matches(key, valid, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return RecipeError(f"unknown key '{where}{key}'.{hint} Valid keys here: {', '.join(sorted(valid))}")


def typed_tree(cls, updates: dict, where: str = "") -> dict:
    """Nested `updates` with every leaf coerced to its field's type; unknown keys fail here, with suggestions.

    A field typed `dict` (free-form, like a recipe's `training`) keeps its keys; their values are read loosely.
    """
    types_ = field_types(cls)
    out: dict = {}
    for key, value in updates.items():
        if key not in types_:
            raise unknown_key(where, key, list(types_))
        tp = strip_optional(types_[key])
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise RecipeError(f"{where}{key} is a section; set its fields, e.g. {where}{key}.<field>=...")
            out[key] = typed_tree(tp, value, f"{where}{key}.")
        elif tp is dict and isinstance(value, dict):
            out[key] = {k: read_loose(v) if isinstance(v, str) else v for k, v in value.items()}
        else:
            out[key] = coerce(value, types_[key], f"{where}{key}")
    return out


def suggest(value: str, known: list[str] | tuple[str, ...]) -> str:
    """` (did you mean: x?)` for the known values closest to `value` (letter case ignored), else ``."""
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(str(value).lower(), list(lowered), n=2, cutoff=0.5)
    return f" (did you mean: {', '.join(lowered[c] for c in close)}?)" if close else ""


def choice_problems(obj: Any, where: str = "") -> list[str]:
    """`key='value' is not one of: ...` for every field of the dataclass instance `obj` (nested ones included) whose
    value is not among its declared `choices` (None is "unset" and passes)."""
    problems = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        choices = f.metadata.get("choices") if f.metadata else None
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            problems += choice_problems(value, f"{where}{f.name}.")
        elif choices and value is not None and value not in choices:
            problems.append(f"{where}{f.name}={value!r} is not one of: {', '.join(choices)}{suggest(value, choices)}")
    return problems


def dotted_to_nested(pairs: dict[str, Any]) -> dict:
    """{"data.seed": "1"} -> {"data": {"seed": "1"}}."""
    nested: dict = {}
    for dotted, value in pairs.items():
        node = nested
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise RecipeError(f"override {dotted!r} conflicts with another override")
        if isinstance(node.get(parts[-1]), dict):
            raise RecipeError(f"override {dotted!r} conflicts with another override")
        node[parts[-1]] = value
    return nested


def merge(cls, *layers: dict, where: str = "") -> Any:
    """Merge nested layers (YAML files, then overrides) onto `cls`'s defaults; returns a `cls` instance.

    Each layer is type-read by `typed_tree` first; OmegaConf then merges and validates the result.
    """
    try:
        config = OmegaConf.structured(cls)
        for layer in layers:
            config = OmegaConf.merge(config, OmegaConf.create(typed_tree(cls, layer, where)))
        merged = OmegaConf.to_object(config)
    except MissingMandatoryValue as err:
        raise RecipeError(f"{where}{getattr(err, 'full_key', '')}=... is required (see --help)") from None
    except OmegaConfBaseException as err:
        message = str(err).splitlines()[0]
        key = getattr(err, "full_key", None)
        raise RecipeError(f"{where}{key}: {message}" if key else message) from None
    problems = choice_problems(merged, where)
    if problems:
        raise RecipeError("; ".join(problems))
    return merged


def build_options(cls, raw: dict[str, Any] | None = None, where: str = "") -> Any:
    """`cls` from flat or dotted `key=value` text (`{"n": "200"}`); unknown keys and bad values fail clearly."""
    return merge(cls, dotted_to_nested(dict(raw or {})), where=where)


def field_help(f: dataclasses.Field) -> str:
    return f.metadata.get("help", "") if f.metadata else ""


def _default_text(f: dataclasses.Field) -> str:
    if f.default == "???":  # omegaconf.MISSING: the user must give it
        return "(required)"
    if f.default is not dataclasses.MISSING:
        return repr(f.default) if isinstance(f.default, str) else str(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return "" if dataclasses.is_dataclass(value) else str(value)
    return "(required)"


def describe(cls, prefix: str = "", width: int = 100, skip: tuple[str, ...] = ()) -> str:
    """One entry per field, `prefix.name=DEFAULT` then its help indented; nested dataclasses are expanded."""
    lines: list[str] = []
    types_ = field_types(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp = strip_optional(types_[f.name])
        if dataclasses.is_dataclass(tp):
            lines.append(f"\n{prefix}{f.name}.*   {field_help(f)}")
            lines.append(describe(tp, f"{prefix}{f.name}.", width))
            continue
        lines.append(f"  {prefix}{f.name}={_default_text(f)}")
        help_ = field_help(f)
        choices = f.metadata.get("choices") if f.metadata else None
        if choices:
            help_ = f"{help_} [choices: {' | '.join(choices)}]" if help_ else f"[choices: {' | '.join(choices)}]"
        if help_:
            lines.extend(
                textwrap.wrap(
                    help_, width=width, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False
                )
            )  # "block-diagonal" stays one word
    return "\n".join(lines)
