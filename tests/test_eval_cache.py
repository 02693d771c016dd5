"""The evaluation cache survives a torn last line (timealign/backends/cache.py `repair_torn_tail`).

A run killed while writing a record leaves half a line at the end of `<out>/generations/<suite>.jsonl`. The next
run must not append its first record to that half line (both would be lost): the torn text goes to
`<suite>.jsonl.torn` with a warning, that one sample is generated again, and every sample is then in the cache
exactly once. Shown on the real evaluation entry point (eval/run.py's `main`, tiny model, tictoc suite), then on
the edge cases with a scripted backend.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from timealign.backends.base import BaseBackend
from timealign.backends.cache import TORN_SUFFIX, cached_generate, read_cache, repair_torn_tail


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _evaluate(tiny_model_dir, tmp_path) -> dict:
    from timealign.eval.runner import main

    code = main(
        [
            "recipe=tiny",
            f"checkpoint={tiny_model_dir}",
            "suites=tictoc",
            f"out={tmp_path / 'eval'}",
            f"data.prepared_dir={tmp_path / 'prepared'}",
            "data.synthetic_trajectories=4",
            "eval.max_samples=6",
            "eval.max_new_tokens=4",
        ]
    )
    assert code == 0
    return json.loads((tmp_path / "eval" / "tictoc.json").read_text())


def test_a_torn_last_line_is_set_aside_and_no_record_is_lost(tiny_model_dir, tmp_path, caplog):
    first = _evaluate(tiny_model_dir, tmp_path)
    cache = tmp_path / "eval" / "generations" / "tictoc.jsonl"
    assert first["generation"]["generated"] == 6 and len(_records(cache)) == 6
    keys = [r["key"] for r in _records(cache)]

    data = cache.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    torn = data[: last + (len(data) - last) // 2]  # the kill came halfway through the last record
    cache.write_bytes(torn)

    with caplog.at_level(logging.WARNING, logger="timealign.backends.cache"):
        second = _evaluate(tiny_model_dir, tmp_path)
    assert second["generation"]["cached"] == 5 and second["generation"]["generated"] == 1
    assert f"{cache}: its last line was torn" in caplog.text and str(cache) + TORN_SUFFIX in caplog.text
    assert (cache.parent / (cache.name + TORN_SUFFIX)).read_bytes() == torn[last:] + b"\n"  # kept aside, as it was
    records = _records(cache)  # every line a whole record: nothing glued
    assert sorted(r["key"] for r in records) == sorted(keys)  # every sample exactly once
    assert second["samples"] == first["samples"]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="timealign.backends.cache"):
        third = _evaluate(tiny_model_dir, tmp_path)
    assert third["generation"]["cached"] == 6 and third["generation"]["generated"] == 0
    assert "torn" not in caplog.text and len(_records(cache)) == 6


class Echo(BaseBackend):
    """A scripted engine (the cache is under test, not the model): output = the prompt reversed, with an accent."""

    name = "echo"

    def __init__(self):
        super().__init__()
        self.model_id, self.tokenizer, self.prompts = "echo", None, []

    def generate(self, prompts, *, max_new_tokens=64, temperature=None, top_p=None, top_k=None, min_p=None, desc="x"):
        self.prompts += list(prompts)
        return [f"é{p[::-1]}…" for p in prompts]


def test_a_record_missing_only_its_line_end_is_kept(tmp_path, caplog):
    prompts = [f"prompt {i}" for i in range(5)]
    cached_generate(Echo(), prompts, suite="s", cache_dir=tmp_path, max_new_tokens=3, chunk_size=2)
    cache = tmp_path / "s.jsonl"
    cache.write_bytes(cache.read_bytes().rstrip(b"\n"))  # killed between the record and its "\n"
    again = Echo()
    with caplog.at_level(logging.WARNING, logger="timealign.backends.cache"):
        result = cached_generate(again, prompts + ["prompt 5"], suite="s", cache_dir=tmp_path, max_new_tokens=3)
    assert again.prompts == ["prompt 5"] and result.cached == 5
    assert "last record had no line end; added" in caplog.text and not (tmp_path / ("s.jsonl" + TORN_SUFFIX)).exists()
    assert len(_records(cache)) == 6 and len(read_cache(cache)) == 6


def test_a_tear_inside_an_escape_and_a_cache_of_one_torn_line(tmp_path):
    prompts = [f"q{i}" for i in range(3)]
    cached_generate(Echo(), prompts, suite="u", cache_dir=tmp_path, max_new_tokens=3)
    cache = tmp_path / "u.jsonl"
    data = cache.read_bytes()
    cut = data.rfind(b"\\u2026") + 3  # in the middle of the last record's escaped "…"
    assert cut > data.rfind(b"\n", 0, -1) + 3
    cache.write_bytes(data[:cut])
    result = cached_generate(Echo(), prompts, suite="u", cache_dir=tmp_path, max_new_tokens=3)
    assert result.cached == 2 and result.generated == 1 and result.outputs == [f"é{p[::-1]}…" for p in prompts]
    assert len(_records(cache)) == 3

    only = tmp_path / "v.jsonl"
    only.write_bytes(b'{"key": "abc", "out')  # the very first write was torn
    repair_torn_tail(only)
    assert only.read_bytes() == b"" and (tmp_path / "v.jsonl.torn").read_bytes() == b'{"key": "abc", "out\n'


def test_a_record_glued_after_a_torn_line_by_an_older_version_is_read(tmp_path, caplog):
    prompts = ["a", "b"]
    cached_generate(Echo(), prompts, suite="w", cache_dir=tmp_path, max_new_tokens=3)
    cache = tmp_path / "w.jsonl"
    first, second = cache.read_bytes().splitlines(keepends=True)
    cache.write_bytes(first[: len(first) // 2] + second)  # what the old append did: torn text, then the next record
    with caplog.at_level(logging.WARNING, logger="timealign.backends.cache"):
        found = read_cache(cache)
    assert list(found.values()) == ["éb…"] and "glued after a torn one" in caplog.text
    again = Echo()
    result = cached_generate(again, prompts, suite="w", cache_dir=tmp_path, max_new_tokens=3)
    assert again.prompts == ["a"] and result.outputs == ["éa…", "éb…"]
