"""Train/eval parity of rendering: the same samples rendered by the training path and the evaluation path give the
same text, for every render option.

Chat (TicToc): training renders each prepared pair with `timealign.train.dpo.render_split` and the renderer the
recipe's `data` section asks for; evaluation runs the TicToc suite on the same recipe. Each prompt the suite sends the
model must be the prompt part of the training pair (timestamps on/off, elapsed badge on/off, prompt modes
none/reminder/rules).

TIMER (TimelyChat): training features come from `timealign.train.sft.featurize` with the tokenizer training builds;
evaluation reads the checkpoint's saved recipe (the TimelyChat suite and `TimerInference.from_checkpoint`). Every
prompt must be a prefix of the training text, in characters and in tokens, for special tokens on/off and both
orders. The evaluation backend is a "perfect model" that continues each prompt with the training text, so the
suite must also read back every gold interval and reply.
"""

from __future__ import annotations

import re

import pytest
import yaml

from timealign.config import load_recipe
from timealign.render.chat import REMINDER_PROMPT, RULES_PROMPT, PromptRenderer
from timealign.render.checkpoint import CHECKPOINT_RECIPE, timer_renderer_for_checkpoint
from timealign.render.timer import TimerRenderer
from timealign.suites.registry import EvalContext

# ------------------------------------------------------------------------------------------------ chat (TicToc)

ISO_STAMP = re.compile(r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\]")


class RecordingBackend:
    """Stands in for the model: records every prompt it is asked to continue and answers with a plain reply."""

    name = "recording"

    def __init__(self, tokenizer):
        self.tokenizer, self.prompts = tokenizer, []

    def generate(self, prompts, *, max_new_tokens=24, desc=None, **_):
        self.prompts.extend(prompts)
        return ["It is sunny." for _ in prompts]


@pytest.fixture(scope="module")
def prepared_pairs(tmp_path_factory):
    """Synthetic TicToc pairs prepared once (data prep does not depend on the render options)."""
    from timealign.data.prepared import ensure_prepared

    folder = tmp_path_factory.mktemp("pairs")
    recipe = load_recipe("tiny", {"data.prepared_dir": str(folder), "data.synthetic_trajectories": "6"})
    ensure_prepared(recipe, kind="pairs")
    return folder


def tictoc_recipe(prepared_pairs, tmp_path, **data):
    overrides = {
        "data.prepared_dir": str(prepared_pairs),
        "data.synthetic_trajectories": "6",
        "eval.max_samples": "12",
        "output_dir": str(tmp_path / "out"),
    }
    overrides.update({f"data.{key}": str(value).lower() for key, value in data.items()})
    return load_recipe("tiny", overrides)


def training_pairs(recipe, tokenizer, prompt_mode="none") -> list[dict]:
    """The held-out rows rendered the way `timealign.train.dpo` renders its splits."""
    from timealign.data.pairs import load_prepared
    from timealign.train.dpo import render_split

    split = load_prepared(recipe.data.prepared_dir)[recipe.data.eval_split]
    from datasets import Dataset

    from timealign.data.sampling import sample_pairs

    split = Dataset.from_list(sample_pairs(split.to_list(), recipe.eval.max_samples, recipe.data.seed)[0])
    renderer = PromptRenderer.for_data(tokenizer, recipe.data, prompt_mode=prompt_mode)
    return render_split(split, renderer, "parity").to_list()


def suite_prompts(recipe, tokenizer, tmp_path, prompt_mode="none") -> list[str]:
    """The prompts the TicToc suite sends the model, with the context the eval runner builds for this recipe."""
    from timealign.suites.tictoc.suite import SUITE

    backend = RecordingBackend(tokenizer)
    ctx = EvalContext(
        recipe=recipe, out_dir=tmp_path / "eval", timestamps=recipe.data.timestamps, prompt_mode=prompt_mode
    )
    report = SUITE.run(backend, ctx)
    assert report["settings"]["prompt_mode"] == prompt_mode
    assert report["settings"]["prompt_protocol"] == report["settings"]["protocol"] == recipe.data.protocol
    return backend.prompts


def same_prompts(sent: list[str], trained: list[str]) -> bool:
    """The model was asked exactly the training prompts (a prompt shared by several samples is generated once)."""
    return sorted(sent) == sorted(set(trained))


@pytest.mark.parametrize("timestamps", [True, False])
@pytest.mark.parametrize("elapsed", [True, False])
def test_tictoc_prompts_are_the_training_prompts(prepared_pairs, tiny_tokenizer, tmp_path, timestamps, elapsed):
    recipe = tictoc_recipe(prepared_pairs, tmp_path, timestamps=timestamps, elapsed=elapsed)
    pairs = training_pairs(recipe, tiny_tokenizer)
    prompts = suite_prompts(recipe, tiny_tokenizer, tmp_path)
    assert pairs and same_prompts(prompts, [pair["prompt"] for pair in pairs])
    # the options took effect on both roads (parity of two renderings that ignore them would prove nothing)
    assert all(bool(ISO_STAMP.search(p)) == timestamps for p in prompts)
    assert any("since the last" in p for p in prompts) == (timestamps and elapsed)


def test_the_elapsed_separator_reaches_training_and_the_suite(prepared_pairs, tiny_tokenizer, tmp_path):
    """data.elapsed_separator=newline: the suite asks exactly the training prompts, each badge followed by the line
    break."""
    recipe = tictoc_recipe(prepared_pairs, tmp_path, elapsed=True, elapsed_separator="newline")
    pairs = training_pairs(recipe, tiny_tokenizer)
    prompts = suite_prompts(recipe, tiny_tokenizer, tmp_path)
    assert pairs and same_prompts(prompts, [pair["prompt"] for pair in pairs])
    badged = [p for p in prompts if "since the last tool result" in p]
    assert badged and all(p.endswith(" since the last tool result)\n") for p in badged)


@pytest.mark.parametrize("timestamps", [True, False])
@pytest.mark.parametrize("prompt_mode", ["none", "rules"])
def test_paper_protocol_prompts_are_the_training_prompts(
    prepared_pairs, tiny_tokenizer, tmp_path, timestamps, prompt_mode
):
    """`data.protocol=paper`: training and the suite both render the authors' way (no stamp after the assistant
    header, `[ts] ` with a space, the system message stamped, their sys_pmts text), and detection follows it."""
    from timealign.render.paper import PAPER_RULES

    recipe = tictoc_recipe(prepared_pairs, tmp_path, timestamps=timestamps, protocol="paper")
    pairs = training_pairs(recipe, tiny_tokenizer, prompt_mode=prompt_mode)
    prompts = suite_prompts(recipe, tiny_tokenizer, tmp_path, prompt_mode=prompt_mode)
    assert pairs and same_prompts(prompts, [pair["prompt"] for pair in pairs])
    assert all(p.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") for p in prompts)
    assert all(bool(re.search(r"<\|im_start\|>system\n\[\d{4}-[^\]]+\] ", p)) == timestamps for p in prompts)
    assert all((PAPER_RULES in p) == (prompt_mode == "rules") for p in prompts)
    assert all(pair["chosen"].endswith("<|im_end|>") and pair["rejected"].endswith("<|im_end|>") for pair in pairs)


@pytest.mark.parametrize(
    "prompt_mode, addition", [("none", None), ("reminder", REMINDER_PROMPT), ("rules", RULES_PROMPT)]
)
def test_tictoc_prompt_modes_match_the_pair_prompt(prepared_pairs, tiny_tokenizer, tmp_path, prompt_mode, addition):
    recipe = tictoc_recipe(prepared_pairs, tmp_path, elapsed=True)
    pairs = training_pairs(recipe, tiny_tokenizer, prompt_mode=prompt_mode)
    prompts = suite_prompts(recipe, tiny_tokenizer, tmp_path, prompt_mode=prompt_mode)
    assert same_prompts(prompts, [pair["prompt"] for pair in pairs])
    if addition is None:
        assert not any(REMINDER_PROMPT in p for p in prompts)
    else:
        assert all(addition in p for p in prompts)


def test_eval_overrides_reach_the_suite(prepared_pairs, tiny_tokenizer, tmp_path):
    """`timestamps=false` at evaluation (the paper's no-timestamp condition) renders like a no-timestamp recipe."""
    stamped = tictoc_recipe(prepared_pairs, tmp_path, timestamps=True, elapsed=True)
    backend = RecordingBackend(tiny_tokenizer)
    from timealign.suites.tictoc.suite import SUITE

    SUITE.run(backend, EvalContext(recipe=stamped, out_dir=tmp_path / "eval", timestamps=False))
    plain = tictoc_recipe(prepared_pairs, tmp_path, timestamps=False)
    assert same_prompts(backend.prompts, [pair["prompt"] for pair in training_pairs(plain, tiny_tokenizer)])


# ----------------------------------------------------------------------------------------------- TIMER (TimelyChat)


class PerfectTimerBackend:
    """Stands in for a model that learned its training text exactly: each prompt is continued with the rest of
    `text`. A prompt that is not a prefix of `text` gets "" (and is kept in `misses`)."""

    name = "perfect"

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text, self.prompts, self.misses = tokenizer, text, [], []

    def generate(self, prompts, *, max_new_tokens=64, desc=None, **_):
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            if self.text.startswith(prompt):
                out.append(self.text[len(prompt) :])
            else:
                self.misses.append(prompt)
                out.append("")
        return out


TIMER_OPTIONS = [(True, "time_first"), (True, "utterance_first"), (False, "time_first"), (False, "utterance_first")]


@pytest.fixture(scope="module", params=TIMER_OPTIONS, ids=lambda o: f"special_tokens={o[0]}-{o[1]}")
def timer_checkpoint(request, tiny_model_dir, tmp_path_factory):
    """A checkpoint folder as training leaves it (model and tokenizer from `build_model_and_tokenizer`, the resolved
    recipe beside them), untrained: rendering does not depend on the weights."""
    from timealign.train.sft import build_model_and_tokenizer

    special_tokens, order = request.param
    folder = tmp_path_factory.mktemp("timer-ckpt")
    recipe = load_recipe(
        "tiny-timer",
        {
            "model.name_or_path": str(tiny_model_dir),
            "output_dir": str(folder),
            "timer.special_tokens": str(special_tokens).lower(),
            "timer.order": order,
        },
        task="sft",
    )
    model, tokenizer, _ = build_model_and_tokenizer(recipe)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    return recipe, tokenizer, folder


@pytest.fixture(scope="module")
def dialogs():
    from timealign.suites.timelychat.eval_data import load_eval_dialogs

    return load_eval_dialogs(None, 3, 7)


def training_rows(recipe, tokenizer, dialogs) -> dict[str, dict]:
    """`timealign.train.sft.featurize` on the dialogs, with the renderer training builds: id -> feature row."""
    from datasets import Dataset

    from timealign.train.sft import featurize

    renderer = TimerRenderer.for_timer(tokenizer, recipe.timer)
    rows = featurize(Dataset.from_list([d.to_row() for d in dialogs]), renderer, recipe.timer, None)
    return {row["id"]: row for row in rows.to_list()}


def check_prefixes(backend, tokenizer, train_ids):
    """Every prompt is a prefix of the training text, and tokenizes to a prefix of the training ids."""
    assert backend.prompts and not backend.misses, backend.misses[:1]
    for prompt in backend.prompts:
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        assert ids == train_ids[: len(ids)], prompt


def test_timer_renderer_is_read_back_from_the_checkpoint(timer_checkpoint):
    from timealign.suites.timelychat.infer import TimerInference

    recipe, _, folder = timer_checkpoint
    infer = TimerInference.from_checkpoint(folder, dtype="float32", device="cpu")
    expected = TimerRenderer.for_timer(infer.renderer.tokenizer, recipe.timer)
    assert (infer.renderer.special_tokens, infer.renderer.order) == (expected.special_tokens, expected.order)


def test_timelychat_prompts_are_prefixes_of_the_training_text(timer_checkpoint, dialogs):
    from transformers import AutoTokenizer

    from timealign.suites.timelychat.infer import TimerInference
    from timealign.suites.timelychat.turn_level import evaluate_timelychat

    recipe, train_tokenizer, folder = timer_checkpoint
    rows = training_rows(recipe, train_tokenizer, dialogs)
    train_renderer = TimerRenderer.for_timer(train_tokenizer, recipe.timer)
    eval_tokenizer = AutoTokenizer.from_pretrained(folder)  # what a backend on the checkpoint loads
    for dialog in dialogs:
        text = train_renderer.text(dialog.turns())
        train_ids = rows[dialog.id]["input_ids"]
        assert train_tokenizer(text, add_special_tokens=True)["input_ids"] == train_ids

        # the TimelyChat suite, reading the renderer from the checkpoint's saved recipe
        backend = PerfectTimerBackend(eval_tokenizer, text)
        backend.checkpoint = str(folder)
        report = evaluate_timelychat(backend, [dialog], interval_max_new_tokens=8, response_max_new_tokens=8)
        check_prefixes(backend, eval_tokenizer, train_ids)
        assert report["settings"]["special_tokens"] == recipe.timer.special_tokens
        assert report["settings"]["order"] == recipe.timer.order
        cases = report["samples"][0]["timing"]
        assert [c["pred_minutes"] for c in cases] == [c["gold_minutes"] for c in cases]
        assert report["samples"][0]["response"] == dialog.utterances[-1]

        # two-step inference (`TimerInference`) with the renderer `from_checkpoint` uses
        backend = PerfectTimerBackend(eval_tokenizer, text)
        infer = TimerInference(backend, timer_renderer_for_checkpoint(eval_tokenizer, folder))
        prediction = infer.run([dialog.context], [dialog.target_speaker])[0]
        check_prefixes(backend, eval_tokenizer, train_ids)
        assert (prediction.minutes, prediction.response) == (dialog.target_minutes, dialog.utterances[-1])
