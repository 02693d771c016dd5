"""Prepared data: made once per job whatever the launcher, fingerprinted, never reused for other settings or files.

The launcher tests start real processes (torchrun on CPU, one and two "nodes"; two independent jobs) that all
enter data prep at the same moment, with no prepared data, and count how often data prep ran.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import fields, replace
from pathlib import Path

import pytest
from helpers import free_port

from timealign.config import REPO_ROOT, DataSection, TimerSection, load_recipe
from timealign.config.cli import RANK_VARIABLES
from timealign.data import fingerprint as fp_module
from timealign.data.commands import dialogs_main, pairs_main
from timealign.data.fingerprint import NOT_DATA, data_fingerprint
from timealign.data.pairs import load_prepared
from timealign.data.prepared import (
    PreparedDataError,
    ensure_prepared,
    lock_file,
    prepared_dir_for,
)
from timealign.data.timer_prep import load_timer_prepared

WORKER = """
import hashlib, json, logging, os, sys, time
from pathlib import Path

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
from timealign.config import load_recipe
from timealign.data.prepared import ensure_prepared
from timealign.data.pairs import load_prepared
from timealign.data.timer_prep import load_timer_prepared

barrier, world, kind, task, recipe_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
overrides = dict(arg.split("=", 1) for arg in sys.argv[6:])
recipe = load_recipe(recipe_name, overrides, task=task)
me = os.environ.get("RANK", str(os.getpid()))
Path(barrier, me).touch()
while len(os.listdir(barrier)) < world:  # every process enters data prep at the same moment
    time.sleep(0.05)
folder = ensure_prepared(recipe, kind=kind)
data = (load_timer_prepared if kind == "dialogs" else load_prepared)(folder)
rows = {split: data[split].to_list() for split in sorted(data)}
digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
print("RESULT " + json.dumps({"rank": me, "folder": str(folder), "inode": os.stat(folder).st_ino,
                              "digest": digest}), flush=True)
"""


@pytest.fixture(scope="module")
def env():
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(REPO_ROOT),
    )
    for key in [k for k in env if k.startswith(("SLURM_", "ACCELERATE_", "OMPI_", "PMI_"))] + [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ]:
        env.pop(key, None)
    return env


def _worker(tmp_path: Path, world: int, kind: str, task: str, recipe: str, overrides: dict) -> list[str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    return [str(script), str(barrier), str(world), kind, task, recipe, *(f"{k}={v}" for k, v in overrides.items())]


def _results(outputs: list[str], world: int) -> list[dict]:
    results = [
        json.loads(line[len("RESULT ") :])
        for out in outputs
        for line in out.splitlines()
        if line.startswith("RESULT ")
    ]
    assert len(results) == world, "\n".join(outputs)[-4000:]
    return results


def _preparations(outputs: list[str], what: str) -> int:
    return sum(out.count(f"INFO timealign.data.{what}: wrote ") for out in outputs)


def _check_once(outputs: list[str], world: int, what: str) -> list[dict]:
    results = _results(outputs, world)
    assert _preparations(outputs, what) == 1, "\n".join(outputs)[-6000:]
    assert len({r["folder"] for r in results}) == 1 and len({r["inode"] for r in results}) == 1
    assert len({r["digest"] for r in results}) == 1, results
    return results


def test_torchrun_two_processes_prepare_once(env, tmp_path):
    """torchrun on CPU (accelerate calls every rank "main" there): rank 0 prepares, rank 1 waits and loads."""
    out = tmp_path / "out"
    overrides = {"output_dir": str(out), "data.synthetic_trajectories": "20"}
    args = _worker(tmp_path, 2, "pairs", "dpo", "tiny", overrides)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            *args,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = _check_once([proc.stdout + proc.stderr], 2, "pairs")
    recipe = load_recipe("tiny", overrides)
    assert results[0]["folder"] == str(prepared_dir_for(recipe))  # <output_dir>/data/pairs-<fingerprint>
    manifest = json.loads((Path(results[0]["folder"]) / "manifest.json").read_text())
    assert manifest["fingerprint"]["sha256"] == data_fingerprint("pairs", recipe.data).sha256
    assert [p.name for p in (out / "data").iterdir() if ".tmp-" in p.name] == []


def test_two_nodes_only_global_rank_zero_prepares(env, tmp_path):
    """Two torchrun agents (two "nodes", LOCAL_RANK 0 on both) on one shared folder: TIMER dialogs made once."""
    prepared = tmp_path / "prepared"
    overrides = {
        "output_dir": str(tmp_path / "out"),
        "data.prepared_dir": str(prepared),
        "timer.synthetic_dialogs": "24",
        "timer.synthetic_eval_dialogs": "6",
    }
    args = _worker(tmp_path, 2, "dialogs", "sft", "tiny-timer", overrides)
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node_rank",
                str(node),
                "--nproc_per_node",
                "1",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                port,
                *args,
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)[-4000:]
    results = _check_once(outputs, 2, "timer_prep")
    assert {r["rank"] for r in results} == {"0", "1"} and results[0]["folder"] == str(prepared)
    assert "wrote " in outputs[0] and "wrote " not in outputs[1]  # node 0's rank 0, never node 1's local rank 0
    assert json.loads((prepared / "manifest.json").read_text())["splits"]["train"]["dialogs"] == 24


def test_two_jobs_racing_on_one_folder_prepare_once(env, tmp_path):
    """Two independent jobs (each its own rank 0) on one data.prepared_dir: the lock lets one prepare."""
    overrides = {
        "output_dir": str(tmp_path / "out"),
        "data.prepared_dir": str(tmp_path / "prepared"),
        "data.synthetic_trajectories": "20",
    }
    args = _worker(tmp_path, 2, "pairs", "dpo", "tiny", overrides)
    procs = [
        subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)[-4000:]
    _check_once(outputs, 2, "pairs")
    assert sum(out.count("reusing ") for out in outputs) == 1


def test_data_prep_takes_the_launchers_rank_not_the_srun_task(monkeypatch, tmp_path):
    """One rank for all: data prep asks the launcher's rank as logging and the output_dir claim do. SLURM_PROCID
    numbers srun tasks (slurm/launch.sh: one per node, each starting `accelerate launch`), so a process srun started
    without a launcher (no RANK) is its own rank 0 and prepares its data; it does not wait data.prep_timeout for a
    rank 0 that never comes. Where the launcher set RANK, RANK wins over SLURM_PROCID."""
    for key in (*RANK_VARIABLES, "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    overrides = {"output_dir": str(tmp_path / "out"), "data.synthetic_trajectories": "6", "data.prep_timeout": "1"}
    monkeypatch.setenv("SLURM_PROCID", "1")
    folder = ensure_prepared(load_recipe("tiny", {**overrides, "data.prepared_dir": str(tmp_path / "a")}))
    assert json.loads((folder / "manifest.json").read_text())["fingerprint"]
    monkeypatch.setenv("SLURM_PROCID", "0")  # node 0's task, and the launcher's second process on it
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(TimeoutError, match="rank 1 waited"):
        ensure_prepared(load_recipe("tiny", {**overrides, "data.prepared_dir": str(tmp_path / "b")}))


# ------------------------------------------------------------------------------------------- never silent reuse


def _wrote(caplog) -> int:
    return sum(1 for r in caplog.records if r.getMessage().startswith("wrote "))


def test_issue_scenario_explicit_folder_refuses_other_settings(tmp_path, caplog):
    """data.synthetic_trajectories=20, then 60 + balance_train_labels on the same prepared_dir: refused."""
    caplog.set_level(logging.INFO)
    folder = tmp_path / "prepared"
    first = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "20"})
    assert ensure_prepared(first) == folder and _wrote(caplog) == 1
    inode = os.stat(folder).st_ino
    assert ensure_prepared(first) == folder and _wrote(caplog) == 1  # unchanged settings: reused, not re-made
    again = load_recipe(
        "tiny",
        {
            "data.prepared_dir": str(folder),
            "data.timestamps": "false",
            "data.offset_scale": "0",
            "data.synthetic_trajectories": "20",
        },
    )
    assert ensure_prepared(again) == folder and _wrote(caplog) == 1  # render-time settings change no data

    second = load_recipe(
        "tiny",
        {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "60", "data.balance_train_labels": "true"},
    )
    with pytest.raises(PreparedDataError) as err:
        ensure_prepared(second)
    message = str(err.value)
    assert f"{folder} holds TicToc offset-DPO pairs prepared from other data than this run asks for" in message
    assert "data.synthetic_trajectories: 20 (prepared) -> 60 (this run)" in message
    assert "data.balance_train_labels: false (prepared) -> true (this run)" in message
    assert "drop data.prepared_dir" in message and f"python data_prep/tictoc.py recipe=tiny out={folder}" in message
    assert "run with data.balance_train_labels=false data.synthetic_trajectories=20" in message
    with pytest.raises(PreparedDataError):
        ensure_prepared(second, kind="pairs")  # the TicToc eval suite's call
    assert _wrote(caplog) == 1 and os.stat(folder).st_ino == inode
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["data"]["synthetic_trajectories"] == 20 and manifest["data"]["balance_train_labels"] is False


def test_issue_scenario_default_folder_prepares_anew(tmp_path, caplog):
    """Without data.prepared_dir the folder is keyed by the fingerprint: other settings, other folder."""
    caplog.set_level(logging.INFO)
    out = str(tmp_path / "out")
    first = load_recipe("tiny", {"output_dir": out, "data.synthetic_trajectories": "20"})
    second = load_recipe(
        "tiny", {"output_dir": out, "data.synthetic_trajectories": "60", "data.balance_train_labels": "true"}
    )
    a = ensure_prepared(first)
    b = ensure_prepared(second)
    assert a != b and a.parent == b.parent == tmp_path / "out" / "data" and _wrote(caplog) == 2
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["data"]["synthetic_trajectories"] == 60 and manifest["data"]["balance_train_labels"] is True
    train = load_prepared(b)["train"]
    for scenario in set(train["scenario"]):  # balanced: what the second run asked for
        labels = [r["label"] for r in train if r["scenario"] == scenario]
        assert labels.count(labels[0]) * 2 == len(labels)
    assert len(load_prepared(b)["test"]) > len(load_prepared(a)["test"])
    assert ensure_prepared(first) == a and ensure_prepared(second) == b and _wrote(caplog) == 2  # reused


@pytest.fixture
def v1_copy(tictoc_v1_dir, tmp_path) -> Path:
    copy = tmp_path / "v1"
    shutil.copytree(tictoc_v1_dir, copy)
    return copy


def test_changed_source_file_is_not_reused(v1_copy, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    folder = tmp_path / "prepared"
    recipe = load_recipe(
        "tiny",
        {
            "data.source": "v1",
            "data.path": str(v1_copy),
            "data.prepared_dir": str(folder),
            "output_dir": str(tmp_path / "out"),
        },
    )
    ensure_prepared(recipe)
    before = len(load_prepared(folder)["train"]) + len(load_prepared(folder)["test"])

    moved = tmp_path / "moved"  # the same files elsewhere: the same data, reused
    shutil.copytree(v1_copy, moved)
    assert ensure_prepared(replace(recipe, data=replace(recipe.data, path=str(moved)))) == folder
    assert _wrote(caplog) == 1

    name = sorted(p.name for p in v1_copy.glob("*.json"))[0]
    records = json.loads((v1_copy / name).read_text())
    (v1_copy / name).write_text(json.dumps(records[:-1]))  # one record fewer
    with pytest.raises(
        PreparedDataError, match=rf"data.path file {name}: content changed \(sha256 \w{{12}} -> "
    ) as err:
        ensure_prepared(recipe)
    assert "run with" not in str(err.value)  # no override brings the old files back
    default = replace(recipe, data=replace(recipe.data, prepared_dir=None))
    anew = ensure_prepared(default)
    assert anew.parent == tmp_path / "out" / "data" and _wrote(caplog) == 2
    assert len(load_prepared(anew)["train"]) + len(load_prepared(anew)["test"]) == before - 1


def test_timer_dialogs_fingerprint_covers_timer_data_settings(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    folder = tmp_path / "prepared"
    base = {"data.prepared_dir": str(folder), "timer.synthetic_dialogs": "12", "timer.synthetic_eval_dialogs": "4"}
    recipe = load_recipe("tiny-timer", base, task="sft")
    assert ensure_prepared(recipe) == folder and _wrote(caplog) == 1
    training_only = load_recipe(
        "tiny-timer",
        {**base, "timer.lambda_time": "0", "timer.special_tokens": "false", "data.synthetic_trajectories": "7"},
        task="sft",
    )
    assert ensure_prepared(training_only) == folder and _wrote(caplog) == 1
    more = load_recipe("tiny-timer", {**base, "timer.synthetic_dialogs": "30"}, task="sft")
    with pytest.raises(PreparedDataError, match=r"timer.synthetic_dialogs: 12 \(prepared\) -> 30 \(this run\)"):
        ensure_prepared(more)
    with pytest.raises(PreparedDataError, match="holds TIMER SFT dialogs"):
        ensure_prepared(load_recipe("tiny", {"data.prepared_dir": str(folder)}))  # pairs wanted, dialogs there
    assert len(load_timer_prepared(folder)["train"]) == 12


_ALTERNATIVES = {
    "data.score_orientation": "tool_low",
    "data.balance_within": "split",
    "data.validation_by": "scenario",
    "data.unknown_scenarios": "bucket",
    "data.direct_answer": "last_assistant_text",
    "timer.order": "utterance_first",
    "timer.loss_turns": "target",
    "timer.loss_normalization": "per_type",
    "timer.lora_new_tokens": "modules_to_save",
    "data.path": "/nonexistent",
    "data.protocol": "paper",
    "data.assume_timezone": "UTC",
    "data.overlength": "drop",
    "data.elapsed_separator": "newline",
}


def _changed(section, prefix: str, keys: set[str]):
    """`section` with every field named in `keys` (minus where the data goes) set to another valid value."""
    changes = {}
    for f in fields(section):
        key, value = f"{prefix}.{f.name}", getattr(section, f.name)
        if key not in keys or key == "data.prepared_dir":
            continue
        if key in _ALTERNATIVES:
            changes[f.name] = _ALTERNATIVES[key]
        elif isinstance(value, bool):
            changes[f.name] = not value
        elif isinstance(value, (int, float)):
            changes[f.name] = value + 1
        else:
            raise AssertionError(f"give {key} an alternative value in _ALTERNATIVES")
    return replace(section, **changes)


def _rows_digest(data) -> str:
    rows = {split: data[split].to_list() for split in sorted(data)}
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


@pytest.mark.parametrize("kind", ["pairs", "dialogs"])
def test_settings_left_out_of_the_fingerprint_do_not_change_the_data(kind, tmp_path):
    """Every NOT_DATA field changed at once: same fingerprint and the very same prepared rows."""
    from timealign.data.pairs import prepare
    from timealign.data.timer_prep import prepare_timer_data

    data, timer = DataSection(synthetic_trajectories=6), TimerSection(synthetic_dialogs=8, synthetic_eval_dialogs=4)
    other_data = _changed(data, "data", NOT_DATA[kind])
    other_timer = _changed(
        timer, "timer", NOT_DATA[kind] if kind == "dialogs" else {f"timer.{f.name}" for f in fields(timer)}
    )
    assert other_data != data and other_timer != timer
    assert data_fingerprint(kind, data, timer) == data_fingerprint(kind, other_data, other_timer)
    load = load_prepared if kind == "pairs" else load_timer_prepared
    for name, (d, t) in {"a": (data, timer), "b": (other_data, other_timer)}.items():
        prepare(d, tmp_path / name) if kind == "pairs" else prepare_timer_data(d, t, tmp_path / name)
    assert _rows_digest(load(tmp_path / "a")) == _rows_digest(load(tmp_path / "b"))
    # and a data setting does count
    assert data_fingerprint(kind, replace(data, seed=1), timer) != data_fingerprint(kind, data, timer)


def test_data_format_version_bump_invalidates_old_folders(tmp_path, monkeypatch):
    folder = tmp_path / "prepared"
    recipe = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "4"})
    ensure_prepared(recipe)
    monkeypatch.setattr(fp_module, "DATA_FORMAT_VERSION", fp_module.DATA_FORMAT_VERSION + 1)
    new = fp_module.DATA_FORMAT_VERSION  # the bumped version; the folder was written with the one before
    old = new - 1
    with pytest.raises(PreparedDataError, match=rf"data format version: {old} \(prepared\) -> {new} \(this code"):
        ensure_prepared(recipe)
    with pytest.raises(
        PreparedDataError, match=f"written in data format version {old}; this code reads version {new}"
    ):
        load_prepared(folder)


def test_folder_from_an_older_version_gives_a_clear_message(tmp_path):
    folder = tmp_path / "prepared"
    recipe = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "4"})
    ensure_prepared(recipe)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["fingerprint"]  # what data prep wrote before fingerprints
    (folder / "manifest.json").write_text(json.dumps(manifest))
    expected = f"{folder} was prepared by an older timealign: its manifest.json has no data fingerprint"
    for call in (lambda: ensure_prepared(recipe), lambda: load_prepared(folder)):
        with pytest.raises(PreparedDataError, match=expected) as err:
            call()
        assert f"python data_prep/tictoc.py out={folder}" in str(err.value)
    with pytest.raises(PreparedDataError, match="python data_prep/timelychat.py"):
        load_timer_prepared(folder)


def test_a_folder_with_other_files_is_neither_used_nor_replaced(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    recipe = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "4"})
    with pytest.raises(PreparedDataError, match="holds files but no manifest.json"):
        ensure_prepared(recipe)
    assert pairs_main(["recipe=tiny", f"out={folder}", "data.synthetic_trajectories=4"]) == 2
    assert "holds files but no manifest.json" in capsys.readouterr().err
    assert (folder / "notes.txt").read_text() == "keep me" and sorted(p.name for p in folder.iterdir()) == [
        "notes.txt"
    ]


def test_interrupted_data_prep_leftovers_are_removed(tmp_path):
    folder = tmp_path / "prepared"
    stale = tmp_path / ".prepared.tmp-otherhost-123"
    (stale / "dataset").mkdir(parents=True)
    recipe = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "4"})
    ensure_prepared(recipe)
    assert not stale.exists() and (folder / "manifest.json").is_file()


# ------------------------------------------------------------------------------------------------- waiting


def test_other_ranks_wait_then_say_which_folder_and_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    folder = tmp_path / "prepared"
    recipe = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.prep_timeout": "1"})
    with pytest.raises(TimeoutError) as err:
        ensure_prepared(recipe)
    assert f"rank 1 waited 1 s (data.prep_timeout) for rank 0 to prepare {folder}" in str(err.value)
    assert str(lock_file(folder)) in str(err.value) and not folder.exists()


def test_rank_zero_waits_for_the_lock_of_another_job(tmp_path):
    folder = tmp_path / "prepared"
    folder.parent.mkdir(exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from filelock import FileLock
        with FileLock({str(lock_file(folder))!r}):
            print("held", flush=True)
            time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        recipe = load_recipe(
            "tiny", {"data.prepared_dir": str(folder), "data.prep_timeout": "1", "data.synthetic_trajectories": "4"}
        )
        with pytest.raises(
            TimeoutError,
            match=rf"for the lock {lock_file(folder)}: another process kept preparing "
            rf"data into {folder}",
        ):
            ensure_prepared(recipe)
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------------------ commands


def test_prep_commands_write_the_fingerprint_that_training_checks(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)
    pairs, dialogs = tmp_path / "pairs", tmp_path / "dialogs"
    assert pairs_main(["recipe=tiny", f"out={pairs}", "data.synthetic_trajectories=6"]) == 0
    assert (
        dialogs_main(
            ["recipe=tiny-timer", f"out={dialogs}", "timer.synthetic_dialogs=8", "timer.synthetic_eval_dialogs=2"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    recipe = load_recipe("tiny", {"data.prepared_dir": str(pairs), "data.synthetic_trajectories": "6"})
    timer = load_recipe(
        "tiny-timer",
        {"data.prepared_dir": str(dialogs), "timer.synthetic_dialogs": "8", "timer.synthetic_eval_dialogs": "2"},
        task="sft",
    )
    for folder, kind, r in ((pairs, "pairs", recipe), (dialogs, "dialogs", timer)):
        wanted = data_fingerprint(kind, r.data, r.timer)
        assert json.loads((folder / "manifest.json").read_text())["fingerprint"]["sha256"] == wanted.sha256
        assert f'"fingerprint": "{wanted.sha256[:12]}"' in printed
    assert _wrote(caplog) == 2
    assert ensure_prepared(recipe) == pairs and ensure_prepared(timer) == dialogs and _wrote(caplog) == 2  # reused
    # the command replaces what it is pointed at (it was asked to prepare); training then refuses the old settings
    assert pairs_main(["recipe=tiny", f"out={pairs}", "data.synthetic_trajectories=4"]) == 0
    with pytest.raises(PreparedDataError, match=r"data.synthetic_trajectories: 4 \(prepared\) -> 6 \(this run\)"):
        ensure_prepared(recipe)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


# -- the data written is what is used: data prep seals its files' hashes, every load checks them --------------------


def _swap_first_pair(folder: Path) -> Path:
    """One pair's chosen and rejected swapped, in the prepared Arrow file itself (a hand edit)."""
    from datasets import load_from_disk

    split = load_from_disk(str(folder / "dataset" / "train"))
    rows = split.to_list()
    rows[0]["chosen"], rows[0]["rejected"] = rows[0]["rejected"], rows[0]["chosen"]
    edited = folder.parent / "edited"
    split.from_list(rows, features=split.features).save_to_disk(str(edited))
    target = folder / "dataset" / "train" / "data-00000-of-00001.arrow"
    shutil.copyfile(edited / "data-00000-of-00001.arrow", target)
    shutil.rmtree(edited)
    return target


def test_a_prepared_folder_edited_by_hand_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "prepared"
    recipe = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "8"})
    ensure_prepared(recipe)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "dataset/train/data-00000-of-00001.arrow" in manifest["content"] and "rejects.jsonl" in manifest["content"]
    assert len(load_prepared(folder)["train"]) == manifest["splits"]["train"]["pairs"] == 24
    load_prepared(folder)  # loading again (datasets may add its caches beside the data): still fine

    pristine = (folder / "manifest.json").read_text()
    manifest["splits"]["train"]["pairs"] = 25  # the manifest's count edited
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    with pytest.raises(PreparedDataError, match=f"{folder / 'manifest.json'} was edited after data prep wrote it"):
        load_prepared(folder)
    manifest["manifest_sha256"] = fp_module._manifest_digest(manifest)  # edited consistently: the rows still count
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    with pytest.raises(PreparedDataError, match=r"dataset/train holds 24 rows, its manifest.json says 25 pairs"):
        load_prepared(folder)
    (folder / "manifest.json").write_text(pristine)

    target = _swap_first_pair(folder)
    with pytest.raises(PreparedDataError) as err:
        load_prepared(folder)
    message = str(err.value)
    assert message.startswith(f"{target} was changed after data prep wrote it (sha256 ") and "\n" not in message
    assert "Re-run data prep (`python data_prep/tictoc.py recipe=NAME out=" in message
    assert "or delete the folder (training prepares it again)" in message


@pytest.mark.slow
def test_training_on_an_edited_prepared_folder_stops_before_training(tmp_path):
    folder = tmp_path / "prepared"
    ensure_prepared(load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "8"}))
    target = _swap_first_pair(folder)
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "train/dpo.py"),
            "recipe=tiny",
            "data.synthetic_trajectories=8",
            f"data.prepared_dir={folder}",
            "training.max_steps=1",
            f"output_dir={tmp_path / 'run'}",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"error: {target} was changed after data prep wrote it" in proc.stderr
    assert not (tmp_path / "run" / "model.safetensors").exists()
