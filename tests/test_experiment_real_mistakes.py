"""experiment-real's own folder and the runs it reads (issue 51): out= is claimed as training claims its output_dir
(an empty folder, or this very command's run: a rerun goes on there; a user's folder or another run's is refused
naming what is there, and nothing it did not write is replaced); `rescore=` and `merge=` compare the data and the
prompt settings the runs scored, not only the sample ids; and each mistake below is one line (exit 2) before any
work. One reduced run of the tiny model (the plumbing, as in tests/test_experiment_real.py), made once."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from helpers import launcher_env, run_checked

from timealign.experiment.real import main
from timealign.experiment.real.claim import RECORD

RUN = ["base=tiny", "arms=base,method,clock", "seeds=0", "train_pairs=1", "batch_pairs=1", "eval_backend=hf",
       "eval_samples=4", "curve_every=0", "resamples=50", "overlap=false"]  # fmt: skip


def command(out, data, *extra) -> list[str]:
    return [sys.executable, "-m", "timealign.experiment.real", f"out={out}", f"data={data}", *RUN, *extra]


@pytest.fixture(scope="module")
def run(tictoc_v1_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "run"
    run_checked(command(out, tictoc_v1_dir), launcher_env(OMP_NUM_THREADS="1"), timeout=900)
    return out


def files(folder) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refusals(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def edited_copy(v1, folder, edit) -> str:
    """A copy of the v1 folder with `edit` applied to every trajectory (ids kept unless `edit` changes them)."""
    folder.mkdir()
    for source in v1.glob("*.json"):
        trajectories = json.loads(source.read_text())
        for t in trajectories:
            edit(t)
        (folder / source.name).write_text(json.dumps(trajectories))
    return str(folder)


def test_out_is_the_commands_own(run, tictoc_v1_dir, tmp_path, capsys):
    """A rerun of the same command goes on in its folder (trained models found trained, the evaluations resumed)
    and replaces its own real.json; a user's folder, another run's and an edited real.md are refused in one line
    naming what is there, and nothing in them changes."""
    record = json.loads((run / RECORD).read_text())
    assert set(record["written"]) == {"real.json", "real.md", "real.png"} and record["options"]["arms"] == (
        "base,method,clock"
    )  # fmt: skip
    before = json.loads((run / "real.json").read_text())
    assert main([f"out={run}", f"data={tictoc_v1_dir}", *RUN]) == 0  # in this process: no second start-up
    again = json.loads((run / "real.json").read_text())
    assert again["arms"] == before["arms"]  # the same models and samples: the same decisions
    assert json.loads((run / RECORD).read_text())["written"]["real.json"] != record["written"]["real.json"]
    assert sorted(p.name for p in (run / "eval" / "method-seed0" / "runs").iterdir()) == ["001", "002"]

    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    (user / "real.md").write_text("my report")
    other = tmp_path / "merged"
    assert main([f"out={other}", f"merge={run}"]) == 0  # a merge's folder
    kept = {folder: files(folder) for folder in (user, other, run)}
    capsys.readouterr()
    plain = [f"data={tictoc_v1_dir}", *RUN]  # valid options: only out= is wrong
    assert main([f"out={user}", *plain]) == 2
    assert main([f"out={user}", f"merge={run}"]) == 2
    assert main([f"out={user}", f"rescore={run}", "eval_backend=hf"]) == 2
    assert main([f"out={run}", *plain, "seeds=1"]) == 2  # another run (of other options) in out=
    assert main([f"out={other}", *plain]) == 2
    assert main([f"out={run}", f"merge={other}"]) == 2
    lines = refusals(capsys)
    assert len(lines) == 6, lines
    for line in lines[:3]:
        assert f"out={user} holds files this experiment did not write (notes.txt, real.md; no {RECORD}" in line
    assert "seeds=0 there, 1 now" in lines[3] and "another experiment-real run" in lines[3]
    assert "another experiment-real run" in lines[4] and "another experiment-real run" in lines[5]
    assert {folder: files(folder) for folder in kept} == kept
    (run / "real.md").write_text("edited by hand")
    assert main([f"out={run}", f"data={tictoc_v1_dir}", *RUN]) == 2  # the same command: its real.md is the user's
    assert "real.md (changed since this experiment wrote it)" in refusals(capsys)[0]
    assert (run / "real.md").read_text() == "edited by hand"


def test_rescore_and_merge_compare_what_the_runs_scored(run, tictoc_v1_dir, tmp_path, capsys):
    """The same sample ids on other data (every system prompt edited; ids matching no scenario) are refused by
    rescore= before any scoring, and a merge of runs on other data is refused, each in one line naming both."""

    def system_prompt(t):
        t["history"][0]["content"] += " Always answer in French."

    def rename(t):
        t["id"] = "unknownscenario_" + t["id"]

    edited = edited_copy(tictoc_v1_dir, tmp_path / "edited", system_prompt)
    renamed = edited_copy(tictoc_v1_dir, tmp_path / "renamed", rename)
    capsys.readouterr()
    older = tmp_path / "older"  # a run written before scored_on was kept: its prepared data's manifest says
    shutil.copytree(run, older)
    summary = json.loads((older / "real.json").read_text())
    for facts in summary["runs"].values():
        del facts["scored_on"]
    (older / "real.json").write_text(json.dumps(summary))
    for folder, data in ((run, edited), (run, renamed), (older, edited)):
        assert main([f"out={tmp_path / 'x'}", f"rescore={folder}", "eval_backend=hf", f"data={data}"]) == 2
    lines = refusals(capsys)
    assert len(lines) == 3, lines
    for line, folder, data in zip(lines, (run, run, older), (edited, renamed, edited)):
        assert f"base seed 0 of {folder} was scored on other data" in line and f"data={data} gives now" in line
        assert f"data={tictoc_v1_dir}" in line and "the data files' content" in line
    clock = tmp_path / "clock"  # the elapsed-time rule on the edited copy: a run of the same settings
    assert main([f"out={clock}", f"data={edited}", *[a for a in RUN if not a.startswith("arms=")], "arms=clock"]) == 0
    capsys.readouterr()
    assert main([f"out={tmp_path / 'merged'}", f"merge={run},{clock}"]) == 2
    lines = refusals(capsys)
    assert len(lines) == 1 and f"merge: {clock} (clock-seed0) and {run}" in lines[0], lines
    assert "scored other data" in lines[0]
    assert not (tmp_path / "x").exists() and not (tmp_path / "merged").exists()


def test_mistakes_are_one_line_before_any_work(run, tictoc_v1_dir, tmp_path, capsys):
    not_a_run = tmp_path / "not-a-run"
    not_a_run.mkdir()
    (not_a_run / "real.json").write_text(json.dumps({"numbers": [1, 2]}))
    no_weights = tmp_path / "no-weights"
    shutil.copytree(run, no_weights, ignore=shutil.ignore_patterns("model.safetensors"))
    out = tmp_path / "x"
    capsys.readouterr()
    mistakes = [
        [f"rescore={not_a_run}", "eval_backend=hf"],
        [f"rescore={no_weights}", "eval_backend=hf"],
        ["merge=,"],
        [f"merge={run}", "learning_rate=5", "seeds=7", "parallel=-3"],
        [f"data={tictoc_v1_dir}", "base=tiny", "arms=method,clock", "parallel=2", "overrides=training.learnin_rate=1",
         "eval_backend=hf"],
    ]  # fmt: skip
    for args in mistakes:
        assert main([f"out={out}", *args]) == 2, args
    lines = refusals(capsys)
    assert len(lines) == len(mistakes), lines
    assert f"{not_a_run / 'real.json'} is not an experiment-real run's real.json" in lines[0]
    assert f"{no_weights / 'models' / 'method-seed0'}: no trained model there (no weights file" in lines[1]
    assert "merge=',' names no run" in lines[2]
    assert "merge: seeds=7, learning_rate=5.0, parallel=-3: merged runs keep their own" in lines[3]
    assert "learnin_rate" in lines[4]
    assert not out.exists()
