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
    "disk-full": "test_a_full_disk_while_saving_says_so",
    "skip-counts-records": "test_skip_mode_counts_the_records_of_a_rejected_file",
    "ranks-by-hand": "test_launch_check.py::test_ranks_set_by_hand_without_a_launcher_stop_in_seconds",
    "checkpoint-not-weights": "test_evaluating_a_pickle_that_is_not_weights_is_one_line",
    "eval-out-foreign": "test_eval_out_folder.py::test_a_users_report_is_never_replaced",
    "hub-unknown-layout": "test_hub_data.py::test_a_release_in_no_known_layout_lists_the_accepted_ones",
    "hub-not-found": "test_hub_data.py::test_a_missing_release_says_how_to_download_it",
    "hub-link-loop": "test_hub_data.py::test_a_release_folder_that_links_to_itself_is_one_line",
    "rank-alone": "test_launch_check.py::test_a_rank_alone_without_a_launcher_is_one_line",
    "output-dir-busy": "test_run_lock.py::test_a_second_training_into_a_running_folder_stops_in_one_line",
    "serve-store": "test_serve.py::test_a_store_that_cannot_hold_the_clock_is_one_line",
    "export-refuses": "test_export.py::test_export_refuses_what_is_not_a_checkpoint",
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
