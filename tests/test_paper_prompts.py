"""The paper protocol (`data.protocol=paper`): the TicToc authors' prompts byte for byte, for every family they ran.

The oracle is the authors' own code: tests/paper_reference/authors.py imports their handler modules
(../shared/reference/tictoc/inference/local/*.py, or TIMEALIGN_TICTOC_REPO) and calls their `format_input`.
- Golden prompts (tests/golden/paper_prompts.json, written by `python -m tests.paper_reference.make_golden`, which
  checks each against their handlers and records what it checked against): real v1 samples read through the real
  data path (load_v1 -> pair rows -> Arrow) must render to the same strings.
- v1 samples in every setting (every handler x use_time_stamp x none/reminder/rules) are compared with their
  handlers: a seeded stratified sample in `make test`, all of them with TIMEALIGN_PAPER_FULL=1
  (`make test-paper-full`). Skipped where ../shared is absent; a failure in CI (TIMEALIGN_REQUIRE_SHARED=1).
- The message shapes v1 lacks (an empty `tool_calls`, mapping arguments, calls without an id) on shaped v1 records.
- Hand-checked pieces: message preparation, Jinja's tojson, completions for training, the samples the authors'
  code refuses, and the suite/training wiring on the tiny model.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from needs import required

from tests.paper_reference import authors
from timealign.config import DataSection
from timealign.render.chat import PromptRenderer
from timealign.render.paper import (
    PAPER_MODELS,
    PAPER_REMINDER,
    PaperRenderer,
    UnrenderableSample,
    jinja_tojson,
    paper_messages,
)

GOLDEN = Path(__file__).parent / "golden" / "paper_prompts.json"
V1 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tictoc-v1"
# Skipped where ../shared is absent; CI (TIMEALIGN_REQUIRE_SHARED=1, tests/needs.py) runs them and fails without it.
needs_v1 = pytest.mark.skipif(
    not V1.is_dir() and not required("SHARED"), reason=f"{V1} absent (the shared TicToc v1 data)"
)


@pytest.fixture(scope="module")
def v1_rows():
    from tests.paper_reference.make_golden import sample_rows

    return sample_rows(V1)


def _renderer(model: str, timestamps: bool = True, prompt_mode: str = "none") -> PaperRenderer:
    spec = PAPER_MODELS[model]
    return PaperRenderer(
        None,
        timestamps=timestamps,
        prompt_mode=prompt_mode,
        family=spec["family"],
        thinking=spec.get("thinking", False),
        bos=spec.get("bos", ""),
    )


GOLDEN_CASES = json.loads(GOLDEN.read_text())


def test_golden_file_covers_every_family_and_setting():
    models = {c["model"] for c in GOLDEN_CASES}
    assert models == set(PAPER_MODELS) == set(authors.HANDLERS)
    for model in models:
        cases = [c for c in GOLDEN_CASES if c["model"] == model]
        assert len({(c["file"], c["index"]) for c in cases}) >= 3
        assert {(c["timestamps"], c["prompt_mode"]) for c in cases} >= {
            (True, "none"),
            (False, "none"),
            (True, "reminder"),
            (True, "rules"),
        }


def test_golden_file_records_what_it_was_checked_against():
    """paper_prompts.provenance.json (written by make_golden, which refuses to run without the authors' code): the
    repository, commit and date of the check, and the sha256 of their files it read, which must be the files of the
    reference at hand (a changed reference means the golden prompts must be checked again)."""
    import hashlib

    from tests.paper_reference.make_golden import AUTHORS_COMMIT, PROVENANCE

    record = json.loads(PROVENANCE.read_text())
    assert record["commit"] == AUTHORS_COMMIT and record["cases"] == len(GOLDEN_CASES) and record["verified"]
    repo = authors.authors_repo()
    if repo is None:
        assert not required("SHARED"), "TIMEALIGN_REQUIRE_SHARED=1 (CI) needs ../shared/reference/tictoc"
        pytest.skip("../shared/reference/tictoc absent: the recorded hashes cannot be compared")
    for rel, digest in record["files_sha256"].items():
        assert hashlib.sha256((repo / rel).read_bytes()).hexdigest() == digest, rel


@needs_v1
@pytest.mark.parametrize(
    "case", GOLDEN_CASES, ids=lambda c: f"{c['model']}-{c['id']}-{c['timestamps']}-{c['prompt_mode']}"
)
def test_golden_prompts(case, v1_rows):
    row = v1_rows[(case["file"], case["index"])]
    assert row["id"] == case["id"]
    assert (
        _renderer(case["model"], case["timestamps"], case["prompt_mode"]).prompt(row["prompt"], row["tools"])
        == case["prompt"]
    )


# Every prompt setting of the authors' handlers: use_time_stamp x (no addition, NAIVE reminder, RULE text).
ALL_SETTINGS = [(timestamps, mode) for timestamps in (True, False) for mode in ("none", "reminder", "rules")]
# TIMEALIGN_PAPER_FULL=1 (make test-paper-full, ~15 min on 2 cores): every v1 sample in every setting. Otherwise a
# seeded sample stratified by scenario, label, elapse level and the features the authors' code refuses on (two calls
# in one message, tool-call ids that are not 9 characters, user/assistant turns not alternating): one sample per
# stratum and setting, drawn anew for each (handler, setting), so `make test` compares every scenario, handler and
# setting in a minute or two.
FULL = os.environ.get("TIMEALIGN_PAPER_FULL") == "1"


def _stratum(key: tuple[str, int], row: dict) -> tuple:
    calls = [call for m in row["prompt"] for call in m["tool_calls"] or []]
    ids = [call["id"] for call in calls] + [m["tool_call_id"] for m in row["prompt"] if m["role"] == "tool"]
    two_calls = any(len(m["tool_calls"] or []) > 1 for m in row["prompt"])
    turns = [m["role"] for m in row["prompt"] if m["role"] in ("user", "assistant") and m["tool_calls"] is None]
    alternating = all(role == ("user", "assistant")[i % 2] for i, role in enumerate(turns))
    return (row["scenario"], key[0], two_calls, any(not isinstance(i, str) or len(i) != 9 for i in ids), alternating)


def comparison_cases(v1_rows: dict, model: str) -> list[tuple[tuple[str, int], bool, str]]:
    """((file, index), timestamps, prompt mode) to compare for `model`: all of them, or the stratified sample."""
    if FULL:
        return [(key, ts, mode) for key in v1_rows for ts, mode in ALL_SETTINGS]
    strata: dict[tuple, list] = {}
    for key, row in sorted(v1_rows.items()):
        strata.setdefault(_stratum(key, row), []).append(key)
    cases = []
    for k, (timestamps, mode) in enumerate(ALL_SETTINGS):
        rng = random.Random(f"{model}/{k}")
        cases += [(rng.choice(keys), timestamps, mode) for _, keys in sorted(strata.items())]
    return cases


@needs_v1
@pytest.mark.parametrize("model", sorted(authors.HANDLERS))
def test_v1_samples_equal_the_authors_rendering(model, v1_rows):
    """Each compared prompt equals the string the authors' own handler (`format_input` of their
    inference/local/<model>.py, imported and called: tests/paper_reference/authors.py) builds from the raw record;
    where their code raises, ours refuses the sample."""
    repo = authors.authors_repo()
    assert repo is not None or not required("SHARED"), "TIMEALIGN_REQUIRE_SHARED=1 (CI) needs ../shared/reference"
    if repo is None:
        pytest.skip(f"{authors.SHARED_REFERENCE} absent: set TIMEALIGN_TICTOC_REPO to a checkout of chengez/TicToc")
    raw = {f.name: json.loads(f.read_text()) for f in V1.glob("*.json")}
    cases = comparison_cases(v1_rows, model)

    def refused_by_them(stratum: tuple) -> bool:  # what their templates raise on (docs/protocols.md)
        if model in ("llama3_1", "llama3_2"):
            return stratum[2]  # two calls in one message
        return model == "ministral" and (stratum[3] or not stratum[4])  # other ids; user/assistant not alternating

    for (file, index), timestamps, mode in cases:
        sample, row = raw[file][index], v1_rows[(file, index)]
        level = int(file.rsplit("_", 1)[1].split(".")[0])
        ours = _renderer(model, timestamps, mode)
        refused = refused_by_them(_stratum((file, index), row))
        try:
            theirs = authors.render(
                repo,
                model,
                sample["history"],
                sample.get("function"),
                level=level,
                use_time_stamp=timestamps,
                mode=mode,
            )
        except Exception:  # noqa: BLE001 - their code refused the sample: so must ours
            assert refused, (file, index, timestamps, mode)
            with pytest.raises(UnrenderableSample):
                ours.prompt(row["prompt"], row["tools"])
            continue
        assert not refused, (file, index, timestamps, mode)
        assert ours.prompt(row["prompt"], row["tools"]) == theirs, (file, index, timestamps, mode)
    covered = {(_stratum(key, v1_rows[key])[0], ts, mode) for key, ts, mode in cases}
    assert covered == {(row["scenario"], ts, mode) for row in v1_rows.values() for ts, mode in ALL_SETTINGS}


# -- hand-checked pieces ---------------------------------------------------------------------------------------------
HISTORY = [
    {"role": "system", "content": "You track parcels.", "time": "2023-03-21T10:00:00Z"},
    {"role": "user", "content": "Where is pkg_1?", "time": "2023-03-21T10:00:00Z"},
    {
        "role": "assistant",
        "content": None,
        "time": "2023-03-21T10:00:05Z",
        "tool_calls": [
            {
                "id": "call00001",
                "type": "function",
                "function": {"name": "track", "arguments": "{'package_id': 'pkg_1'}"},
            }
        ],
    },
    {
        "role": "tool",
        "content": '{"status": "On route"}',
        "time": "2023-03-21T10:00:06Z",
        "tool_call_id": "call00001",
        "name": "track",
    },
    {"role": "assistant", "content": "It is on route.", "time": "2023-03-21T10:00:11Z"},
    {"role": "user", "content": "And now?", "time": "2023-03-22T09:00:00Z"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "track",
            "description": "Parcel status & ETA",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]


def test_message_preparation_follows_the_authors_handlers():
    out = paper_messages(HISTORY, timestamps=True, prompt_mode="reminder")
    assert out[0] == {"role": "system", "content": "[2023-03-21T10:00:00Z] You track parcels." + PAPER_REMINDER}
    assert out[1] == {"role": "user", "content": "[2023-03-21T10:00:00Z] Where is pkg_1?"}
    # the tool call: no stamp, content None, the arguments string untouched (a Python literal here)
    assert out[2]["content"] is None and "time" not in out[2]
    assert out[2]["tool_calls"][0]["function"]["arguments"] == "{'package_id': 'pkg_1'}"
    assert out[3] == {
        "role": "tool",
        "content": '[2023-03-21T10:00:06Z] {"status": "On route"}',
        "tool_call_id": "call00001",
    }  # `name` dropped
    api = paper_messages(HISTORY, timestamps=False, api=True)
    assert "content" not in api[2] and api[1]["content"] == "Where is pkg_1?"


def test_jinja_tojson_is_sorted_and_html_safe():
    assert jinja_tojson({"b": "x<y", "a": "it's & é"}) == '{"a": "it\\u0027s \\u0026 \\u00e9", "b": "x\\u003cy"}'
    assert jinja_tojson('{"a": 1}') == '"{\\"a\\": 1}"'


def test_llama_prompt_by_hand():
    text = _renderer("llama3_1").prompt(HISTORY, TOOLS)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 2023-03-21\n\n[2023-03-21T10:00:00Z] You track parcels.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n[2023-03-21T10:00:00Z] Where is pkg_1?<|eot_id|>"
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "track", "parameters": '
        '"{\\u0027package_id\\u0027: \\u0027pkg_1\\u0027}"}<|eot_id|>'
        '<|start_header_id|>ipython<|end_header_id|>\n\n"[2023-03-21T10:00:06Z] {\\"status\\": \\"On route\\"}"'
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n[2023-03-21T10:00:11Z] It is on route.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n[2023-03-22T09:00:00Z] And now?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_qwen_prompt_ends_with_a_closed_empty_think_block_unless_reasoning():
    off, on = _renderer("qwen3").prompt(HISTORY, TOOLS), _renderer("qwen3_reason").prompt(HISTORY, TOOLS)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("[2023-03-22T09:00:00Z] And now?<|im_end|>\n<|im_start|>assistant\n")
    assert _renderer("qwen2_5").prompt(HISTORY, TOOLS) == off  # the authors render Qwen 2.5 with the Qwen3 template
    assert '<tool_call>\n{"name": "track", "arguments": {\'package_id\': \'pkg_1\'}}\n</tool_call>' in off
    assert '{"function": {"description": "Parcel status \\u0026 ETA"' in off  # tojson: sorted keys, & escaped


def test_ministral_puts_the_system_text_in_the_last_user_turn_and_refuses_other_ids():
    text = _renderer("ministral").prompt(HISTORY, TOOLS)
    assert text.startswith("<s>[INST][2023-03-21T10:00:00Z] Where is pkg_1?[/INST][TOOL_CALLS][")
    assert text.endswith(
        '[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "track", '
        '"description": "Parcel status & ETA", &#34;parameters&#34;: {"properties": {}, '
        '"type": "object"}}}][/AVAILABLE_TOOLS][INST][2023-03-21T10:00:00Z] You track parcels.'
        "\n\n[2023-03-22T09:00:00Z] And now?[/INST]"
    )
    ten = [dict(m, tool_call_id="call_00001") if m["role"] == "tool" else m for m in HISTORY]
    with pytest.raises(UnrenderableSample, match="9-character"):
        _renderer("ministral").prompt(ten, TOOLS)


def test_llama_refuses_two_calls_in_one_message():
    two = [dict(m, tool_calls=m["tool_calls"] * 2) if m.get("tool_calls") else m for m in HISTORY]
    with pytest.raises(UnrenderableSample, match="single tool-calls"):
        _renderer("llama3_2").prompt(two, TOOLS)
    assert "<tool_call>" in _renderer("qwen3").prompt(two, TOOLS)  # Qwen's template takes them


def test_deepseek_bos_per_distill():
    llama, qwen = (
        _renderer("deepseek_distill_llama").prompt(HISTORY),
        _renderer("deepseek_distill_qwen").prompt(HISTORY),
    )
    assert llama == "<|begin_of_text|>" + qwen
    assert qwen.startswith("[2023-03-21T10:00:00Z] You track parcels.<｜User｜>[2023-03-21T10:00:00Z] Where is pkg_1?")
    assert qwen.endswith("<｜User｜>[2023-03-22T09:00:00Z] And now?<｜Assistant｜><think>\n")


def test_prompts_do_not_depend_on_the_day(tiny_model_dir):
    """Nothing in a prompt comes from the clock: the Llama date is the trajectory's, in both protocols."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    # Llama 3.2's own template prints strftime_now("%d %b %Y") unless date_string is given.
    tokenizer.chat_template = (
        "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
        "{%- endif %}Today Date: {{ date_string }}|{%- for m in messages %}{{ m.content }}"
        "{%- endfor %}"
    )
    renderer = PromptRenderer.for_data(tokenizer, DataSection())
    assert renderer.prompt(HISTORY).startswith("Today Date: 21 Mar 2023|")
    no_times = PromptRenderer.for_data(tokenizer, DataSection(timestamps=False))
    assert no_times.prompt(HISTORY).startswith("Today Date: 26 Jul 2024|")


# -- completions for training in the paper protocol ------------------------------------------------------------------
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "callretry", "type": "function", "function": {"name": "track", "arguments": '{"package_id": "pkg_1"}'}}
    ],
}
ANSWER = {"role": "assistant", "content": "Still on route."}


def test_completions_follow_each_template():
    llama = _renderer("llama3_1")
    assert llama.completion(HISTORY, ANSWER, TOOLS) == "Still on route.<|eot_id|>"
    assert (
        llama.completion(HISTORY, CALL, TOOLS)
        == '{"name": "track", "parameters": "{\\"package_id\\": \\"pkg_1\\"}"}<|eot_id|>'
    )
    qwen = _renderer("qwen3")
    assert qwen.completion(HISTORY, ANSWER, TOOLS) == "Still on route.<|im_end|>"
    assert (
        qwen.completion(HISTORY, CALL, TOOLS)
        == '<tool_call>\n{"name": "track", "arguments": {"package_id": "pkg_1"}}\n</tool_call><|im_end|>'
    )
    ministral = _renderer("ministral")
    assert ministral.completion(HISTORY, ANSWER, TOOLS) == "Still on route.</s>"
    assert (
        ministral.completion(HISTORY, CALL, TOOLS)
        == '[TOOL_CALLS][{"arguments": "{\\"package_id\\": \\"pkg_1\\"}", "name": "track", "id": "callretry"}]</s>'
    )
    with pytest.raises(ValueError, match="DeepSeek"):
        _renderer("deepseek_distill_qwen").completion(HISTORY, ANSWER, TOOLS)


def test_for_data_picks_the_protocol(tiny_tokenizer):
    paper = PromptRenderer.for_data(tiny_tokenizer, DataSection(protocol="paper"))
    assert isinstance(paper, PaperRenderer) and paper.family == "tiny" and paper.thinking is False
    assert paper.prompt(HISTORY, TOOLS).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(ValueError, match="elapsed"):
        PromptRenderer.for_data(tiny_tokenizer, DataSection(protocol="paper", elapsed=True))
    with pytest.raises(ValueError, match="data.protocol"):
        PromptRenderer.for_data(tiny_tokenizer, DataSection(protocol="papr"))


# -- the DeepSeek-R1 distills: which BOS, from the model's spec ------------------------------------------------------
# The released R1 distills' tokenizers: BOS <｜begin▁of▁sentence｜>, the chat tokens <｜User｜> / <｜Assistant｜>
# (in the
# Qwen one, on Qwen's old <|im_start|> / <|im_end|> ids), and no <|im_start|>.
DISTILL_SPECIAL = [
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
]
DISTILL_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}"
    "{% elif m['role'] == 'assistant' %}{{ '<｜Assistant｜>' + (m['content'] or '') }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}"
)


def _distill_tokenizer(folder: Path, model_type: str | None):
    """An offline tokenizer with the real distills' special tokens (built like timealign/models/tiny.py's), saved in
    `folder` with a config.json naming the base model's type (none: no config.json)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(
        ["You track parcels. Where is the package?"] * 4,
        trainer=trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=DISTILL_SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<｜begin▁of▁sentence｜>", eos_token="<｜end▁of▁sentence｜>"
    )
    fast.chat_template = DISTILL_TEMPLATE
    fast.save_pretrained(folder)
    if model_type is not None:
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert "<|im_start|>" not in tokenizer.get_vocab() and "<｜User｜>" in tokenizer.get_vocab()
    return tokenizer


def test_deepseek_distill_bos_comes_from_the_model_not_the_vocabulary(tmp_path):
    """The Qwen distill's prompt has no BOS text (the authors' handler passes none), the Llama one's Llama's BOS,
    though both tokenizers hold the same special tokens."""
    paper = DataSection(protocol="paper")
    qwen = PromptRenderer.for_data(_distill_tokenizer(tmp_path / "run-q", "qwen2"), paper)
    llama = PromptRenderer.for_data(_distill_tokenizer(tmp_path / "run-l", "llama"), paper)
    assert qwen.family == llama.family == "deepseek_r1"
    assert qwen.bos == PAPER_MODELS["deepseek_distill_qwen"]["bos"] == ""
    assert qwen.prompt(HISTORY) == _renderer("deepseek_distill_qwen").prompt(HISTORY)
    assert qwen.prompt(HISTORY).startswith("[2023-03-21T10:00:00Z] You track parcels.<｜User｜>")
    assert llama.prompt(HISTORY) == "<|begin_of_text|>" + qwen.prompt(HISTORY)
    # without a config.json the released name decides; with neither, a clear error
    named = PromptRenderer.for_data(_distill_tokenizer(tmp_path / "DeepSeek-R1-Distill-Qwen-7B", None), paper)
    assert named.bos == ""
    with pytest.raises(ValueError, match="which DeepSeek-R1 distill"):
        PromptRenderer.for_data(_distill_tokenizer(tmp_path / "run-x", None), paper)


# -- message shapes v1 lacks but the layout allows (issue 23) ---------------------------------------------------------
def _arguments_mapping(text: str) -> dict:
    import ast

    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return ast.literal_eval(text)  # v1 writes some arguments as Python literals


def shaped(record: dict, shape: str) -> dict:
    """A copy of a raw v1 record carrying one shape: `empty_tool_calls` (the last text-only assistant message gets
    `tool_calls: []`), `mapping_arguments` (every call's arguments a mapping), `call_without_id` (no call has an
    `id`, no tool result a `tool_call_id`: results answer their calls in order)."""
    import copy

    out = copy.deepcopy(record)
    history = out["history"]
    if shape == "empty_tool_calls":
        last_text = max(i for i, m in enumerate(history) if m["role"] == "assistant" and "tool_calls" not in m)
        history[last_text]["tool_calls"] = []
    for m in history:
        for call in m.get("tool_calls") or []:
            if shape == "mapping_arguments":
                call["function"]["arguments"] = _arguments_mapping(call["function"]["arguments"])
            if shape == "call_without_id":
                del call["id"]
        if shape == "call_without_id":
            m.pop("tool_call_id", None)
    return out


SHAPES = ("empty_tool_calls", "mapping_arguments", "call_without_id")
# Where the authors' own code raises on a shape (so their evaluation skipped the sample), ours refuses it too:
# Llama's template takes exactly one call per `tool_calls`, Ministral's alternation check counts an empty list as a
# call and its template needs 9-character ids, the DeepSeek template concatenates the arguments as a string.
REFUSED_BY_THEM = {
    "empty_tool_calls": {"llama3_1", "llama3_2", "ministral"},
    "mapping_arguments": {"deepseek_distill_llama", "deepseek_distill_qwen"},
    "call_without_id": {"ministral"},
}


@pytest.fixture(scope="module")
def shaped_rows(tmp_path_factory):
    """shape -> [(raw shaped record, elapse level, its pair row)]: two seeded v1 records with tool calls of each
    v1 file, given each shape, written as a v1 folder and read through the real data path (load_v1 -> pair rows
    -> Arrow), as training and evaluation read them."""
    import random

    from tests.paper_reference.make_golden import sample_rows

    def read(shape: str) -> list[tuple[dict, int, dict]]:
        rng = random.Random(23)
        folder, raw = tmp_path_factory.mktemp(shape), {}
        for file in sorted(V1.glob("prefer*_elapse_*.json")):
            records = [r for r in json.loads(file.read_text()) if any("tool_calls" in m for m in r["history"])]
            raw[file.name] = [shaped(r, shape) for r in rng.sample(records, 2)]
            (folder / file.name).write_text(json.dumps(raw[file.name]))
        rows = sample_rows(folder)
        return [(raw[file][i], int(file.rsplit("_", 1)[1].split(".")[0]), row) for (file, i), row in rows.items()]

    return read


@needs_v1
@pytest.mark.parametrize("shape", SHAPES)
def test_message_shapes_render_as_the_authors_handlers_do(shape, shaped_rows):
    """Records carrying each shape, read through the data path, render byte for byte as the authors' handlers render
    the records themselves, for every handler; where their code raises, ours refuses the sample with the reason."""
    repo = authors.authors_repo()
    assert repo is not None, f"the authors' code is needed: {authors.SHARED_REFERENCE} or TIMEALIGN_TICTOC_REPO"
    refused, rows = set(), shaped_rows(shape)
    for model in sorted(authors.HANDLERS):
        for record, level, row in rows:
            for timestamps, mode in [(True, "none"), (False, "rules")]:
                ours = _renderer(model, timestamps, mode)
                try:
                    theirs = authors.render(
                        repo,
                        model,
                        record["history"],
                        record["function"],
                        level=level,
                        use_time_stamp=timestamps,
                        mode=mode,
                    )
                except Exception:  # noqa: BLE001 - their code raised: the sample must be refused
                    with pytest.raises(UnrenderableSample):
                        ours.prompt(row["prompt"], row["tools"])
                    refused.add(model)
                    continue
                assert ours.prompt(row["prompt"], row["tools"]) == theirs, (model, row["id"], timestamps, mode)
    assert refused == REFUSED_BY_THEM[shape]


def test_refused_shapes_say_why():
    """The reason a refused shape is reported with (the suite's `unrenderable` list and training's warning name the
    record beside it)."""
    row = shaped({"history": HISTORY}, "empty_tool_calls")["history"]
    with pytest.raises(UnrenderableSample, match="an empty tool_calls list"):
        _renderer("llama3_1").prompt(row, TOOLS)
    with pytest.raises(UnrenderableSample, match="even an empty list, is a call"):
        _renderer("ministral").prompt(row, TOOLS)
    row = shaped({"history": HISTORY}, "call_without_id")["history"]
    with pytest.raises(UnrenderableSample, match="a call or result without one"):
        _renderer("ministral").prompt(row, TOOLS)
    row = shaped({"history": HISTORY}, "mapping_arguments")["history"]
    with pytest.raises(UnrenderableSample, match="arguments given as a mapping"):
        _renderer("deepseek_distill_qwen").prompt(row, TOOLS)


@needs_v1
@pytest.mark.parametrize("shape", (None,) + SHAPES)
def test_api_requests_equal_the_authors_api_handler(shape, v1_rows, shaped_rows):
    """`eval.backend=chat` under paper: the request's messages and tools equal what their API handler
    (`inference/api/openai.py` `format_input`, imported and called) builds, on a seeded v1 sample in every setting
    and on records carrying each message shape."""
    from timealign.suites.tictoc.requests import ChatRequestRenderer

    repo = authors.authors_repo()
    assert repo is not None, f"the authors' code is needed: {authors.SHARED_REFERENCE} or TIMEALIGN_TICTOC_REPO"
    if shape is None:
        raw = {f.name: json.loads(f.read_text()) for f in V1.glob("*.json")}
        keys = random.Random(23).sample(sorted(v1_rows), 40)
        records = [(raw[f][i], int(f.rsplit("_", 1)[1].split(".")[0]), v1_rows[(f, i)]) for f, i in keys]
    else:
        records = shaped_rows(shape)
    for record, level, row in records:
        for timestamps, mode in ALL_SETTINGS:
            theirs = authors.api_request(
                repo, record["history"], record["function"], level=level, use_time_stamp=timestamps, mode=mode
            )
            ours = json.loads(
                ChatRequestRenderer(protocol="paper", timestamps=timestamps, prompt_mode=mode).prompt(
                    row["prompt"], row["tools"]
                )
            )
            assert ours["messages"] == theirs["messages"], (row["id"], timestamps, mode)
            assert ours.get("tools") == theirs.get("tools"), row["id"]


def test_the_authors_engine_stand_ins_do_not_outlive_their_import():
    # Their handler modules import vllm (and the API handler openai) at import time; the stand-ins that make that
    # work must be gone afterwards, or a later test in the same pytest process finds a `vllm` that imports (and
    # runs instead of skipping) or an `openai` without its client. A fresh interpreter, so nothing was imported.
    import subprocess
    import sys

    repo = authors.authors_repo()
    assert repo is not None, f"the authors' code is needed: {authors.SHARED_REFERENCE} or TIMEALIGN_TICTOC_REPO"
    script = f"""
import importlib.util, sys
from pathlib import Path
from tests.paper_reference import authors
repo = Path({str(repo)!r})
for name in authors.HANDLERS:
    authors.handler(repo, name)
authors._their_module(repo, "api.openai")
assert "vllm" not in sys.modules, sys.modules["vllm"]
assert "openai" not in sys.modules or getattr(sys.modules["openai"], "__file__", None), "a stand-in openai is left"
print("clean")
"""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "clean", proc.stderr[-3000:]
