"""eval/run.py writes only into an empty or new out= folder, or one an evaluation wrote (`timealign.eval.runs`): a
folder holding a user's report.md and tictoc.json is refused with one line (exit 2) and nothing in it changes, as
training refuses an output_dir that no run wrote. The real entry point (`main`), the tiny model, the tictoc suite.
"""

from __future__ import annotations

from pathlib import Path

from helpers import tictoc_rows

from timealign.eval.runner import main


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def evaluate(tiny_model_dir, tmp_path: Path, out: Path) -> int:
    prepared = tmp_path / "prepared"
    if not prepared.exists():
        tictoc_rows(prepared)
    return main(
        [
            "recipe=tiny",
            f"checkpoint={tiny_model_dir}",
            "suites=tictoc",
            f"out={out}",
            f"data.prepared_dir={prepared}",
            "data.synthetic_trajectories=4",
            "eval.max_samples=3",
            "eval.max_new_tokens=4",
        ]
    )


def test_a_users_report_is_never_replaced(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("# my own report\n")
    (out / "tictoc.json").write_text('{"mine": true}\n')
    before = snapshot(out)

    assert evaluate(tiny_model_dir, tmp_path, out) == 2
    err = capsys.readouterr().err
    line = f"error: out={out} already holds files that no timealign run wrote (report.md, tictoc.json)"
    assert line in err and err.strip().endswith("Choose an empty or new folder: out=NEW_FOLDER")
    assert snapshot(out) == before  # not even the lock file


def test_an_evaluations_own_folder_is_reused_until_a_user_edits_its_report(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    out.mkdir()  # an empty folder is fine
    assert evaluate(tiny_model_dir, tmp_path, out) == 0
    assert evaluate(tiny_model_dir, tmp_path, out) == 0  # the folder is the evaluation's own: a rerun adds run 002
    assert (out / "latest").resolve() == (out / "runs" / "002").resolve()

    (out / "report.md").write_text((out / "report.md").read_text() + "\nMy notes on this run.\n")
    (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    capsys.readouterr()
    assert evaluate(tiny_model_dir, tmp_path, out) == 2
    assert "already holds files that no timealign run wrote (notes.txt, report.md)" in capsys.readouterr().err
    assert snapshot(out) == before
