"""Shipping a trained checkpoint: train tiny LoRA runs (TIMER SFT with added tokens, offset-DPO) and a tiny full
fine-tune -> train/export.py -> the merged checkpoint generates exactly what the adapter generates, through
transformers and through the real vLLM CPU engine; what `training.push_to_hub` would upload; the model card.

The HF parts run in the main environment; the vLLM parts skip where vLLM is not importable and run under
`make test-vllm` (.venv-vllm):

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest tests/test_export.py -q

The base is the tiny architecture with weights redrawn at std 0.3 (`test_backends.build_test_model`): the stock
random tiny model, and a few steps of training on it, emit one token over and over, which any two models would
agree on. On the redrawn one greedy outputs vary per prompt, so equal outputs say the weights are the same.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import build_test_model, tictoc_rows

pytestmark = pytest.mark.slow

MAX_NEW_TOKENS = 12
COMMON = {
    "training.logging_steps": "1",
    "training.per_device_train_batch_size": "4",
    "training.save_strategy": "steps",
    "training.save_steps": "2",
    "training.max_steps": "3",
    "training.learning_rate": "5e-3",
}
TIMER_SMALL = {"timer.synthetic_dialogs": "16", "timer.synthetic_eval_dialogs": "6"}
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors"}
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return tictoc_rows(tmp_path_factory.mktemp("prepared"))


@pytest.fixture(scope="module")
def base(tiny_model_dir, rows, tmp_path_factory):
    return build_test_model(tmp_path_factory.mktemp("spread"), tiny_model_dir, rows)


def train(recipe_name: str, overrides: dict, out: Path):
    """The steps of train/dpo.py's and train/sft.py's `run`, keeping the trainer; returns (output_dir, trainer)."""
    from timealign.config import load_recipe
    from timealign.data.prepared import prepared_dir_for
    from timealign.train import dpo, sft
    from timealign.train.final_model import save_trained_model, write_run_card
    from timealign.train.session import TrainingSession

    recipe = load_recipe(recipe_name, {**COMMON, **overrides, "output_dir": str(out)})
    module = sft if recipe.task == "sft" else dpo
    trainer = module.build_trainer(recipe)
    session = TrainingSession.start(trainer, recipe, data_dir=prepared_dir_for(recipe))
    trainer.train(resume_from_checkpoint=session.resume_from)
    session.finish()
    saved = save_trained_model(trainer, recipe)
    write_run_card(trainer, recipe, session)
    return saved, trainer


@pytest.fixture(scope="module", params=["trainable_tokens", "modules_to_save"])
def timer_lora(request, base, tmp_path_factory):
    out, trainer = train(
        "tiny-timer",
        {
            **TIMER_SMALL,
            "model.name_or_path": str(base),
            "lora.enabled": "true",
            "timer.lora_new_tokens": request.param,
        },
        tmp_path_factory.mktemp(f"timer-{request.param}"),
    )
    return out, trainer


@pytest.fixture(scope="module")
def dpo_lora(base, tmp_path_factory):
    # max_steps 2 = save_steps: checkpoint-2 holds the final adapter (the hub test pushes from it)
    return train(
        "tiny",
        {
            "model.name_or_path": str(base),
            "lora.enabled": "true",
            "training.max_steps": "2",
            "data.synthetic_trajectories": "4",
            "training.per_device_train_batch_size": "2",
        },
        tmp_path_factory.mktemp("dpo-lora"),
    )


@pytest.fixture(scope="module")
def timer_full(base, tmp_path_factory):
    return train(
        "tiny-timer",
        {**TIMER_SMALL, "model.name_or_path": str(base), "training.max_steps": "1", "training.save_strategy": "no"},
        tmp_path_factory.mktemp("timer-full"),
    )[0]


def export(checkpoint: Path, out: Path) -> Path:
    from timealign.train.export import main

    assert main([f"checkpoint={checkpoint}", f"out={out}"]) == 0
    return out


def timer_prompts(checkpoint: Path) -> list[str]:
    """Step-1 (interval) and step-2 (reply after 30 minutes) prompts of the run's own held-out dialogs."""
    from transformers import AutoTokenizer

    from timealign.data.timelychat import TimerDialog
    from timealign.data.timer_prep import load_timer_prepared
    from timealign.render.timer import TimerRenderer

    (prepared,) = (checkpoint / "data").glob("dialogs-*")
    renderer = TimerRenderer(AutoTokenizer.from_pretrained(checkpoint))
    prompts = []
    for row in load_timer_prepared(prepared)["test"]:
        dialog = TimerDialog.from_row(row)
        prompts += [
            renderer.interval_prompt(dialog.context, dialog.target_speaker),
            renderer.response_prompt(dialog.context, dialog.target_speaker, 30.0),
        ]
    return prompts


def dpo_prompts(checkpoint: Path, rows) -> list[str]:
    from transformers import AutoTokenizer

    from timealign.render.chat import PromptRenderer

    renderer = PromptRenderer(AutoTokenizer.from_pretrained(checkpoint))
    return [renderer.prompt(r["prompt"], r["tools"]) for r in rows]


def hf_generate(checkpoint: Path, prompts: list[str]) -> list[str]:
    from timealign.backends.hf import HFBackend

    return HFBackend(str(checkpoint), dtype="float32", batch_size=8).generate(
        prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None
    )


def weight(folder: Path, name: str):
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as fh:
        return fh.get_tensor(name)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- export, HF


def test_timer_lora_export_equals_adapter(timer_lora, base, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    from timealign.render.timer import TIMER_TOKENS

    adapter, _ = timer_lora
    merged = export(adapter, tmp_path / "merged")
    files = {p.name for p in merged.iterdir()}
    # no run records (but the export's list of what it wrote), no data
    assert MODEL_FILES | TOKENIZER_FILES | {"README.md", "timealign_recipe.yaml", "timealign_run.json"} == files
    tokenizer = AutoTokenizer.from_pretrained(merged)
    base_tokenizer = AutoTokenizer.from_pretrained(base)
    new_ids = tokenizer.convert_tokens_to_ids(list(TIMER_TOKENS))
    assert min(new_ids) >= len(base_tokenizer)  # the tokens the base lacks ...
    added = {t.content: t for t in tokenizer.added_tokens_decoder.values()}
    assert all(added[t].special and not added[t].normalized for t in TIMER_TOKENS)  # ... as the training added them
    assert AutoConfig.from_pretrained(merged).vocab_size == len(tokenizer) == len(base_tokenizer) + 3
    # The LoRA deltas are in the weights (not the base's) and the new rows are the trained ones, not the mean init.
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not weight(merged, name).equal(weight(base, name))
    embed = weight(merged, "model.embed_tokens.weight")
    assert not embed[new_ids[0]].allclose(embed[: len(base_tokenizer)].mean(0))

    prompts = timer_prompts(adapter)
    assert all(new_ids[0] in ids for ids in tokenizer(prompts)["input_ids"])  # the prompts use the new rows
    expected = hf_generate(adapter, prompts)  # AutoPeftModelForCausalLM: base + adapter
    assert len(set(expected)) > len(prompts) // 2  # varied outputs: equality below means the same weights
    assert hf_generate(merged, prompts) == expected


def test_dpo_lora_export_equals_adapter(dpo_lora, base, rows, tmp_path):
    adapter, _ = dpo_lora
    merged = export(adapter, tmp_path / "merged")
    name = "model.layers.1.mlp.down_proj.weight"
    assert not weight(merged, name).equal(weight(base, name))
    prompts = dpo_prompts(adapter, rows)
    expected = hf_generate(adapter, prompts)
    assert len(set(expected)) > len(prompts) // 2
    assert hf_generate(merged, prompts) == expected
    assert "offset-DPO" in (merged / "README.md").read_text()


def test_full_fine_tune_is_copied_unchanged(timer_full, tmp_path):
    out = export(timer_full, tmp_path / "full")
    assert {p.name for p in out.iterdir()} == MODEL_FILES | TOKENIZER_FILES | {
        "README.md",
        "timealign_recipe.yaml",
        "timealign_run.json",  # what the export wrote: overwrite=true replaces those files only
    }
    for name in MODEL_FILES | TOKENIZER_FILES | {"timealign_recipe.yaml"}:
        assert sha256(out / name) == sha256(timer_full / name), name
    card = (out / "README.md").read_text()
    assert "full fine-tuning" in card and f"exported from | `{timer_full}`" in card


def test_export_refuses_what_is_not_a_checkpoint(timer_full, dpo_lora, tmp_path):
    """Each refusal is one line and exit 2, as every command's (issue 42: a folder that cannot be exported was exit
    1)."""
    import io
    from contextlib import redirect_stderr

    from timealign.train.export import main

    (tmp_path / "empty").mkdir()
    unfinished = tmp_path / "unfinished"
    shutil.copytree(dpo_lora[0] / "checkpoint-2", unfinished / "checkpoint-2")
    truncated = tmp_path / "truncated"
    shutil.copytree(timer_full, truncated, ignore=shutil.ignore_patterns("data"))
    with open(truncated / "model.safetensors", "r+b") as fh:
        fh.truncate(1000)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    out = tmp_path / "out"
    cases = [  # (checkpoint, out, what the one-line error says)
        (tmp_path / "nothing", out, "no such folder"),
        (tmp_path / "empty", out, "neither config.json (a full model) nor adapter_config.json (a LoRA adapter)"),
        (
            unfinished,
            out,
            (
                "its training has not finished. Finish it (the same training command resumes), or "
                f"export a checkpoint: checkpoint={unfinished / 'checkpoint-2'}"
            ),
        ),
        (truncated, out, "the weights are incomplete or missing: model.safetensors is truncated"),
        (timer_full, timer_full / "export", "is, is inside or holds the checkpoint folder"),
        (dpo_lora[0] / "checkpoint-2", dpo_lora[0], "is, is inside or holds the checkpoint folder"),
        (timer_full, taken, "already holds files that no timealign run wrote (keep.txt)"),
    ]
    for checkpoint, target, expected in cases:
        err = io.StringIO()
        with redirect_stderr(err):
            got = main([f"checkpoint={checkpoint}", f"out={target}"])
        text = err.getvalue()
        assert got == 2 and expected in text and text.startswith("error: ") and text.count("\n") == 1, (
            checkpoint,
            text,
        )
    assert not out.exists() and not (timer_full / "export").exists() and os.listdir(taken) == ["keep.txt"]


def _state(folder: Path) -> dict:
    """Every file under `folder`: (bytes, mtime_ns)."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_overwrite_replaces_only_what_an_export_wrote(tiny_model_dir, tmp_path, capsys):
    # Audit: overwrite=true deleted the whole out folder, a user's files included. The tiny model is a full model
    # without a timealign recipe: its model and tokenizer files are copied (no card), and the record lists them.
    from timealign.train.export import main

    out = tmp_path / "exported"
    exported = MODEL_FILES | TOKENIZER_FILES
    args = [f"checkpoint={tiny_model_dir}", f"out={out}"]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} == exported | {"timealign_run.json"}
    record = json.loads((out / "timealign_run.json").read_text())
    assert set(record["written"]) == exported
    assert all(record["written"][n] == [(out / n).stat().st_size, (out / n).stat().st_mtime_ns] for n in exported)
    assert (
        main(args) == 2 and "already holds files; pick a new folder or add overwrite=true" in capsys.readouterr().err
    )
    # Only the previous export there: overwrite=true replaces it.
    assert main([*args, "overwrite=true"]) == 0
    assert {p.name for p in out.iterdir()} == exported | {"timealign_run.json"}
    assert all(sha256(out / n) == sha256(tiny_model_dir / n) for n in exported)
    capsys.readouterr()

    def refused(expected: str) -> None:
        before = _state(out)
        assert main([*args, "overwrite=true"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
        assert "timealign neither deletes nor overwrites files it did not write (overwrite=true included)" in err
        assert _state(out) == before and not (tmp_path / ".exported.export-tmp").exists()

    (out / "notes.txt").write_text("mine")  # a user's file beside the export
    refused("already holds files that no timealign run wrote (notes.txt)")
    (out / "notes.txt").unlink()
    (out / "extra").mkdir()
    (out / "extra" / "eval.json").write_text("{}")  # in a folder of its own
    refused("(extra)")
    shutil.rmtree(out / "extra")
    with open(out / "config.json", "a") as fh:  # an exported file edited since
        fh.write("\n")
    refused("(config.json)")
    (out / "timealign_run.json").unlink()  # an export from before the record: nothing says what it wrote
    refused("(chat_template.jinja, config.json, generation_config.json, model.safetensors, tokenizer.json, ")
    assert main([f"checkpoint={tiny_model_dir}", f"out={out / 'config.json'}", "overwrite=true"]) == 2
    assert "is not a folder" in capsys.readouterr().err and (out / "config.json").is_file()


def test_export_of_a_checkpoint_step(dpo_lora, tmp_path):
    """checkpoint-N of a LoRA run (optimizer states beside the adapter) exports like the final folder."""
    adapter, _ = dpo_lora
    out = export(adapter / "checkpoint-2", tmp_path / "step2")
    assert (out / "model.safetensors").is_file() and not (out / "optimizer.pt").exists()
    card = (out / "README.md").read_text()
    assert "checkpoint-2" in card and "data fingerprint | `pairs-" in card  # records from the output_dir around it


# ---------------------------------------------------------------------------------------------- hub upload


def upload_selection(folder: str, allow_patterns=None, ignore_patterns=None) -> set[str]:
    """The files HfApi.upload_folder commits: every file under the folder (relative, posix), through
    huggingface_hub's own filter with its default ignore patterns (`_prepare_upload_folder_additions`)."""
    from huggingface_hub.utils import filter_repo_objects
    from huggingface_hub.utils._paths import DEFAULT_IGNORE_PATTERNS

    root = Path(folder).expanduser().resolve()
    files = [p.relative_to(root).as_posix() for p in sorted(root.glob("**/*")) if p.is_file()]
    return set(
        filter_repo_objects(
            files, allow_patterns=allow_patterns, ignore_patterns=list(ignore_patterns or []) + DEFAULT_IGNORE_PATTERNS
        )
    )


class RecordingHub:
    """Stands in for the hub endpoint (no network in tests): records upload_folder's arguments."""

    def __init__(self):
        self.uploads: list[dict] = []

    def upload_folder(self, **kwargs):
        self.uploads.append(kwargs)
        done = concurrent.futures.Future()
        done.set_result("recorded")
        return done


def test_push_to_hub_uploads_model_tokenizer_and_card_only(dpo_lora, monkeypatch):
    import transformers.utils.hub

    out, trainer = dpo_lora
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    records = {
        "run_info.json",
        "timealign_run.json",
        "train_log.json",
        "timealign_recipe.yaml",
        "training_args.bin",
        "lengths.json",
    }
    assert records <= present and any(p.startswith("data/") for p in present)
    assert any(p.startswith("checkpoint-2/") for p in present)
    # What transformers 5.19 alone would upload: everything but checkpoint-*.
    stock = upload_selection(str(out), ignore_patterns=["_*", "checkpoint-*"])
    assert records <= stock and any(p.startswith("data/") for p in stock)

    wanted = {"README.md", "adapter_config.json", "adapter_model.safetensors"} | TOKENIZER_FILES
    assert upload_selection(str(out), **trainer.hub_upload_filter()) == wanted

    hub = RecordingHub()
    monkeypatch.setattr(transformers.utils.hub, "hf_api", lambda: hub)
    trainer.hub_model_id = "someone/tiny-dpo"
    trainer.push_in_progress = None
    trainer.push_to_hub()  # the end-of-training push: saves, writes the card, uploads
    trainer._push_from_checkpoint(str(out / "checkpoint-2"))  # a push per checkpoint save (hub_strategy every_save)
    assert len(hub.uploads) == 2
    for upload in hub.uploads:
        assert upload["repo_id"] == "someone/tiny-dpo" and Path(upload["folder_path"]) == out
        selected = upload_selection(upload["folder_path"], upload["allow_patterns"], upload["ignore_patterns"])
        assert selected == wanted
    card = (out / "README.md").read_text()
    assert "timealign:" in card and "offset-DPO" in card  # timealign's card, not TRL's


def test_model_card_of_a_run_then_after_evaluation(dpo_lora, rows):
    """The card training wrote; evaluation reports appear after a rewrite through the CLI."""
    from huggingface_hub import ModelCard

    from timealign.config import load_recipe
    from timealign.eval.runner import evaluate
    from timealign.train.model_card import main

    out, _ = dpo_lora
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "peft" and card.data.license == "unknown"
    assert card.data.base_model is None  # a local folder is no hub id
    block = card.data.to_dict()["timealign"]
    (prepared,) = (out / "data").glob("pairs-*")
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert block["data_fingerprint"] == {
        "kind": "pairs",
        "sha256": manifest["fingerprint"]["sha256"],
        "folder": prepared.name,
    }
    assert block["overrides"]["lora.enabled"] == "true" and block["task"] == "dpo"
    run_info = json.loads((out / "run_info.json").read_text())
    assert block["git"] == run_info["git"]
    assert "No evaluation reports here yet" in card.text

    recipe = load_recipe(
        "tiny", {"output_dir": str(out), "data.synthetic_trajectories": "4", "eval.max_new_tokens": "4"}
    )
    reports = evaluate(recipe, str(out), ["tictoc"], out / "eval")
    assert main([f"checkpoint={out}"]) == 0
    card = ModelCard.load(out / "README.md")
    nar = reports["tictoc"]["overall"]["nar"]
    line = next(l for l in card.text.splitlines() if l.startswith("| tictoc | nar |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == (f"{nar:.4g}" if nar is not None else "n/a") and cells[6] == "this model"
    assert cells[5].startswith(reports["tictoc"]["data"]["label"])  # the row names its data
    interval = ((reports["tictoc"].get("intervals") or {}).get("metrics") or {}).get("nar")  # eval.bootstrap's
    assert cells[3] == (f"[{interval[0]:.4g}, {interval[1]:.4g}]" if interval else "n/a")
    assert card.data.to_dict()["timealign"]["overrides"]["lora.enabled"] == "true"  # kept through the rewrite


# ---------------------------------------------------------------------------------------------- vLLM


def vllm_generate(checkpoint: Path, prompts: list[str]) -> list[str]:
    """Greedy outputs of the real vLLM engine (CPU build) on `checkpoint`, through the eval backend."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU build otherwise reserves most of RAM
    from timealign.backends.factory import make_backend
    from timealign.config import load_recipe

    section = load_recipe(
        "tiny", {"eval.backend": "vllm", "eval.max_model_len": "2048", "eval.enforce_eager": "true"}
    ).eval
    with make_backend(section, str(checkpoint), dtype="float32") as engine:
        assert engine.lora_request is None  # a plain model to vLLM, no adapter
        return engine.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None)


needs_vllm = pytest.mark.vllm


@needs_vllm
def test_vllm_serves_the_merged_timer_checkpoint(timer_lora, tmp_path):
    adapter, _ = timer_lora
    merged = export(adapter, tmp_path / "merged")
    prompts = timer_prompts(adapter)
    assert vllm_generate(merged, prompts) == hf_generate(adapter, prompts)


@needs_vllm
def test_vllm_serves_the_merged_dpo_checkpoint(dpo_lora, rows, tmp_path):
    adapter, _ = dpo_lora
    merged = export(adapter, tmp_path / "merged")
    prompts = dpo_prompts(adapter, rows)
    assert vllm_generate(merged, prompts) == hf_generate(adapter, prompts)
