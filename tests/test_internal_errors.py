"""Data that is not there is one line; a FileNotFoundError from inside timealign or a library is not (house rule:
never swallow exceptions).

The commands once mapped every FileNotFoundError to `error: MSG` plus the data.on_error=skip hint, with no traceback:
a temporary `datasets` cache file missing in TRL's reference precompute printed as bad input. Now only timealign's own
`MissingData` is one line (exit 2, no skip hint: skipping records cannot bring a file back); any other
FileNotFoundError keeps its traceback.
"""

from __future__ import annotations

import pytest

from timealign.config.cli import DATA_HINT, run_command
from timealign.data.records import MissingData


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def _library_file_gone(tmp_path):
    """A real library failure: `datasets` opening an Arrow cache file that is not there (as TRL's precompute did)."""
    from datasets import Dataset

    Dataset.from_file(str(tmp_path / "hf_datasets-tmp" / "cache-0123.arrow"))


@pytest.mark.parametrize("source", ["annotated", "v1"])
def test_a_data_folder_without_data_files_is_one_line(tmp_path, capsys, source):
    from timealign.data.commands import pairs_main

    empty = tmp_path / "data"
    empty.mkdir()  # exists, so the up-front data.path check passes; the loader finds no data file in it
    out = tmp_path / "out"
    code = pairs_main(["recipe=tiny", f"data.source={source}", f"data.path={empty}", f"out={out}"])
    err = capsys.readouterr().err
    lines = _lines(err)
    assert code == 2 and "Traceback" not in err, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {empty}"), err[-3000:]
    assert DATA_HINT not in err  # data.on_error=skip skips records; it cannot help with a file that is not there
    assert not out.exists()


def test_a_dialog_file_that_links_to_nothing_is_one_line(tmp_path, capsys):
    from timealign.data.commands import dialogs_main

    folder = tmp_path / "dialogs"
    folder.mkdir()
    (folder / "train.jsonl").symlink_to("gone.jsonl")
    code = dialogs_main(["recipe=tiny-timer", "data.source=dialogs", f"data.path={folder}", f"out={tmp_path / 'o'}"])
    err = capsys.readouterr().err
    assert code == 2 and _lines(err) == [
        f"error: {folder / 'train.jsonl'}: a symbolic link to gone.jsonl, which does not exist; "
        "replace it with the data file or remove it"
    ], err[-3000:]


def test_missing_data_is_still_a_file_not_found_error():
    """Code outside timealign that catches FileNotFoundError around the loaders still does (timealign's own callers,
    eval's data identity and TIMER inference among them, catch MissingData alone)."""
    assert issubclass(MissingData, FileNotFoundError)


@pytest.mark.parametrize("name", ["pairs", "dialogs"])
def test_data_prep_lets_a_library_file_not_found_error_through(tmp_path, capsys, name):
    """The data-prep commands' own error mapping (DATA_ERRORS) on a FileNotFoundError raised inside `datasets`."""
    from timealign.data import commands

    command = {"pairs": commands.PAIRS, "dialogs": commands.DIALOGS}[name]
    recipe = {"pairs": "recipe=tiny", "dialogs": "recipe=tiny-timer"}[name]
    with pytest.raises(FileNotFoundError, match="Failed to open local file") as raised:
        run_command(
            command,
            [recipe, f"out={tmp_path / 'o'}"],
            lambda invocation: _library_file_gone(tmp_path),
            errors=commands.DATA_ERRORS,
            hint=DATA_HINT,
        )
    assert not isinstance(raised.value, MissingData)
    assert "error:" not in capsys.readouterr().err  # not dressed as bad input


@pytest.mark.parametrize("module, recipe", [("dpo", "recipe=tiny"), ("sft", "recipe=tiny-timer")])
def test_training_lets_a_library_file_not_found_error_through(tmp_path, monkeypatch, capsys, module, recipe):
    """train/dpo.py and train/sft.py `main` (real parsing and error mapping) when the training itself hits a missing
    library file, as TRL's reference precompute did on rank 1: the traceback, not `error: ... (use data.on_error=skip`.
    The training is replaced by that library call (a real failing one) to stay fast."""
    import importlib

    train = importlib.import_module(f"timealign.train.{module}")
    monkeypatch.setattr(train, "run", lambda recipe: _library_file_gone(tmp_path))
    with pytest.raises(FileNotFoundError, match="Failed to open local file"):
        train.main([recipe, f"output_dir={tmp_path / 'out'}"])
    assert "error:" not in capsys.readouterr().err


def test_training_says_missing_data_in_one_line(tmp_path, capsys):
    """The same `main` through its real data prep: a v1 folder that holds no v1 file is one line, exit 2."""
    from timealign.train.dpo import main

    folder = tmp_path / "v1"
    folder.mkdir()
    out = tmp_path / "out"
    code = main(["recipe=tiny", "data.source=v1", f"data.path={folder}", f"output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err[-3000:]
    assert _lines(err)[-1] == (
        f"error: {folder}: no prefer{{Tool,NoTool}}_elapse_{{k}}.json files (TicToc v1 layout)"
    ), err[-3000:]
    assert DATA_HINT not in err


def test_timer_inference_says_a_missing_checkpoint_or_data_in_one_line(tmp_path, tiny_model_dir, capsys):
    """`python -m timealign.suites.timelychat.infer`: a checkpoint that is not there is refused before any data is
    read (not transformers' OSError about repo ids), and data that is not there is MissingData (exit 2, one line)."""
    from timealign.suites.timelychat.infer import main

    gone = tmp_path / "gone"
    assert main([f"checkpoint={gone}"]) == 2
    err = capsys.readouterr().err
    assert _lines(err) == [
        f"error: checkpoint={gone}: no such folder (the nearest existing folder is {tmp_path}); give an existing "
        "model folder or a hub id like org/name"
    ], err[-3000:]
    assert main([f"checkpoint={tiny_model_dir}", f"data={gone}.jsonl"]) == 2
    err = capsys.readouterr().err
    assert _lines(err) == [f"error: {gone}.jsonl: no such file or folder"], err[-3000:]


def test_timer_inference_lets_a_library_file_not_found_error_through(tmp_path, monkeypatch, capsys):
    """Its error mapping no longer dresses every FileNotFoundError as exit 1 with one line."""
    from timealign.suites.timelychat import infer

    monkeypatch.setattr(infer, "run", lambda invocation: _library_file_gone(tmp_path))
    with pytest.raises(FileNotFoundError, match="Failed to open local file"):
        infer.main(["checkpoint=org/name"])
    assert "error:" not in capsys.readouterr().err


def test_eval_data_identity_lets_a_library_file_not_found_error_through(tmp_path, monkeypatch):
    """eval's training-data comparison says `data.path=... is not on this machine` only when the data is absent
    (MissingData); a FileNotFoundError from inside a library propagates."""
    from timealign.config import load_recipe
    from timealign.data import prepared
    from timealign.eval import data_identity

    recipe = load_recipe("tiny")
    monkeypatch.setattr(prepared, "fingerprint_of", lambda recipe, kind: _library_file_gone(tmp_path))
    with pytest.raises(FileNotFoundError, match="Failed to open local file"):
        data_identity._fingerprint(recipe, "pairs")


def test_eval_data_identity_says_absent_data_is_not_compared(tmp_path):
    """The absent case itself: the recipe's data.path is not on this machine, so the fingerprint leaves the files out
    and says so (the training-data comparison still runs on every other setting)."""
    import dataclasses

    from timealign.config import load_recipe
    from timealign.eval import data_identity

    recipe = load_recipe("tiny")
    gone = tmp_path / "v1-elsewhere"
    recipe = dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, source="v1", path=str(gone)))
    fingerprint, note = data_identity._fingerprint(recipe, "pairs")
    assert note == f"data.path={gone} is not on this machine: files not compared"
    assert fingerprint is not None
