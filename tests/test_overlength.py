"""Pairs longer than training.max_length: counted, reported, and by default kept whole by dropping the oldest turns.

The truth these tests compare with is TRL's own tokenized dataset (`trainer.train_dataset`: prompt_ids, chosen_ids,
rejected_ids, after TRL dropped what it drops) and an independent rendering of the shortened prompts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

from timealign.config import DataSection, RecipeError, load_recipe
from timealign.data.pairs import load_prepared, prepare
from timealign.render.chat import PromptRenderer
from timealign.train.dpo import build_trainer, render_split
from timealign.train.lengths import LENGTHS_FILE, PairFitter, droppable_turns, turns

TRAJECTORIES = 8  # synthetic: 24 train pairs, 6 of them with two retrieval rounds (the long ones)


def sequence_tokens(tokenizer, prompt: str, completion: str) -> int:
    """prompt + completion tokens as TRL's DPOTrainer builds them (EOS appended when missing)."""
    if not completion.endswith(tokenizer.eos_token):
        completion += tokenizer.eos_token
    return len(tokenizer(prompt + completion)["input_ids"])


def longest(tokenizer, pair: dict) -> int:
    return max(
        sequence_tokens(tokenizer, pair["prompt"], pair["chosen"]),
        sequence_tokens(tokenizer, pair["prompt"], pair["rejected"]),
    )


def minimal_prompt(messages: list[dict]) -> list[dict]:
    """What truncate_prompt may shorten a prompt to, written out by hand: system messages, the turn of the latest
    tool result (from its user message to the next one), the final question."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    keep = {i for i, m in enumerate(messages) if m["role"] == "system"} | {users[-1]}
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    if tools:
        start = max(i for i in users if i < tools[-1])
        end = min((i for i in users if i > tools[-1]), default=len(messages))
        keep |= set(range(start, end))
    return [messages[i] for i in sorted(keep)]


@pytest.fixture(scope="module")
def synthetic_train(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pairs")
    prepare(DataSection(source="synthetic", synthetic_trajectories=TRAJECTORIES), folder)
    return load_prepared(folder)["train"]


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return PromptRenderer(tiny_tokenizer)


def m(role, content, **extra):
    return {"role": role, "content": content, **extra}


def test_turns_keep_system_messages_the_latest_tool_result_and_the_final_question():
    call = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    messages = [
        m("system", "s"),
        m("assistant", "hello"),  # 0-1: before the first user message
        m("user", "u1"),
        m("assistant", None, tool_calls=call),
        m("tool", "r1"),
        m("assistant", "a1"),  # 2-5
        m("user", "u2"),
        m("assistant", "a2"),  # 6-7
        m("system", "s2"),  # 8: never dropped
        m("user", "u3"),
        m("assistant", None, tool_calls=call),
        m("tool", "r3"),
        m("assistant", "a3"),  # 9-12
        m("user", "u4"),
        m("assistant", "a4"),  # 13-14: newer than the evidence
        m("user", "final"),
    ]  # 15
    assert turns(messages) == [[1], [2, 3, 4, 5], [6, 7], [9, 10, 11, 12], [13, 14], [15]]
    # oldest first; the latest tool result's turn (9-12) and the final question stay; 13-14 may go, last
    assert droppable_turns(messages) == [[1], [2, 3, 4, 5], [6, 7], [13, 14]]
    assert droppable_turns([m("system", "s"), m("user", "only")]) == []


def test_truncate_prompt_drops_whole_oldest_turns_until_each_pair_fits(synthetic_train, renderer, tiny_tokenizer):
    limit = 600
    full = render_split(synthetic_train, renderer, "full").to_list()
    fitter = PairFitter(renderer, tiny_tokenizer, limit, "truncate_prompt", "train")
    fitted = render_split(synthetic_train, renderer, "fitted", fit=fitter).to_list()
    over = [i for i, pair in enumerate(full) if longest(tiny_tokenizer, pair) > limit]
    assert 0 < len(over) < len(full)
    report = fitter.report
    assert (report["pairs"], report["over_length"], report["prompt_truncated"], report["dropped"]) == (
        len(full),
        len(over),
        len(over),
        0,
    )
    assert (
        report["kept"] == len(fitted) == len(full) and report["chosen_truncated"] == report["rejected_truncated"] == 0
    )
    assert report["tokens"]["max"] == max(longest(tiny_tokenizer, p) for p in full)
    for i, (before, after) in enumerate(zip(full, fitted)):
        assert (after["chosen"], after["rejected"], after["margin"]) == (
            before["chosen"],
            before["rejected"],
            before["margin"],
        )  # completions whole
        assert longest(tiny_tokenizer, after) <= limit
        if i not in over:
            assert after["prompt"] == before["prompt"]
            continue
        messages = synthetic_train[i]["prompt"]
        row = synthetic_train[i]
        short = renderer.pair(minimal_prompt(messages), row["chosen"][0], row["rejected"][0], row["tools"])
        assert after["prompt"] == short["prompt"]  # here one older turn was enough, and nothing else went
        users = [msg["content"] for msg in messages if msg["role"] == "user"]
        tool_results = [msg["content"] for msg in messages if msg["role"] == "tool"]
        assert users[0] not in after["prompt"]  # the oldest turn is gone
        for kept in (messages[0]["content"], tool_results[-1], users[-1]):  # system, latest result, question
            assert kept in after["prompt"]
        for tool in json.loads(row["tools"]) if isinstance(row["tools"], str) else row["tools"]:
            assert tool["function"]["name"] in after["prompt"]  # the tool schemas stay
    assert report["turns_dropped"] == sum(len(droppable_turns(synthetic_train[i]["prompt"])) for i in over)


def test_a_pair_that_cannot_fit_whole_is_an_error_naming_its_records(synthetic_train, renderer, tiny_tokenizer):
    limit = 460
    needs = {}
    for row in synthetic_train:
        short = renderer.pair(minimal_prompt(row["prompt"]), row["chosen"][0], row["rejected"][0], row["tools"])
        if longest(tiny_tokenizer, short) > limit:
            needs[(row["id"], row["elapse_level"])] = longest(tiny_tokenizer, short)
    assert needs
    fitter = PairFitter(renderer, tiny_tokenizer, limit, "truncate_prompt", "train")
    with pytest.raises(RecipeError) as err:
        render_split(synthetic_train, renderer, "x", fit=fitter)
    text = str(err.value)
    assert f"{len(needs)} of {len(synthetic_train)} train pairs do not fit training.max_length={limit}" in text
    for (record, level), tokens in needs.items():
        assert f"synthetic[train]: record {record!r} (elapse level {level}): {tokens} tokens" in text
    assert f"Raise training.max_length to at least {max(needs.values())}" in text
    assert "data.overlength=truncate_prompt_or_drop" in text
    # the same pairs left out, counted, when asked
    fitter = PairFitter(renderer, tiny_tokenizer, limit, "truncate_prompt_or_drop", "train")
    kept = render_split(synthetic_train, renderer, "x", fit=fitter)
    assert len(kept) == len(synthetic_train) - len(needs) == fitter.report["kept"]
    assert fitter.report["dropped"] == len(needs)
    assert not {(r["id"], r["elapse_level"]) for r in kept.to_list()} & set(needs)


def test_error_and_drop_modes(synthetic_train, renderer, tiny_tokenizer):
    limit = 600
    full = render_split(synthetic_train, renderer, "full").to_list()
    over = {(r["id"], r["elapse_level"]) for r in full if longest(tiny_tokenizer, r) > limit}
    with pytest.raises(
        RecipeError,
        match=rf"{len(over)} of {len(full)} train pairs are longer than "
        rf"training.max_length={limit} .*data.overlength=error",
    ):
        render_split(synthetic_train, renderer, "x", fit=PairFitter(renderer, tiny_tokenizer, limit, "error"))
    fitter = PairFitter(renderer, tiny_tokenizer, limit, "drop")
    kept = render_split(synthetic_train, renderer, "x", fit=fitter).to_list()
    assert {(r["id"], r["elapse_level"]) for r in kept} == {(r["id"], r["elapse_level"]) for r in full} - over
    assert kept == [r for r in full if (r["id"], r["elapse_level"]) not in over]  # the rest untouched
    assert (fitter.report["dropped"], fitter.report["prompt_truncated"]) == (len(over), 0)
    with pytest.raises(RecipeError, match="data.overlength='keep'"):
        PairFitter(renderer, tiny_tokenizer, limit, "keep")


def trl_counts(dataset, limit: int) -> dict:
    """Counted off TRL's tokenized dataset: the pairs it kept and the sequences its collator will cut."""
    rows = dataset.to_list()
    return {
        "kept": len(rows),
        "chosen_truncated": sum(len(r["prompt_ids"]) + len(r["chosen_ids"]) > limit for r in rows),
        "rejected_truncated": sum(len(r["prompt_ids"]) + len(r["rejected_ids"]) > limit for r in rows),
    }


@pytest.mark.parametrize("mode", ["trl", "truncate_prompt"])
def test_counts_are_what_trl_builds(mode, tmp_path, tiny_tokenizer):
    limit = 630  # some prompts fill it (TRL drops those pairs), some pairs only overflow with their completion
    recipe = load_recipe(
        "tiny",
        {
            "data.synthetic_trajectories": str(TRAJECTORIES),
            "training.max_length": str(limit),
            "data.overlength": mode,
            "output_dir": str(tmp_path / "run"),
        },
    )
    trainer = build_trainer(recipe)
    report = json.loads((tmp_path / "run" / LENGTHS_FILE).read_text())["train"]
    actual = trl_counts(trainer.train_dataset, limit)
    assert {k: report[k] for k in actual} == actual
    assert report["dropped"] == report["pairs"] - actual["kept"]
    if mode == "trl":  # TRL's own handling, now counted: pairs gone and completions cut
        assert report["dropped"] > 0 and actual["chosen_truncated"] > 0 and actual["rejected_truncated"] > 0
    else:  # every pair trained whole: nothing dropped, every completion ends on its EOS within max_length
        assert actual == {"kept": report["pairs"], "chosen_truncated": 0, "rejected_truncated": 0}
        assert report["prompt_truncated"] > 0
        eos = tiny_tokenizer.eos_token_id
        assert all(r["chosen_ids"][-1] == eos and r["rejected_ids"][-1] == eos for r in trainer.train_dataset)


def test_training_logs_writes_and_reports_the_counts(tmp_path):
    """The real entry point: one log line per split, <output_dir>/lengths.json, the W&B run summary."""
    out = tmp_path / "run"
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", WANDB_DIR=str(tmp_path), TOKENIZERS_PARALLELISM="false"
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "train/dpo.py"),
            "recipe=tiny",
            f"data.synthetic_trajectories={TRAJECTORIES}",
            "training.max_length=600",
            "training.max_steps=1",
            "training.per_device_train_batch_size=2",
            "training.report_to=[wandb]",
            f"output_dir={out}",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((out / LENGTHS_FILE).read_text())["train"]
    assert report["over_length"] == report["prompt_truncated"] > 0 and report["dropped"] == 0
    assert report["kept"] == report["pairs"] == 3 * TRAJECTORIES and report["max_tokens_trained"] <= 600
    line = next(x for x in proc.stderr.splitlines() if "train pairs: prompt + longer completion" in x)
    assert (
        f"{report['over_length']} of {report['pairs']} longer (data.overlength=truncate_prompt): "
        f"{report['prompt_truncated']} prompt-truncated"
        in line
        and "0 dropped" in line
    )
    runs = list((tmp_path / "wandb").glob("offline-run-*/*.wandb"))
    assert len(runs) == 1 and b"lengths/train/prompt_truncated" in runs[0].read_bytes()


def test_real_v1_at_the_tiny_recipe_length(tictoc_v1_dir, tmp_path, tiny_tokenizer):
    """TicToc v1 with the tiny recipe's max_length 1024: TRL alone drops and cuts pairs; the default keeps them
    whole or names those that cannot be."""
    limit = 1024
    common = {"data.source": "v1", "data.path": str(tictoc_v1_dir), "training.max_length": str(limit)}
    trl = build_trainer(load_recipe("tiny", {**common, "data.overlength": "trl", "output_dir": str(tmp_path / "trl")}))
    report = json.loads((tmp_path / "trl" / LENGTHS_FILE).read_text())["train"]
    actual = trl_counts(trl.train_dataset, limit)
    assert {k: report[k] for k in actual} == actual
    assert report["dropped"] > 0 and actual["chosen_truncated"] > 0 and actual["rejected_truncated"] > 0
    print("v1 train, TRL's own handling at 1024:", report)

    train = load_prepared(next((tmp_path / "trl" / "data").glob("pairs-*")))["train"]
    renderer = PromptRenderer(tiny_tokenizer)
    cannot = set()
    for row in train:
        short = renderer.pair(minimal_prompt(row["prompt"]), row["chosen"][0], row["rejected"][0], row["tools"])
        if longest(tiny_tokenizer, short) > limit:
            cannot.add((row["id"], row["elapse_level"]))
    assert cannot
    with pytest.raises(RecipeError, match=rf"{len(cannot)} of {len(train)} train pairs do not fit"):
        render_split(train, renderer, "x", fit=PairFitter(renderer, tiny_tokenizer, limit, "truncate_prompt"))

    fitted = build_trainer(
        load_recipe(
            "tiny", {**common, "data.overlength": "truncate_prompt_or_drop", "output_dir": str(tmp_path / "fit")}
        )
    )
    report = json.loads((tmp_path / "fit" / LENGTHS_FILE).read_text())["train"]
    assert trl_counts(fitted.train_dataset, limit) == {
        "kept": len(train) - len(cannot),
        "chosen_truncated": 0,
        "rejected_truncated": 0,
    }
    assert report["dropped"] == len(cannot) and report["prompt_truncated"] > 0
    print("v1 train, truncate_prompt_or_drop at 1024:", report)


def test_an_unknown_mode_stops_before_any_work(tmp_path, capsys):
    from timealign.train import dpo

    out = tmp_path / "run"
    assert dpo.main(["recipe=tiny", "data.overlength=keep", f"output_dir={out}"]) == 2
    assert (
        "data.overlength='keep' is not one of: truncate_prompt, truncate_prompt_or_drop, drop, error, trl"
        in capsys.readouterr().err
    )
    assert not out.exists()  # no data prepared, nothing claimed
