"""Resume cache and per-sample failure isolation for suite generation.

`cached_generate(backend, prompts, suite=..., cache_dir=..., max_new_tokens=...)` is what a suite calls instead of
`backend.generate`:

- Finished samples are appended to `<cache_dir>/<suite>.jsonl` (one JSON line each, flushed and fsynced after every
  chunk), keyed by sha256 of (suite, backend fingerprint = engine + checkpoint identity, prompt hash,
  max_new_tokens, temperature, top_p, top_k, min_p, seed). A killed run, rerun with the same out dir, regenerates
  only what is missing; a changed setting, prompt or retrained checkpoint misses the cache. A torn last line (the
  process died mid-write) is cut off before anything is appended and kept in `<suite>.jsonl.torn`, with a warning
  (`repair_torn_tail`), so the next record starts on a line of its own; its sample is generated again. One run at a
  time per cache file.
- A failure on some samples does not stop the run: a backend's `GenerationError` gives the finished outputs and one
  message per failed prompt; any other exception from a chunk is retried prompt by prompt to isolate the culprit.
  Failed samples come back as `None` with their error (and are not cached, so a rerun retries them). Only a
  systematic failure (`abort_after` failed samples in a row, e.g. a server that is down) stops the run, with a
  message saying that the finished samples are cached.
- Every call adds its sample and failure counts to the open `count_generations()` tallies, so the evaluator can
  say how many generations of a suite failed whatever the suite's report looks like (`timealign.eval.failures`).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from timealign.backends.base import SAMPLING_KEYS, BackendError, GenerationError

logger = logging.getLogger(__name__)
CACHE_SUBDIR = "generations"


@dataclass
class Generations:
    """outputs: one per prompt (None where it failed); errors: prompt index -> message."""

    outputs: list[str | None]
    errors: dict[int, str] = field(default_factory=dict)
    cached: int = 0  # read from the cache
    generated: int = 0  # generated in this call
    cache_file: str | None = None

    def summary(self) -> dict:
        return {
            "cached": self.cached,
            "generated": self.generated,
            "failed": len(self.errors),
            "cache_file": self.cache_file,
        }


@dataclass
class GenerationTally:
    """Generations asked for and failed under one `count_generations()` block; `errors`: the first few messages."""

    samples: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, samples: int, errors: list[str]) -> None:
        self.samples += samples
        self.failed += len(errors)
        self.errors += errors[: max(0, 3 - len(self.errors))]


_TALLIES: contextvars.ContextVar[tuple[GenerationTally, ...]] = contextvars.ContextVar("tallies", default=())


@contextmanager
def count_generations() -> Iterator[GenerationTally]:
    """Count every `cached_generate` call made inside the block (in this thread or task)."""
    tally = GenerationTally()
    token = _TALLIES.set((*_TALLIES.get(), tally))
    try:
        yield tally
    finally:
        _TALLIES.reset(token)


def _count(samples: int, errors: dict[int, str]) -> None:
    messages = [errors[i].splitlines()[0][:300] if errors[i] else "" for i in sorted(errors)]
    for tally in _TALLIES.get():
        tally.add(samples, messages)


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def cache_key(suite: str, prompt: str, settings: dict) -> str:
    payload = json.dumps({"suite": suite, "prompt": prompt_hash(prompt), **settings}, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


TORN_SUFFIX = ".torn"


def _record(text: bytes) -> dict | None:
    """The cache record in `text` (one line), or None when it is not one."""
    try:
        record = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(record, dict) and isinstance(record.get("key"), str) and "output" in record:
        return record
    return None


def _last_line_start(fh, size: int) -> int:
    """Offset just after the last b"\\n" of the open file (0 when it has none)."""
    block, end = 1 << 16, size
    while end > 0:
        start = max(0, end - block)
        fh.seek(start)
        chunk = fh.read(end - start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def repair_torn_tail(path: Path) -> None:
    """A cache file must end with a line end before anything is appended to it; otherwise the next record would be
    glued to a torn one and both lost. A last line that is a whole record only missing its line end gets it; any
    other last line (a killed run's unfinished write) is appended to `<path>.torn` and cut off, with a warning."""
    if not path.is_file():
        return
    with open(path, "r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        start = _last_line_start(fh, size)
        fh.seek(start)
        tail = fh.read()
        if _record(tail) is not None:
            fh.seek(size)
            fh.write(b"\n")
            logger.warning("%s: its last record had no line end; added", path)
            return
        aside = path.with_name(path.name + TORN_SUFFIX)
        with open(aside, "ab") as out:
            out.write(tail + b"\n")
            out.flush()
            os.fsync(out.fileno())
        fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())
    logger.warning(
        "%s: its last line was torn (%d bytes, a run killed while writing it); moved to %s, and its "
        "sample is generated again",
        path,
        len(tail),
        aside,
    )


def read_cache(path: Path) -> dict[str, str]:
    """key -> output of every complete line (a later line wins). Lines that are no record are skipped with a
    warning; a record glued after a torn line (written before `repair_torn_tail` existed) is still read."""
    found: dict[str, str] = {}
    if not path.is_file():
        return found
    bad: list[int] = []
    glued: list[int] = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            record = _record(line)
            if record is None and line.strip():
                start = line.rfind(b'{"key": ', 1)
                record = _record(line[start:]) if start > 0 else None
                (bad if record is None else glued).append(number)
            if record is not None:
                found[record["key"]] = record["output"]

    def lines(numbers: list[int]) -> str:
        return ", ".join(map(str, numbers[:10])) + (", ..." if len(numbers) > 10 else "")

    if glued:
        logger.warning(
            "%s: line(s) %s hold a record glued after a torn one; the record is read, the torn text ignored",
            path,
            lines(glued),
        )
    if bad:
        logger.warning(
            "%s: %d line(s) are not whole cache records (line %s); skipped, their samples are generated again",
            path,
            len(bad),
            lines(bad),
        )
    return found


def _short(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= 2000 else text[:2000] + " ..."


def cached_generate(
    backend,
    prompts: list[str],
    *,
    suite: str,
    max_new_tokens: int,
    cache_dir: str | Path | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    desc: str | None = "Generating",
    chunk_size: int | None = None,
    abort_after: int | None = None,
) -> Generations:
    """Generate with `backend`, reusing and extending the cache, isolating per-sample failures (module docstring).

    chunk_size: prompts per `backend.generate` call (each chunk is cached once it returns); default: the backend's
    `cache_chunk` attribute, else 64. abort_after: stop after this many failed samples in a row (default
    max(16, chunk_size)).
    """
    resolve = getattr(backend, "resolve_sampling", None)
    sampling = (
        resolve(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
        if resolve
        else {k: v for k, v in zip(SAMPLING_KEYS, (temperature, top_p, top_k, min_p)) if v is not None}
    )
    settings = {
        "backend": getattr(backend, "fingerprint", getattr(backend, "name", type(backend).__name__)),
        "max_new_tokens": max_new_tokens,
        **sampling,
    }
    keys = [cache_key(suite, p, settings) for p in prompts]
    path = Path(cache_dir) / f"{suite}.jsonl" if cache_dir is not None else None
    if path is not None:
        repair_torn_tail(path)
    cached = read_cache(path) if path is not None else {}
    result = Generations(outputs=[cached.get(k) for k in keys], cache_file=str(path) if path else None)
    result.cached = sum(o is not None for o in result.outputs)

    # One generation per distinct key (duplicate prompts share it).
    todo: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if result.outputs[i] is None:
            todo.setdefault(key, []).append(i)
    if result.cached:
        logger.info("%s: %d of %d samples from the cache %s", suite, result.cached, len(prompts), path)
    if not todo:
        _count(len(prompts), {})
        return result
    chunk_size = chunk_size or getattr(backend, "cache_chunk", None) or 64
    abort_after = abort_after or max(16, chunk_size)
    pending = list(todo)
    gen_kwargs = {"max_new_tokens": max_new_tokens, **{k: sampling[k] for k in SAMPLING_KEYS if k in sampling}}
    fh = None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a", encoding="utf-8")
    in_a_row = 0

    def record(key: str, output: str | None, error: str | None) -> None:
        nonlocal in_a_row
        for i in todo[key]:
            result.outputs[i] = output
            if error is not None:
                result.errors[i] = error
        if error is not None:
            in_a_row += 1
            logger.warning("%s: sample failed (%d in a row): %s", suite, in_a_row, error.splitlines()[0][:300])
            if in_a_row >= abort_after:
                _count(len(prompts), result.errors)
                raise BackendError(
                    f"{suite}: {in_a_row} samples failed in a row (last: {error.splitlines()[0][:500]}); stopping. "
                    + (
                        f"The {result.generated + result.cached} finished samples are cached in {path}; rerun with "
                        "the same out= to resume."
                        if path
                        else "Nothing was cached (no cache dir)."
                    )
                )
            return
        in_a_row = 0
        result.generated += 1
        if fh is not None:
            fh.write(
                json.dumps(
                    {
                        "key": key,
                        "suite": suite,
                        "prompt_sha256": prompt_hash(prompts[todo[key][0]]),
                        "settings": settings,
                        "output": output,
                        "time": round(time.time(), 3),
                    }
                )
                + "\n"
            )

    def run_chunk(chunk: list[str]) -> None:
        texts = [prompts[todo[k][0]] for k in chunk]
        try:
            outs = backend.generate(texts, desc=None, **gen_kwargs)
            if len(outs) != len(texts):
                raise BackendError(f"backend returned {len(outs)} outputs for {len(texts)} prompts")
        except GenerationError as err:
            for j, key in enumerate(chunk):
                out = err.outputs[j] if j < len(err.outputs) else None
                if out is None or j in err.errors:
                    record(key, None, err.errors.get(j, "no output"))
                else:
                    record(key, out, None)
            return
        except Exception as err:  # noqa: BLE001 - isolate the failing prompt(s); KeyboardInterrupt still stops
            if len(chunk) == 1:
                record(chunk[0], None, _short(err))
                return
            logger.warning("%s: a chunk of %d failed (%s); retrying prompt by prompt", suite, len(chunk), _short(err))
            for key in chunk:
                run_chunk([key])
            return
        for key, out in zip(chunk, outs):
            record(key, out, None)

    try:
        with tqdm(total=len(pending), desc=desc, unit="sample", disable=desc is None) as bar:
            for start in range(0, len(pending), chunk_size):
                chunk = pending[start : start + chunk_size]
                run_chunk(chunk)
                if fh is not None:
                    fh.flush()
                    os.fsync(fh.fileno())
                bar.update(len(chunk))
    finally:
        if fh is not None:
            fh.close()
    if result.errors:
        logger.warning(
            "%s: %d of %d samples failed; they are recorded in the report and retried on a rerun",
            suite,
            len(result.errors),
            len(prompts),
        )
    _count(len(prompts), result.errors)
    return result


def generate_texts(
    backend, prompts: list[str], *, suite: str, max_new_tokens: int, cache_dir=None, desc: str | None = "Generating"
) -> tuple[list[str], dict]:
    """`cached_generate` for suites whose scorers take plain strings: a failed sample becomes "" (scored as an
    unparseable answer) and is listed in the returned info's `errors`; the info also has the cache summary."""
    if not prompts:
        return [], {"errors": [], "generation": None}
    gens = cached_generate(
        backend, prompts, suite=suite, cache_dir=cache_dir, max_new_tokens=max_new_tokens, desc=desc
    )
    outputs = [text if text is not None else "" for text in gens.outputs]
    errors = [{"index": i, "error": err} for i, err in sorted(gens.errors.items())]
    return outputs, {"errors": errors, "generation": gens.summary()}
