"""The `timealign` console command (issue 24): subcommands for every entry point, and recipes found by name from a
pip install.

The install test builds the wheel (`pip wheel --no-deps`), installs it into a fresh venv without its dependencies
(torch & co. are made importable from this environment's site-packages by a plain .pth path line, which does not run
that directory's own .pth files, so this checkout's editable install stays invisible), then runs the installed
`timealign` script from a folder without recipes/: `--help` and a one-step offset-DPO run on `recipe=tiny`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from timealign.cli import PREP, SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_every_subcommand_with_its_script(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: timealign SUBCOMMAND")
    for name, sub in SUBCOMMANDS.items():
        assert f"  {name} " in text and sub.summary in text and f"[{sub.script}]" in text
    assert "  prep KIND " in text
    assert main(["prep", "--help"]) == 0
    text = capsys.readouterr().out
    for name, sub in PREP.items():
        assert f"  {name} " in text and f"[{sub.script}]" in text


@pytest.mark.parametrize(
    "argv, line",
    [
        (["dop"], "error: unknown subcommand timealign 'dop'. Did you mean: dpo?"),
        (["prep", "tictok"], "error: unknown subcommand timealign prep 'tictok'. Did you mean: tictoc?"),
        (["frobnicate"], "error: unknown subcommand timealign 'frobnicate'. Subcommands: dpo, sft,"),
    ],
)
def test_unknown_subcommand_is_one_line_and_exit_2(capsys, argv, line):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err


def test_no_subcommand_prints_the_usage_and_exits_2(capsys):
    assert main([]) == 2
    assert capsys.readouterr().err.startswith("usage: timealign SUBCOMMAND")


def test_usage_and_errors_name_the_subcommand_and_scripts_keep_theirs(capsys):
    from timealign.config.cli import help_text
    from timealign.experiment.cli import COMMAND as EXPERIMENT

    assert main(["prep", "reasoning", "suite=tcp", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: timealign prep reasoning suite=tcp [key=value ...]")
    assert main(["experiment", "recipe=tiny"]) == 2
    assert capsys.readouterr().err == "error: timealign experiment takes no recipe\n"
    # Outside the console command (the scripts, python -m MODULE) the usage line is the script's, as before.
    assert help_text(EXPERIMENT).startswith("usage: python -m timealign.experiment [key=value ...]")


def test_every_subcommand_target_is_an_entry_point_main():
    import importlib

    for sub in [*SUBCOMMANDS.values(), *PREP.values()]:
        module, function = sub.target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), sub.target
        script = sub.script.split()[-1]
        assert script.startswith("timealign.") or (ROOT / script).is_file(), sub.script


def test_the_wheel_ships_every_recipe(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {str(p.relative_to(ROOT / "recipes")) for p in (ROOT / "recipes").rglob("*.yaml")}
    assert shipped and {f"timealign/_recipes/{n}" for n in shipped} <= names
    assert "timealign/_recipes/accelerate/fsdp.yaml" in names and "timealign/_recipes/tiny.yaml" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "timealign = timealign.cli:main" in entry_points


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of this checkout, built from a copy (setuptools writes build/ and *.egg-info where it builds)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "recipes", src / "recipes")
    shutil.copytree(ROOT / "timealign", src / "timealign", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    assert (src / "timealign" / "_recipes").is_symlink()
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = dist.glob("timealign-*.whl")
    return wheel


@pytest.mark.slow
def test_pip_installed_timealign_finds_its_recipes_by_name(tmp_path):
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "timealign_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "elsewhere"  # no recipes/ here, and not the checkout
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TIMEALIGN_RECIPES")}
    env.update(HF_HUB_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")

    def run(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    found = run(
        str(python),
        "-c",
        "import timealign; from timealign.config.recipes import find_recipe; "
        "from timealign.config.accelerate import accelerate_config_path; "
        "print(timealign.__file__); print(find_recipe('tiny')); print(accelerate_config_path('zero3'))",
    )
    module, recipe, accelerate = map(Path, found.stdout.split())
    installed = site / "timealign"
    assert module == installed / "__init__.py", "the checkout's timealign was imported, not the installed one"
    assert recipe == installed / "_recipes" / "tiny.yaml" and not recipe.is_symlink()
    assert accelerate == installed / "_recipes" / "accelerate" / "zero3.yaml"
    assert recipe.read_text() == (ROOT / "recipes" / "tiny.yaml").read_text()
    # the memory planner's model shapes ship in the wheel too
    plan = run(str(python), "-m", "timealign.cluster", "plan", "recipe=llama8b", "gpu=h100").stdout
    assert "# memory plan: 4 GPU(s) h100" in plan and "\n# fits\n" in plan

    timealign = str(venv / "bin" / "timealign")
    text = run(timealign, "dpo", "recipe=tiny", "--help").stdout
    assert text.startswith("usage: [accelerate launch -m] timealign dpo recipe=NAME|--config PATH")
    assert "  tiny " in text and "  llama8b " in text and "training.<field>" in text

    out = tmp_path / "run"
    run(
        timealign,
        "dpo",
        "recipe=tiny",
        "training.max_steps=1",
        "data.synthetic_trajectories=4",
        "training.per_device_train_batch_size=4",
        f"output_dir={out}",
    )
    saved = (out / "timealign_recipe.yaml").read_text()
    assert "name: tiny" in saved and "synthetic_trajectories: 4" in saved
