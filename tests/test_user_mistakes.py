"""Every user mistake of issues 21 and 22 is one line and exit 2, naming the key, file or record and the fix, before
the work it would spoil (docs/bad_input.md lists the classes; `test_the_doc_lists_every_class_and_each_has_a_test`
keeps the two in step).

Each case runs the real entry point's `main` in this process (as `python train/dpo.py ...` would, without the
interpreter start) in an empty working folder, and checks: exit code 2, exactly one line on stderr starting with
`error: `, no traceback, the expected text, and (where the mistake is found before any work) nothing written.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, rid, v1_record, write_v1

from timealign.config import RecipeError, load_recipe

MAINS = {
    "train/dpo.py": "timealign.train.dpo:main",
    "train/sft.py": "timealign.train.sft:main",
    "data_prep/tictoc.py": "timealign.data.commands:pairs_main",
    "data_prep/timelychat.py": "timealign.data.commands:dialogs_main",
    "eval/run.py": "timealign.eval.runner:main",
}

V1_NAMES = (
    "preferTool_elapse_0.json",
    "preferTool_elapse_1.json",
    "preferTool_elapse_2.json",
    "preferNoTool_elapse_0.json",
    "preferNoTool_elapse_1.json",
)


def _setup_empty_v1(tmp: Path) -> None:
    write_v1(tmp / "data" / "v1", {name: [] for name in V1_NAMES})


def _setup_all_bad_v1(tmp: Path) -> None:
    write_v1(tmp / "data" / "v1", {"preferTool_elapse_1.json": [v1_record(rid(1), id=7), v1_record(rid(2), id=8)]})


def _setup_all_bad_dialogs(tmp: Path) -> None:
    (tmp / "data").mkdir()
    bad = {
        "speaker_list": ["A", "B"],
        "context": ["Hi"],
        "target_speaker": "B",
        "time_elapsed": "5 minutes",
        "timely_response": "Back!",
    }
    (tmp / "data" / "train.jsonl").write_text(json.dumps({**bad, "id": "d1"}) + "\n")


def _setup_not_a_model(tmp: Path) -> None:
    (tmp / "run" / "logs").mkdir(parents=True)


def _setup_checkpoint_inside(tmp: Path) -> None:
    for step in (2, 10):
        (tmp / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp / "run" / f"checkpoint-{step}" / "config.json").write_text("{}")


def _setup_empty_recipe(tmp: Path) -> None:
    (tmp / "empty.yaml").write_text("")


def _setup_release_linking_to_its_parent(tmp: Path) -> None:
    """A hub-layout release D with a link to the folder around it (`ln -s .. D/up`): the walk meets D again as
    D/up/D, which is no link itself (os.readlink of it was the traceback)."""
    write_v1(tmp / "P" / "D", {"preferTool_elapse_1.json": [v1_record(rid(1))]})
    (tmp / "P" / "D" / "up").symlink_to("..")


def _missing_integration() -> tuple[str, str]:
    """A training.report_to integration not installed here (tensorboard where it is not), and its pip package."""
    from timealign.config.validate import REPORT_TO_PACKAGES, _installed

    for name in ("tensorboard", *REPORT_TO_PACKAGES):
        modules, package = REPORT_TO_PACKAGES[name]
        if not any(_installed(m) for m in modules):
            return name, package
    pytest.skip("every training.report_to integration is installed here")


# (class id, how users run it, what the one error line says, a setup of the case's folder or None, whether the
# mistake is found before anything is written). {tmp} is the case's own working folder.
CLI_CASES = [
    (
        "source-typo",
        ["train/dpo.py", "recipe=tiny", "data.source=vl", "data.path={tmp}"],
        "data.source='vl' is not one of: synthetic, v1, annotated, hub, timelychat, dialogs (did you mean: v1?)",
        None,
        True,
    ),
    (
        "source-of-the-other-task",
        ["train/sft.py", "recipe=tiny-timer", "data.source=v1", "data.path={tmp}"],
        "data.source=v1 is a data source of task dpo (TicToc pairs); task sft (this recipe, tiny-timer) reads "
        "data.source=synthetic | timelychat | dialogs | hub",
        None,
        True,
    ),
    (
        "source-unknown-before-path",
        ["data_prep/tictoc.py", "recipe=tiny", "data.source=csv"],
        "data.source='csv' is not one of:",
        None,
        True,
    ),
    (
        "on-error-unknown",
        ["data_prep/tictoc.py", "recipe=tiny", "data.on_error=ignore"],
        "data.on_error='ignore' is not one of: raise, skip",
        None,
        True,
    ),
    (
        "max-steps-negative",
        ["train/dpo.py", "recipe=tiny", "training.max_steps=-5"],
        "training.max_steps=-5 must be -1 or >= 1 (-1: train by training.num_train_epochs)",
        None,
        True,
    ),
    (
        "checkpoint-not-a-model",
        ["eval/run.py", "recipe=tiny", "checkpoint={tmp}/run", "out={tmp}/eval"],
        "checkpoint={tmp}/run: this folder holds no model (no config.json or adapter_config.json): give the folder",
        _setup_not_a_model,
        False,
    ),
    (
        "checkpoint-holds-checkpoints",
        ["eval/run.py", "recipe=tiny", "checkpoint={tmp}/run", "out={tmp}/eval"],
        "checkpoint={tmp}/run: this folder holds no model (no config.json or adapter_config.json): did you mean "
        "checkpoint={tmp}/run/checkpoint-10?",
        _setup_checkpoint_inside,
        False,
    ),
    (
        "model-is-a-file",
        ["train/dpo.py", "recipe=tiny", "model.name_or_path={tmp}/empty.yaml"],
        "model.name_or_path={tmp}/empty.yaml: a file, not a model folder",
        _setup_empty_recipe,
        False,
    ),
    (
        "hub-offline",
        ["train/dpo.py", "recipe=tiny", "data.source=hub", "data.path=yizecheng/TicToc"],
        "data.path=yizecheng/TicToc (data.source=hub): the hub dataset is not in the local cache",
        None,
        True,
    ),
    (
        "model-not-cached-offline",
        ["train/sft.py", "recipe=tiny-timer", "model.name_or_path=someone/NoModel"],
        "model.name_or_path=someone/NoModel: not in the local hub cache",
        None,
        True,
    ),
    (
        "push-to-hub-offline",
        ["train/dpo.py", "recipe=tiny", "training.push_to_hub=true"],
        "training.push_to_hub=true but HF_HUB_OFFLINE=1 forbids every hub request",
        None,
        True,
    ),
    (
        "nothing-usable-empty-files",
        ["data_prep/tictoc.py", "recipe=tiny", "data.source=v1", "data.path={tmp}/data/v1", "out={tmp}/out"],
        "data.path={tmp}/data/v1 (data.source=v1): no records at all (every data file is an empty list)",
        _setup_empty_v1,
        False,
    ),
    (
        "nothing-usable-skip",
        [
            "data_prep/tictoc.py",
            "recipe=tiny",
            "data.source=v1",
            "data.path={tmp}/data/v1",
            "data.on_error=skip",
            "out={tmp}/out",
        ],
        "data.path={tmp}/data/v1 (data.source=v1): no usable pairs: all 2 records were rejected (first: "
        "{tmp}/data/v1/preferTool_elapse_1.json: record '#0': `id` must be a non-empty string, got int 7)",
        _setup_all_bad_v1,
        False,
    ),
    (
        "nothing-usable-dialogs",
        [
            "data_prep/timelychat.py",
            "recipe=tiny-timer",
            "data.source=timelychat",
            "data.path={tmp}/data",
            "data.on_error=skip",
            "out={tmp}/out",
        ],
        "data.path={tmp}/data (data.source=timelychat): no usable dialogs: all 1 records were rejected",
        _setup_all_bad_dialogs,
        False,
    ),
    (
        "overlength-drops-all",
        [
            "train/dpo.py",
            "recipe=tiny",
            "training.max_length=64",
            "data.overlength=drop",
            "data.synthetic_trajectories=4",
        ],
        "all 12 train pairs are left out by training.max_length=64 (data.overlength=drop;",
        None,
        False,
    ),
    (
        "overlength-trl-drops-all",
        [
            "train/dpo.py",
            "recipe=tiny",
            "training.max_length=64",
            "data.overlength=trl",
            "data.synthetic_trajectories=4",
        ],
        "all 12 train pairs are left out by training.max_length=64 (data.overlength=trl;",
        None,
        False,
    ),
    (
        "report-to-unknown",
        ["train/dpo.py", "recipe=tiny", "training.report_to=[wandb,tensorbord]"],
        "training.report_to=[wandb, tensorbord]: tensorbord is not one of: none, all, azure_ml, comet_ml, mlflow, "
        "neptune, tensorboard, trackio, wandb, codecarbon, clearml, dagshub, flyte, dvclive, swanlab, kubeflow "
        "(did you mean: tensorboard?)",
        None,
        True,
    ),
    (
        "report-to-not-a-name",
        ["train/sft.py", "recipe=tiny-timer", "training.report_to=5"],
        "training.report_to=5 must be an integration name or a list of them (none: no reporting)",
        None,
        True,
    ),
    (
        "loss-weights-negative",
        ["train/dpo.py", "recipe=tiny", "training.loss_type=[sigmoid,sft]", "training.loss_weights=[1,-1]"],
        "training.loss_weights=[1, -1]: each weight must be a finite number >= 0 ([-1] is not)",
        None,
        True,
    ),
    (
        "loss-weights-not-numbers",
        ["train/dpo.py", "recipe=tiny", "training.loss_type=[sigmoid,sft]", "training.loss_weights=[1,abc]"],
        "training.loss_weights=[1, abc] must be a list of numbers, one per training.loss_type entry ([sigmoid, sft])",
        None,
        True,
    ),
    (
        "loss-weights-all-zero",
        ["train/dpo.py", "recipe=tiny", "training.loss_type=[sigmoid,sft]", "training.loss_weights=[0,0]"],
        "training.loss_weights=[0, 0]: every weight 0 makes the loss 0, so nothing would be learnt",
        None,
        True,
    ),
    (
        "loss-type-unknown-order",
        ["train/dpo.py", "recipe=tiny", "training.loss_type=[sft,sigmoid]"],
        "training.loss_type=[sft, sigmoid]: offset-DPO implements [sigmoid] (the offset loss) or [sigmoid, sft]",
        None,
        True,
    ),
    (
        "loss-type-on-sft",
        ["train/sft.py", "recipe=tiny-timer", "training.loss_type=[sigmoid,sft]"],
        "training.loss_type=[sigmoid,sft]: timealign sft (the TIMER trainer) implements loss_type=nll only",
        None,
        True,
    ),
    (
        "prompt-cache-attention",
        ["train/dpo.py", "recipe=tiny", "dpo.prompt_cache=true", "model.attn_implementation=flex_attention"],
        "dpo.prompt_cache=true is verified with model.attn_implementation sdpa or eager, not flex_attention: set "
        "model.attn_implementation=sdpa, or dpo.prompt_cache=false",
        None,
        True,
    ),
    (
        "report-to-not-installed",
        ["train/dpo.py", "recipe=tiny", "training.report_to=[{missing}]"],
        "training.report_to=[{missing}]: {missing} is not installed here (the Trainer would stop on it after data "
        "prep): `pip install {package}`, or take it out of training.report_to (none: no reporting)",
        None,
        True,
    ),
    (
        "hub-link-to-parent",
        ["data_prep/tictoc.py", "recipe=tiny", "data.source=hub", "data.path={tmp}/P/D", "out={tmp}/out"],
        "data.path={tmp}/P/D (data.source=hub): {tmp}/P/D/up is a link to .., a loop: it leads back to {tmp}/P/D, "
        "which holds it; remove the link",
        _setup_release_linking_to_its_parent,
        False,
    ),
    (
        "trl-config-refuses",
        [
            "train/dpo.py",
            "recipe=tiny",
            "training.load_best_model_at_end=true",
            "training.eval_strategy=steps",
            "training.save_strategy=epoch",
        ],
        "training: DPOConfig refuses the recipe's training settings: --load_best_model_at_end requires",
        None,
        True,
    ),
]


def _argv(args: list[str], tmp: Path) -> list[str]:
    argv = [a.format(tmp=tmp) for a in args]
    if argv[0] != "eval/run.py":
        argv.append(f"output_dir={tmp}/run")  # where data prep and training would write
    return argv


def run_main(args: list[str], tmp: Path, capsys) -> tuple[int, str]:
    module, name = MAINS[args[0]].split(":")
    code = getattr(importlib.import_module(module), name)(_argv(args, tmp)[1:])
    return code, capsys.readouterr().err


def assert_one_line(code: int, err: str, message: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err[-3000:]
    assert "Traceback" not in err and sum(line.startswith("error") for line in lines) == 1, err[-3000:]
    assert lines[-1].startswith("error: ") and message in lines[-1], lines[-1]  # the last line, and one line
    return lines[-1]


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """An empty hub cache for this test (HF_HUB_OFFLINE=1 is set for every test in conftest)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert constants.HF_HUB_OFFLINE
    return cache


@pytest.mark.parametrize("case, args, message, setup, before_any_write", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_mistake(case, args, message, setup, before_any_write, tmp_path, monkeypatch, capsys, empty_hub_cache):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TIMEALIGN_CACHE", str(tmp_path / "cache"))
    if setup:
        setup(work)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    if case == "report-to-not-installed":
        missing, package = _missing_integration()
        args = [a.format(missing=missing, tmp="{tmp}") for a in args]
        message = message.format(missing=missing, package=package, tmp="{tmp}")
    code, err = run_main(args, work, capsys)
    line = assert_one_line(code, err, message.format(tmp=work))
    if case == "source-unknown-before-path":
        assert "needs data.path" not in line  # the source is checked first
    if before_any_write:
        assert sorted(p.relative_to(work) for p in work.rglob("*")) == before, "wrote something before refusing"


@pytest.mark.parametrize(
    "key",
    [
        "data.overlength",
        "data.score_orientation",
        "data.protocol",
        "data.source",
        "data.on_error",
        "eval.backend",
        "timer.order",
        "launch.check",
        "data.unknown_scenarios",
        "timer.loss_turns",
        "timer.loss_normalization",
        "timer.lora_new_tokens",
        "model.dtype",
        "data.direct_answer_backend",
    ],
)
def test_enumerated_fields_refuse_other_values_when_the_recipe_loads(key):
    """Each enumerated field declares its choices in the schema; any other value fails in load_recipe, listing them
    (issue 22: eight fields set to "bogus" all loaded and failed later in six modules)."""
    from timealign.config.validate import field_choices

    choices = field_choices()[key]
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny", {key: "bogus"})
    assert str(err.value).startswith(f"{key}='bogus' is not one of: {', '.join(choices)}"), str(err.value)
    assert "\n" not in str(err.value)
    for value in choices:  # every declared choice loads (the task's sources only for data.source)
        if key == "data.source" and value not in ("synthetic", "v1", "annotated", "hub"):
            continue
        extra = {"data.path": "x"} if key == "data.source" and value != "synthetic" else {}
        extra.update({"eval.base_url": "http://127.0.0.1:1/v1"} if key == "data.direct_answer_backend" else {})
        load_recipe("tiny", {key: value, **extra})


def test_did_you_mean_and_help_list_the_choices():
    with pytest.raises(
        RecipeError,
        match=r"eval.backend='VLLM' is not one of: hf, vllm, openai, chat, clock \(did you "
        r"mean: vllm\?\)",
    ):
        load_recipe("tiny", {"eval.backend": "VLLM"})
    with pytest.raises(
        RecipeError,
        match=r"data.overlength='truncate' is not one of: .* \(did you mean: "
        r"truncate_prompt",
    ):
        load_recipe("tiny", {"data.overlength": "truncate"})
    from timealign.config.recipes import describe_fields

    text = " ".join(describe_fields().split())
    assert "[choices: raise | skip]" in text and "[choices: hf | vllm | openai | chat | clock]" in text


def test_the_choices_are_the_ones_the_code_knows():
    """The schema's choices and the modules that act on them list the same values."""
    from timealign.config.dtypes import DTYPES
    from timealign.config.schema import DPO_SOURCES, SFT_SOURCES
    from timealign.config.validate import DIRECT_ANSWER_BACKENDS, DIRECT_ANSWERS, field_choices
    from timealign.data import pairs, timer_prep
    from timealign.data.records import ON_ERROR
    from timealign.data.tictoc_layout import ORIENTATIONS
    from timealign.train.lengths import OVERLENGTH_MODES

    choices = field_choices()
    assert DPO_SOURCES == pairs.SOURCES and SFT_SOURCES == timer_prep.SOURCES
    assert choices["data.on_error"] == ON_ERROR and choices["data.score_orientation"] == ORIENTATIONS
    assert choices["data.overlength"] == OVERLENGTH_MODES and choices["model.dtype"] == DTYPES
    assert choices["data.direct_answer"] == DIRECT_ANSWERS
    assert choices["data.direct_answer_backend"] == DIRECT_ANSWER_BACKENDS


@pytest.mark.parametrize("text", ["", "# my recipe, to be written\n", "null\n", "{}\n"])
def test_an_empty_recipe_file_is_named(text, tmp_path, monkeypatch, capsys):
    """Issue 35: an empty recipe YAML was read as all defaults (TRL's bf16 among them: on CPU the message spoke of
    bf16, on a GPU it trained the built-in tiny model). Now one line naming the file as empty, before any work."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.yaml").write_text(text)
    for script in ("train/dpo.py", "train/sft.py"):
        code, err = run_main([script, "--config", "empty.yaml"], tmp_path, capsys)
        assert_one_line(code, err, "error: empty.yaml: the recipe file is empty (no sections, so every value would")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.yaml"]  # no prepared data, no output_dir


def test_unknown_chat_template_names_the_family_key():
    """The advice names `family=` (eval/run.py's key), not `eval.family`, which load_recipe refuses."""
    from timealign.render.families import FAMILIES, detect_family

    with pytest.raises(RecipeError) as err:
        detect_family("{{ messages }}")
    assert "family=NAME" in str(err.value) and "eval.family" not in str(err.value)
    assert all(f in str(err.value) for f in FAMILIES)
    with pytest.raises(RecipeError, match="unknown key 'eval.family'"):
        load_recipe("tiny", {"eval.family": "qwen"})


def _prepared(tmp_path) -> Path:
    from timealign.config import DataSection
    from timealign.data.pairs import prepare

    out = tmp_path / "prepared"
    prepare(DataSection(synthetic_trajectories=4), out)
    return out


def _unsealed(out: Path) -> Path:
    """`out` as a timealign from before content hashes left it: the loader is then the one to find damage."""
    from timealign.data.fingerprint import CONTENT, MANIFEST, MANIFEST_SHA

    manifest = json.loads((out / MANIFEST).read_text())
    del manifest[CONTENT], manifest[MANIFEST_SHA]
    (out / MANIFEST).write_text(json.dumps(manifest))
    return out


def test_a_truncated_arrow_file_names_the_file_and_the_fix(tmp_path):
    """Data prep seals what it writes, so a truncated Arrow file is caught by its hash before anything reads it."""
    from timealign.data.fingerprint import PreparedDataError
    from timealign.data.pairs import load_prepared

    out = _prepared(tmp_path)
    assert len(load_prepared(out)["train"]) == 12
    arrow = next((out / "dataset" / "train").glob("*.arrow"))
    os.truncate(arrow, arrow.stat().st_size // 2)
    with pytest.raises(PreparedDataError) as err:
        load_prepared(out)
    text = str(err.value)
    assert isinstance(err.value, RecipeError) and "\n" not in text  # exit 2, one line
    assert text.startswith(f"{arrow} was changed after data prep wrote it (sha256 ")
    assert f"Re-run data prep (`python data_prep/tictoc.py recipe=NAME out={out}`" in text


def test_a_removed_split_names_the_file_and_the_fix(tmp_path):
    import shutil

    from timealign.data.fingerprint import PreparedDataError
    from timealign.data.pairs import load_prepared

    out = _prepared(tmp_path)
    arrow = next((out / "dataset" / "test").glob("*.arrow"))
    shutil.rmtree(out / "dataset" / "test")
    with pytest.raises(PreparedDataError, match=rf"^{re.escape(str(arrow))} was removed after data prep wrote it: "):
        load_prepared(out)


def test_a_truncated_arrow_file_in_an_unsealed_folder_names_the_prepared_folder(tmp_path):
    """A folder without content hashes (an older timealign's): the loader's own failure, in one line."""
    from timealign.data.pairs import load_prepared
    from timealign.data.records import DamagedPreparedData

    out = _unsealed(_prepared(tmp_path))
    arrow = next((out / "dataset" / "train").glob("*.arrow"))
    os.truncate(arrow, arrow.stat().st_size // 2)
    with pytest.raises(DamagedPreparedData) as err:
        load_prepared(out)
    text = str(err.value)
    assert isinstance(err.value, RecipeError) and "\n" not in text  # exit 2, one line
    assert re.match(rf"{re.escape(str(out))}: the prepared data cannot be read \((ArrowInvalid|OSError): ", text)
    assert f"write it again with `python data_prep/tictoc.py recipe=NAME out={out}`" in text


def test_a_removed_split_in_an_unsealed_folder_names_the_prepared_folder(tmp_path):
    import shutil

    from timealign.data.pairs import load_prepared
    from timealign.data.records import DamagedPreparedData

    out = _unsealed(_prepared(tmp_path))
    shutil.rmtree(out / "dataset" / "test")
    with pytest.raises(
        DamagedPreparedData,
        match=rf"^{re.escape(str(out))}: the prepared data cannot be read "
        r"\(FileNotFoundError: .*dataset/test",
    ):
        load_prepared(out)


def _doubled_margin(row):  # a module function: datasets fingerprints it alike in every run, as it does the render
    return {"margin": row["margin"] * 2}


def _plus_one_margin(row):
    return {"margin": row["margin"] + 1}


def _rewrite_margins(arrow: Path, value: float) -> None:
    import pyarrow as pa

    table = pa.ipc.open_stream(pa.py_buffer(arrow.read_bytes())).read_all()
    column = table.column_names.index("margin")
    table = table.set_column(column, "margin", pa.array([value] * table.num_rows, table.schema.field("margin").type))
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def test_an_edited_or_truncated_map_cache_is_never_read(tmp_path):
    """Issue 51: `.map` on a memory-mapped split wrote `cache-*.arrow` beside it (not sealed: data prep did not
    write it), and the next run with the same function read it back: a cache whose margins were set to 50 trained
    on them (first-step loss 50.0 vs 1.68), a truncated one was a pyarrow traceback. The splits are read into
    memory now, so no map reads or writes a cache in the prepared folder."""
    import datasets

    from timealign.data.pairs import load_prepared

    out = _prepared(tmp_path)
    split = out / "dataset" / "train"
    mapped = datasets.load_from_disk(str(out / "dataset"))["train"]  # as training loaded it before
    margins = mapped["margin"]
    doubled = mapped.map(_doubled_margin)
    plus_one = mapped.map(_plus_one_margin)
    assert doubled["margin"] == [m * 2 for m in margins]
    edited, truncated = (Path(d.cache_files[0]["filename"]) for d in (doubled, plus_one))
    assert edited.parent == truncated.parent == split and edited != truncated  # the caches lie beside the data
    _rewrite_margins(edited, 50.0)
    os.truncate(truncated, truncated.stat().st_size // 2)
    files = sorted(split.iterdir())

    train = load_prepared(out)["train"]
    assert train.map(_doubled_margin)["margin"] == [m * 2 for m in margins]  # not the edited 50s
    assert train.map(_plus_one_margin)["margin"] == [m + 1 for m in margins]  # not the truncated file
    assert train.cache_files == []  # in memory: a map has nowhere on disk to look
    assert sorted(split.iterdir()) == files  # nothing written beside the sealed data either


def test_a_full_disk_while_saving_says_so(tmp_path):
    """A real ENOSPC (the kernel's /dev/full) at data prep's save point: `No space left on device writing <folder>`,
    an exit-2 error of the commands; another OSError passes unchanged."""
    from timealign.config import DataSection
    from timealign.config.disk import NoSpaceLeft, writing
    from timealign.data import commands
    from timealign.data.pairs import prepare
    from timealign.train import dpo, sft

    out = tmp_path / "prepared"
    out.mkdir()
    (out / "manifest.json").symlink_to("/dev/full")  # every write to it fails with ENOSPC
    with pytest.raises(NoSpaceLeft) as err:
        prepare(DataSection(synthetic_trajectories=4), out)
    assert str(err.value) == (
        f"No space left on device writing {out} (prepared pairs): free space there, or write "
        "elsewhere, then run the same command again"
    )
    assert commands.DATA_ERRORS[NoSpaceLeft] == 2
    for module in (dpo, sft):  # the training entry points map it to exit 2 too
        assert "NoSpaceLeft: 2" in Path(module.__file__).read_text()
    with pytest.raises(PermissionError):
        with writing(tmp_path):
            raise PermissionError(13, "Permission denied", str(tmp_path / "x"))


def test_skip_mode_counts_the_records_of_a_rejected_file(tmp_path):
    """Misnamed v1 files in skip mode: each reject line says how many records its file held, and the manifest
    counts them, in `rejects` and by reason in `reject_reasons` (issue 22: "1 reject" for 34 records; issue 35: the
    reasons still counted lines)."""
    from timealign.config import DataSection
    from timealign.data.pairs import prepare

    folder = write_v1(
        tmp_path / "v1",
        {
            "preferTool_elapse_1.json": [v1_record(rid(1))],
            "prefertool_elapse_2.json": [v1_record(rid(n)) for n in range(2, 36)],
            "extra.json": [v1_record(rid(n)) for n in range(40, 43)],
        },
    )
    info = prepare(DataSection(source="v1", path=str(folder), on_error="skip"), tmp_path / "out")
    assert info["pairs"] == 1 and info["rejects"] == 37
    assert info["reject_reasons"] == {"not a TicToc v1 file name": 37}
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["reject_reasons"] == info["reject_reasons"]
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert rejects == [
        {
            "source": str(folder / "extra.json"),
            "id": None,
            "records": 3,
            "reason": "not a TicToc v1 file name: matches no prefer{Tool,NoTool}_elapse_{0,1,2}.json name",
        },
        {
            "source": str(folder / "prefertool_elapse_2.json"),
            "id": None,
            "records": 34,
            "reason": "not a TicToc v1 file name: differs only in letter case from preferTool_elapse_2.json",
        },
    ]


class _RunsCode:
    """A pickle that would run a command when unpickled (weights-only loading never does)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_evaluating_a_pickle_that_is_not_weights_is_one_line(tiny_model_dir, tmp_path, capsys):
    """Issue 35: checkpoint= a model folder whose pytorch_model.bin is a pickle of other objects: not executed, but
    exit 1 with an UnpicklingError traceback from the HF backend. Now resume's weights-only check, in one line."""
    import shutil

    import torch

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"model.embed_tokens.weight": _RunsCode(marker)}, folder / "pytorch_model.bin")
    code, err = run_main(["eval/run.py", "recipe=tiny", f"checkpoint={folder}", "out={tmp}/eval"], tmp_path, capsys)
    assert_one_line(
        code,
        err,
        f"checkpoint={folder}: pytorch_model.bin is not a plain tensor file: torch's weights-only loader refuses it",
    )
    assert not marker.exists() and not (tmp_path / "eval").exists()


def _save_trained_recipe(folder: Path, recipe) -> Path:
    """`folder` as training leaves it for the evaluator: the resolved recipe beside the weights (final_model)."""
    import yaml

    from timealign.config.secrets import redact
    from timealign.render.checkpoint import CHECKPOINT_RECIPE

    folder.mkdir(parents=True)
    (folder / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(redact(recipe.to_dict()), sort_keys=False))
    return folder


def test_evaluating_with_other_render_settings_than_training_is_said(tmp_path):
    """Issue 51: a model trained with data.elapsed_separator=newline and evaluated with the default separator scored
    with no warning (the comparison held timestamps, elapsed and protocol only). Every render setting is compared."""
    from timealign.eval.data_identity import training_differences

    newline = {"data.elapsed": "true", "data.elapsed_separator": "newline"}
    checkpoint = _save_trained_recipe(tmp_path / "run", load_recipe("tiny", newline))
    assert training_differences(load_recipe("tiny", newline), checkpoint) == []  # as trained: nothing to say
    evaluated = load_recipe("tiny", {"data.elapsed": "true", "eval.reasoning": "true"})
    assert training_differences(evaluated, checkpoint) == [
        "data.elapsed_separator: newline (trained) -> direct (evaluated)",
        "eval.reasoning: None (trained) -> True (evaluated)",
    ]


def _data_fields_read_by_the_render_code() -> set[str]:
    """The DataSection fields the render code reads, from its source: `data.FIELD`, `recipe.data.FIELD` and
    `getattr(data, "FIELD", ...)` in timealign/render/ and the chat-API renderer, on every branch."""
    import ast
    import dataclasses

    from timealign.config.schema import DataSection

    fields = {f.name for f in dataclasses.fields(DataSection)}

    def is_data(node) -> bool:
        return (isinstance(node, ast.Name) and node.id == "data") or (
            isinstance(node, ast.Attribute) and node.attr == "data"
        )

    files = [
        *sorted((REPO_ROOT / "timealign" / "render").glob("*.py")),
        REPO_ROOT / "timealign/suites/tictoc/requests.py",
    ]
    read = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Attribute) and is_data(node.value) and node.attr in fields:
                read.add(node.attr)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and is_data(node.args[0])
                and isinstance(node.args[1], ast.Constant)
            ):
                read.add(node.args[1].value)
    return read


class _ReadRecorder:
    """A recipe's data section that notes each field read from it."""

    def __init__(self, data):
        self._data, self.read = data, set()

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self._data, name)


def test_the_compared_render_settings_are_the_ones_the_renderer_reads(tiny_tokenizer):
    """A render setting added to the renderer and not to the evaluator's comparison fails here: the data fields the
    render code reads (its source, every branch; and what `for_data` reads when it runs, in both protocols) are
    `RENDER_KEYS`, and every keyword `PromptRenderer.for_data` takes is placed (compared, or the evaluation's)."""
    import inspect

    from timealign.config import DataSection
    from timealign.eval.data_identity import RENDER_ARGUMENTS, RENDER_KEYS, RENDER_SETTINGS
    from timealign.render.chat import PromptRenderer
    from timealign.suites.tictoc.requests import ChatRequestRenderer

    assert _data_fields_read_by_the_render_code() == set(RENDER_KEYS)
    for protocol in ("timealign", "paper"):
        data = _ReadRecorder(DataSection(protocol=protocol, timestamps=False))
        PromptRenderer.for_data(tiny_tokenizer, data, reasoning=False)
        ChatRequestRenderer.for_data(data)
        assert data.read <= set(RENDER_KEYS), data.read - set(RENDER_KEYS)
    keywords = [p for p in inspect.signature(PromptRenderer.for_data).parameters if p not in ("tokenizer", "data")]
    assert set(keywords) == set(RENDER_ARGUMENTS), "place the renderer's new keyword in RENDER_ARGUMENTS"
    assert {source for source in RENDER_ARGUMENTS.values() if source} <= set(RENDER_SETTINGS)


@pytest.mark.parametrize(
    "weights, message",
    [
        ("[1,nan]", "training.loss_weights=[1, nan] must be a list of numbers, one per training.loss_type entry"),
        ("[1,.nan]", "training.loss_weights=[1, nan]: each weight must be a finite number >= 0 ([nan] is not)"),
        ("[1,true]", "training.loss_weights=[1, True] must be a list of numbers"),
        ("[1]", "training.loss_weights=[1] gives 1 weights for 2 loss types (training.loss_type=[sigmoid, sft])"),
        ("[0,0.0]", "training.loss_weights=[0, 0.0]: every weight 0 makes the loss 0"),
    ],
)
def test_loss_weights_the_trainer_would_refuse_are_refused_when_the_recipe_loads(weights, message):
    """Issue 51: these came back as OffsetDPOTrainer's ValueError traceback after data prep (all zero: a zero loss,
    trained and saved). Now `load_recipe` refuses them in one line; a valid mix loads."""
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny", {"training.loss_type": "[sigmoid,sft]", "training.loss_weights": weights})
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
    recipe = load_recipe("tiny", {"training.loss_type": "[sigmoid,sft]", "training.loss_weights": "[1,0]"})
    assert recipe.training["loss_weights"] == [1, 0]


def test_the_recipe_load_checks_agree_with_what_they_stand_in_for(tmp_path):
    """The load-time lists are the trainers' and transformers' own: the attention kernels each shared-prompt layout
    takes, the loss types OffsetDPOTrainer implements, and whether transformers finds each report_to integration."""
    from transformers.integrations import integration_utils
    from trl import DPOConfig

    from timealign.config import validate
    from timealign.train import odpo, prompt_cache, shared_prompt

    assert validate.PROMPT_CACHE_ATTENTION == prompt_cache.SUPPORTED_ATTENTION
    assert validate.SHARED_PROMPT_ATTENTION == shared_prompt.SUPPORTED_ATTENTION
    args = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    for loss_type in validate.DPO_LOSS_TYPES:
        odpo._check_loss_config(DPOConfig(loss_type=loss_type, **args))
    with pytest.raises(ValueError, match="OffsetDPOTrainer implements loss_type"):
        odpo._check_loss_config(DPOConfig(loss_type=["sft", "sigmoid"], **args))
    assert set(validate.REPORT_TO_PACKAGES) == set(validate.REPORT_TO_NAMES) - {"kubeflow"}  # kubeflow: no package
    available = {
        "azure_ml": "is_azureml_available",
        "comet_ml": "is_comet_available",
        "flyte": "is_flytekit_available",
    }
    for name, (modules, _) in validate.REPORT_TO_PACKAGES.items():
        found = getattr(integration_utils, available.get(name, f"is_{name}_available"))()
        assert any(validate._installed(m) for m in modules) == bool(found), name


def test_a_demo_summary_that_is_not_json_is_named(tmp_path):
    """Issue 51: TIMEALIGN_DEMO_OUT (CI's demo folder) whose summary.json is not JSON failed the experiment tests
    with a bare JSONDecodeError naming no file. Now one message naming it and the fix."""
    import subprocess
    import time

    summary = tmp_path / "summary.json"
    summary.write_text('{"experiment": ')  # a demo killed while writing it
    later = time.time() + 86400  # newer than every source file, even one saved while this runs: not a stale demo
    os.utime(summary, (later, later))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_experiment.py::test_offset_dpo_teaches_the_tool_call_decision",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "TIMEALIGN_DEMO_OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert f"{summary}: not JSON (Expecting value: line 1 column 16 (char 15)); run the demo again" in proc.stdout
    assert "(make demo DEMO_ARGS=ablations=true)" in proc.stdout, proc.stdout[-3000:]
    assert "another exception" not in proc.stdout and "JSONDecodeError" not in proc.stdout, proc.stdout[-3000:]


# Every class docs/bad_input.md lists (its "User mistakes" table), and the test that checks it.
CLASS_TESTS = {
    **{case[0]: f"test_cli_mistake[{case[0]}]" for case in CLI_CASES},
    "enumerated-field": "test_enumerated_fields_refuse_other_values_when_the_recipe_loads",
    "empty-recipe": "test_an_empty_recipe_file_is_named",
    "family-advice": "test_unknown_chat_template_names_the_family_key",
    "truncated-arrow": "test_a_truncated_arrow_file_names_the_file_and_the_fix",
    "removed-split": "test_a_removed_split_names_the_file_and_the_fix",
    "truncated-arrow-unsealed": "test_a_truncated_arrow_file_in_an_unsealed_folder_names_the_prepared_folder",
    "removed-split-unsealed": "test_a_removed_split_in_an_unsealed_folder_names_the_prepared_folder",
    "edited-map-cache": "test_an_edited_or_truncated_map_cache_is_never_read",
    "disk-full": "test_a_full_disk_while_saving_says_so",
    "render-setting-skew": "test_evaluating_with_other_render_settings_than_training_is_said",
    "render-settings-compared": "test_the_compared_render_settings_are_the_ones_the_renderer_reads",
    "loss-weights-refused": "test_loss_weights_the_trainer_would_refuse_are_refused_when_the_recipe_loads",
    "demo-summary-not-json": "test_a_demo_summary_that_is_not_json_is_named",
    "skip-counts-records": "test_skip_mode_counts_the_records_of_a_rejected_file",
    "ranks-by-hand": "test_launch_check.py::test_ranks_set_by_hand_without_a_launcher_stop_in_seconds",
    "checkpoint-not-weights": "test_evaluating_a_pickle_that_is_not_weights_is_one_line",
    "eval-out-foreign": "test_eval_out_folder.py::test_a_users_report_is_never_replaced",
    "hub-unknown-layout": "test_hub_data.py::test_a_release_in_no_known_layout_lists_the_accepted_ones",
    "hub-not-found": "test_hub_data.py::test_a_missing_release_says_how_to_download_it",
    "experiment-out-user": "test_experiment_real_mistakes.py::test_out_is_the_commands_own",
    "experiment-out-other-run": "test_experiment_real_mistakes.py::test_out_is_the_commands_own",
    "experiment-out-edited-report": "test_experiment_real_mistakes.py::test_out_is_the_commands_own",
    "rescore-other-data": "test_experiment_real_mistakes.py::test_rescore_and_merge_compare_what_the_runs_scored",
    "merge-other-data": "test_experiment_real_mistakes.py::test_rescore_and_merge_compare_what_the_runs_scored",
    "rescore-not-a-run": "test_experiment_real_mistakes.py::test_mistakes_are_one_line_before_any_work",
    "rescore-no-weights": "test_experiment_real_mistakes.py::test_mistakes_are_one_line_before_any_work",
    "merge-empty": "test_experiment_real_mistakes.py::test_mistakes_are_one_line_before_any_work",
    "merge-ignored-options": "test_experiment_real_mistakes.py::test_mistakes_are_one_line_before_any_work",
    "parallel-override-typo": "test_experiment_real_mistakes.py::test_mistakes_are_one_line_before_any_work",
    "hub-link-loop": "test_hub_data.py::test_a_release_folder_that_links_to_itself_is_one_line",
    "rank-alone": "test_launch_check.py::test_a_rank_alone_without_a_launcher_is_one_line",
    "output-dir-busy": "test_run_lock.py::test_a_second_training_into_a_running_folder_stops_in_one_line",
    "serve-store": "test_serve.py::test_a_store_that_cannot_hold_the_clock_is_one_line",
    "export-refuses": "test_export.py::test_export_refuses_what_is_not_a_checkpoint",
    "data-not-there": "test_internal_errors.py::test_a_data_folder_without_data_files_is_one_line",
}


def test_the_doc_lists_every_class_and_each_has_a_test():
    doc = (REPO_ROOT / "docs" / "bad_input.md").read_text()
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|.*\| `([^`]+)` \|$", doc, flags=re.MULTILINE)
    assert rows, "docs/bad_input.md has no user-mistakes table"
    assert dict(rows) == CLASS_TESTS
    for test in CLASS_TESTS.values():
        module, _, name = test.rpartition("::")
        owner = importlib.import_module(module.removesuffix(".py")) if module else sys.modules[__name__]
        assert callable(getattr(owner, name.split("[")[0], None)), f"{test}: no such test"
