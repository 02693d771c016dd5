"""The model card of a trained folder, built from hand-written run records (no training here; tests/test_export.py
checks the card a real run writes): header metadata, the training table, the evaluation table with bootstrap
intervals as the evaluator writes them, and a rewrite that keeps what only the card remembers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from timealign.config import load_recipe
from timealign.data.fingerprint import data_fingerprint
from timealign.render.checkpoint import CHECKPOINT_RECIPE
from timealign.train.card_facts import ModelCardError, eval_rows, metric_interval
from timealign.train.model_card import hub_base_model, main, write_model_card


def trained_folder(root: Path, overrides: dict) -> tuple[Path, object]:
    """What a training run leaves (the records the card reads), written by hand: the resolved recipe, run_info.json,
    wandb_run.json, a prepared-data folder with its manifest, the training log."""
    recipe = load_recipe("tiny", {**overrides, "output_dir": str(root / "run")})
    out = root / "run"
    out.mkdir(parents=True)
    (out / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    (out / "run_info.json").write_text(
        json.dumps(
            {
                "world_size": 2,
                "global_step": 30,
                "data_fingerprint": "abc",
                "git": {"commit": "0123456789abcdef0123", "dirty": False},
            }
        )
    )
    (out / "wandb_run.json").write_text(
        json.dumps(
            {
                "id": "r4nd0m12",
                "name": "tiny:lr=1e-5",
                "project": "tal",
                "entity": "lab",
                "group": "tiny:lr=1e-5 (r4nd0m12)",
            }
        )
    )
    fingerprint = data_fingerprint("pairs", recipe.data)
    prepared = out / "data" / f"pairs-{fingerprint.sha256[:12]}"
    prepared.mkdir(parents=True)
    (prepared / "manifest.json").write_text(json.dumps({"fingerprint": fingerprint.to_dict()}))
    (out / "train_log.json").write_text(json.dumps([{"loss": 0.6, "epoch": 0.5}, {"loss": 0.5, "epoch": 1.0}]))
    return out, recipe


def report(suite: str, checkpoint, overall: dict, **extra) -> dict:
    return {"suite": suite, "checkpoint": str(checkpoint), "overall": overall, **extra}


def table(card_text: str) -> dict[tuple[str, str, str], list[str]]:
    """The evaluation table's rows keyed by (suite, metric, report folder)."""
    rows = {}
    for line in card_text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] not in ("suite", "---"):
            rows[(cells[0], cells[1], cells[7].strip("`"))] = cells
    return rows


def test_the_interval_is_read_from_the_evaluators_block_only():
    """The card reads the one interval shape eval/run.py writes (timealign.eval.bootstrap's `intervals` block); an
    interval-looking key anywhere else is not one, so the card never shows an interval nobody computed."""
    bootstrap = {
        "overall": {"nar": 0.6, "fpr": None},
        "intervals": {"method": "percentile", "confidence": 0.9, "metrics": {"nar": [0.5, 0.7], "fpr": None}},
    }
    assert metric_interval(bootstrap, "nar") == ((0.5, 0.7), 0.9)
    assert metric_interval(bootstrap, "fpr") == (None, 0.9)
    assert metric_interval({"overall": {"nar": 0.6, "nar_ci": [0.55, 0.65]}}, "nar") == (None, None)
    assert metric_interval({"overall": {"f1": 0.3}, "intervals": {"f1": {"lower": 0.2, "upper": 0.4}}}, "f1") == (
        None,
        None,
    )
    assert metric_interval({"overall": {"f1": 0.3}}, "f1") == (None, None)


def test_hub_base_model_only_for_hub_ids(tmp_path):
    assert hub_base_model("meta-llama/Llama-3.2-3B-Instruct") == "meta-llama/Llama-3.2-3B-Instruct"
    for local in ("tiny", "tiny-agent", str(tmp_path), "./models/x", "a/b/c", None, "bad name/x y"):
        assert hub_base_model(local) is None, local


def test_card_of_a_run_and_its_rewrite_after_evaluation(tmp_path):
    out, recipe = trained_folder(
        tmp_path,
        {
            "training.learning_rate": "1e-5",
            "lora.enabled": "true",
            "model.name_or_path": "meta-llama/Llama-3.2-3B-Instruct",
        },
    )
    write_model_card(out, recipe)
    card = ModelCard.load(out / "README.md")
    meta = card.data.to_dict()
    assert meta["base_model"] == "meta-llama/Llama-3.2-3B-Instruct" and meta["license"] == "unknown"
    assert meta["library_name"] == "peft"  # lora.enabled, and no model saved yet (the card of a checkpoint save)
    assert {"timealign", "dpo", "offset-dpo", "lora"} <= set(meta["tags"])
    block = meta["timealign"]
    prepared = next((out / "data").iterdir())
    sha = json.loads((prepared / "manifest.json").read_text())["fingerprint"]["sha256"]
    assert block["data_fingerprint"] == {"kind": "pairs", "sha256": sha, "folder": prepared.name}
    assert block["overrides"]["training.learning_rate"] == "1e-5" and block["recipe"] == "tiny"
    assert block["wandb"]["url"] == "https://wandb.ai/lab/tal/runs/r4nd0m12"
    text = card.text
    for row in [
        "| method | offset-DPO |",
        "| beta | 0.1 |",
        "| learning rate | 1e-05 |",
        f"| data fingerprint | `{prepared.name}` (sha256 {sha}) |",
        "| prompt protocol (data.protocol) | `timealign` |",
        "| timestamps | true; elapsed badge false |",
        "| optimizer steps | 30 on 2 process(es) |",
        "| epochs | 1; 1 trained |",
        "[tiny:lr=1e-5](https://wandb.ai/lab/tal/runs/r4nd0m12)",
        "| timealign | 0.1.0, git `0123456789ab` |",
        "LoRA (r 16",
    ]:
        assert row in text, row
    assert "No evaluation reports here yet" in text

    # Evaluation reports appear; a base-model report in eval-base is labelled with what it scored.
    (out / "eval").mkdir()
    (out / "eval" / "tictoc.json").write_text(
        json.dumps(
            report(
                "tictoc",
                out,
                {"n": 480, "tp": 100, "nar": 0.7312, "attempt_rate_prefer_tool": 0.8, "fpr": None},
                intervals={"confidence": 0.95, "metrics": {"nar": [0.69, 0.77], "attempt_rate_prefer_tool": None}},
            )
        )
    )
    (out / "eval" / "generations").mkdir()  # the cache folder and non-report JSON are not reports
    (out / "eval" / "run.json").write_text(json.dumps({"run": "runs/001"}))
    (out / "eval-base").mkdir()
    (out / "eval-base" / "tictoc.json").write_text(
        json.dumps(report("tictoc", "meta-llama/Llama-3.2-3B-Instruct", {"n": 480, "nar": 0.5}))
    )
    elsewhere = tmp_path / "results"
    elsewhere.mkdir()
    (elsewhere / "timepuzzles.json").write_text(json.dumps(report("timepuzzles", out, {"n": 50, "accuracy": 0.42})))
    assert main([f"checkpoint={out}", f"eval={elsewhere}"]) == 0
    rewritten = ModelCard.load(out / "README.md")
    rows = table(rewritten.text)
    unknown = "unknown (the report names no data)"  # reports from before reports named their data
    assert rows[("tictoc", "nar", "eval")] == [
        "tictoc",
        "nar",
        "0.7312",
        "[0.69, 0.77]",
        "480",
        unknown,
        "this model",
        "`eval`",
    ]
    assert rows[("tictoc", "attempt_rate_prefer_tool", "eval")][3] == "n/a"  # no interval for it: n/a, not dropped
    assert rows[("tictoc", "fpr", "eval")][2:4] == ["n/a", "n/a"]
    assert not {k[1] for k in rows} & {"tp", "n"}  # counts without intervals are not rates
    assert rows[("timepuzzles", "accuracy", str(elsewhere))][3:7] == ["n/a", "50", unknown, "this model"]
    assert [r for k, r in rows.items() if k[2] == "eval-base"] == [
        ["tictoc", "nar", "0.5", "n/a", "480", unknown, "meta-llama/Llama-3.2-3B-Instruct", "`eval-base`"]
    ]
    assert len(rows) == 5
    assert "| suite | metric | value | 95% CI |" in rewritten.text
    # What only the card knew (the command line's overrides) survives a rewrite without the Recipe object.
    assert rewritten.data.to_dict()["timealign"]["overrides"] == block["overrides"]


def test_card_refuses_a_folder_timealign_did_not_train(tmp_path, capsys):
    with pytest.raises(ModelCardError, match="no timealign_recipe.yaml"):
        write_model_card(tmp_path)
    assert main([f"checkpoint={tmp_path}"]) == 2
    assert "not a folder timealign trained" in capsys.readouterr().err
    assert main([f"checkpoint={tmp_path / 'missing'}"]) == 2


def test_broken_report_is_named(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "tictoc.json").write_text("{not json")
    with pytest.raises(ModelCardError, match=r"eval/tictoc.json: not valid JSON"):
        eval_rows(tmp_path)


def test_rows_name_their_data_and_the_training_data_comes_first(tmp_path):
    """A score on the training data's held-out split and one on other data are separate rows, each naming its data;
    the training data's rows first (issue 21: synthetic and real results never read as one "this model" column)."""
    out, _ = trained_folder(tmp_path, {})
    prepared = next((out / "data").iterdir())
    sha = json.loads((prepared / "manifest.json").read_text())["fingerprint"]["sha256"]
    trained = {
        "source": "synthetic",
        "split": "test",
        "fingerprint": sha,
        "samples": 64,
        "label": f"synthetic test n=64 [{sha[:12]}]",
    }
    other = {
        "source": "v1",
        "path": "/data/tictoc-v1",
        "split": "test",
        "fingerprint": "f" * 64,
        "samples": 16,
        "label": "v1 tictoc-v1/test n=16 [ffffffffffff]",
    }
    for folder, data, nar in (("eval-v1", other, 0.61), ("eval", trained, 0.72)):
        (out / folder).mkdir()
        (out / folder / "tictoc.json").write_text(
            json.dumps(report("tictoc", out, {"n": data["samples"], "nar": nar}, data=data))
        )
    write_model_card(out)
    text = ModelCard.load(out / "README.md").text
    assert "| suite | metric | value | CI | n | data | model | report |" in text
    nar_rows = [line for line in text.splitlines() if line.startswith("| tictoc | nar |")]
    assert nar_rows == [
        f"| tictoc | nar | 0.72 | n/a | 64 | synthetic test n=64 [{sha[:12]}] (the training data's held-out split) | "
        "this model | `eval` |",
        "| tictoc | nar | 0.61 | n/a | 16 | v1 tictoc-v1/test n=16 [ffffffffffff] (not the training data) | "
        "this model | `eval-v1` |",
    ]
