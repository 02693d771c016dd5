"""Two-step TIMER inference: generate the interval, then the utterance conditioned on it (TimelyChat paper, Eqs. 2-3).

    infer = TimerInference.from_checkpoint("outputs/tiny-timer")         # HF backend + the checkpoint's renderer
    preds = infer.run(contexts, speakers)                                 # subtask 1 then 2 (the agent's own timing)
    minutes = infer.predict_intervals(contexts, speakers)                 # subtask 1: response timing prediction
    replies = infer.respond(contexts, speakers, gold_minutes)             # subtask 2: time-conditioned generation

`contexts` are lists of `timealign.render.timer.TimerTurn` (context turns carry minutes = 0, as in training),
`speakers` the target speaker of each. Prompts come from the `TimerRenderer` training used (`from_checkpoint` reads
its settings back from the checkpoint's saved recipe: `timealign.render.checkpoint`), so step 1 is the training
prefix up to `<TIME>` and step 2 the prefix up to `<UTT>` with the canonical interval (`render_minutes`) in between:
the model always continues text of the exact form it was trained on.

Any backend with `generate(prompts, max_new_tokens=..., desc=...) -> list[str]` that keeps special tokens in its
output works (the HF backend does; vLLM with `skip_special_tokens=False`); a plain callable `(prompts,
max_new_tokens) -> list[str]` too. Output is cut at the next TIMER marker, EOS or pad token.

Unreadable intervals: when step 1's text does not parse (`timealign.render.intervals.parse_minutes`), the prediction
has `minutes=None`, `interval_parsed=False`, and step 2 is conditioned on `fallback_minutes` (default 0: an instant
reply), so every dialog still gets a response; metrics decide how to count it.

Order "utterance_first" (the Table 5 ablation) runs the other way round: the utterance is generated first, then the
interval after it; `respond` then ignores the given minutes (the format has no place for them before the
utterance, which is why that ablation loses response quality).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from omegaconf import MISSING

from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.render.checkpoint import timer_renderer_for_checkpoint
from timealign.render.timer import TimerRenderer, TimerTurn

__all__ = ["TimerInference", "TimerPrediction"]


@dataclass
class TimerPrediction:
    interval_text: str  # what the model wrote for the interval
    minutes: float | None  # parsed, None if unreadable
    response: str
    interval_parsed: bool
    conditioned_on: float | None  # the minutes step 2 was conditioned on (time-first order)

    def to_dict(self) -> dict:
        return asdict(self)


class TimerInference:
    def __init__(
        self,
        backend: Any,
        renderer: TimerRenderer,
        *,
        interval_max_new_tokens: int = 12,
        response_max_new_tokens: int = 64,
        fallback_minutes: float = 0.0,
    ):
        if callable(getattr(backend, "generate", None)):
            self._generate: Callable = lambda prompts, n, desc: backend.generate(prompts, max_new_tokens=n, desc=desc)
        elif callable(backend):
            self._generate = lambda prompts, n, desc: backend(prompts, n)
        else:
            raise TypeError("backend must have generate(prompts, max_new_tokens=..., desc=...) or be a callable")
        self.renderer = renderer
        self.interval_max_new_tokens = interval_max_new_tokens
        self.response_max_new_tokens = response_max_new_tokens
        self.fallback_minutes = fallback_minutes

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, *, dtype: str = "auto", device: str | None = None, batch_size: int = 16, **kwargs
    ) -> "TimerInference":
        """HF backend on a trained checkpoint (full model or LoRA adapter) and the renderer it was trained with
        (`timer_renderer_for_checkpoint`: a checkpoint that was not TIMER-trained raises TimerCheckpointError)."""
        from timealign.backends.hf import HFBackend

        backend = HFBackend(str(path), dtype=dtype, device=device, batch_size=batch_size)
        return cls(backend, timer_renderer_for_checkpoint(backend.tokenizer, path), **kwargs)

    # -- the two subtasks --------------------------------------------------------------------------------------
    def predict_intervals(
        self, contexts: Sequence[list[TimerTurn]], speakers: Sequence[str]
    ) -> list[tuple[str, float | None]]:
        """Subtask 1: (interval text, minutes or None) per dialog."""
        _check(contexts, speakers)
        r = self.renderer
        if r.order == "time_first":
            prompts = [r.interval_prompt(list(c), s) for c, s in zip(contexts, speakers)]
            outs = self._generate(prompts, self.interval_max_new_tokens, "TIMER step 1: interval")
            return [r.read_interval(o) for o in outs]
        return [(p.interval_text, p.minutes) for p in self.run(contexts, speakers)]

    def respond(
        self, contexts: Sequence[list[TimerTurn]], speakers: Sequence[str], minutes: Sequence[float]
    ) -> list[str]:
        """Subtask 2: the reply given the interval (utterance-first order: the interval cannot be given, ignored)."""
        _check(contexts, speakers)
        if len(minutes) != len(contexts):
            raise ValueError(f"{len(minutes)} intervals for {len(contexts)} dialogs")
        r = self.renderer
        if r.order == "time_first":
            prompts = [r.response_prompt(list(c), s, m) for c, s, m in zip(contexts, speakers, minutes)]
        else:
            prompts = [r.utterance_prompt(list(c), s) for c, s in zip(contexts, speakers)]
        outs = self._generate(prompts, self.response_max_new_tokens, "TIMER step 2: response")
        return [r.read_utterance(o) for o in outs]

    def run(self, contexts: Sequence[list[TimerTurn]], speakers: Sequence[str]) -> list[TimerPrediction]:
        """Both steps in the trained order: time-first predicts the interval, then replies conditioned on it."""
        _check(contexts, speakers)
        r = self.renderer
        if r.order == "time_first":
            intervals = self.predict_intervals(contexts, speakers)
            used = [m if m is not None else self.fallback_minutes for _, m in intervals]
            replies = self.respond(contexts, speakers, used)
            return [
                TimerPrediction(text, m, reply, m is not None, u)
                for (text, m), reply, u in zip(intervals, replies, used)
            ]
        replies = self.respond(contexts, speakers, [0.0] * len(contexts))
        prompts = [r.interval_after_prompt(list(c), s, reply) for c, s, reply in zip(contexts, speakers, replies)]
        outs = self._generate(prompts, self.interval_max_new_tokens, "TIMER step 2: interval")
        intervals = [r.read_interval(o) for o in outs]
        return [TimerPrediction(text, m, reply, m is not None, None) for (text, m), reply in zip(intervals, replies)]


def _check(contexts, speakers) -> None:
    if len(contexts) != len(speakers):
        raise ValueError(f"{len(contexts)} contexts but {len(speakers)} target speakers")


@dataclass
class InferOptions:
    checkpoint: str = opt(MISSING, "TIMER checkpoint: a model or LoRA adapter folder written by train/sft.py")
    data: str | None = opt(
        None, "dialogs in the TimelyChat layout (JSON/JSONL); default: n held-out synthetic dialogs"
    )
    n: int = opt(8, "at most this many dialogs")
    out: str | None = opt(None, "also write every prediction as JSONL to this file")


COMMAND = Command(
    prog="python -m timealign.suites.timelychat.infer",
    summary="Two-step TIMER inference on a trained checkpoint (full model or LoRA adapter): predict each dialog's "
    "response delay, then the reply conditioned on it; prints gold vs predicted interval and the reply.",
    options=InferOptions,
    recipe="none",
)


def run(invocation: Invocation) -> int:
    import json

    from timealign.config.validate import check_model_reference
    from timealign.render.intervals import render_minutes

    opts = invocation.options
    check_model_reference(opts.checkpoint, "checkpoint")  # before loading any data: one line, exit 2
    if opts.data:
        from timealign.data.timelychat import load_timelychat

        dialogs = load_timelychat(opts.data).samples[: opts.n]
    else:
        from timealign.data.synthetic.dialogs import generate_timelychat
        from timealign.data.timelychat import timelychat_dialog

        dialogs = [
            timelychat_dialog(r, "synthetic[heldout]", i)
            for i, r in enumerate(generate_timelychat(opts.n, seed=12345, split="heldout"))
        ]
    infer = TimerInference.from_checkpoint(opts.checkpoint)
    preds = infer.run([d.context for d in dialogs], [d.target_speaker for d in dialogs])
    for d, p in zip(dialogs, preds):
        got = render_minutes(p.minutes) if p.minutes is not None else f"unreadable: {p.interval_text!r}"
        print(f"{d.id}: {d.context[-1].speaker}: {d.context[-1].utterance}")
        print(f"    gold [{render_minutes(d.target_minutes)} later] {d.target_speaker}: {d.utterances[-1]}")
        print(f"    TIMER [{got} later] {d.target_speaker}: {p.response}")
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as fh:
            for d, p in zip(dialogs, preds):
                fh.write(json.dumps({"id": d.id, "gold_minutes": d.target_minutes, **p.to_dict()}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    from timealign.data.records import MissingData, RecordError

    # Data that is not there is MissingData (one line, exit 2); any other FileNotFoundError keeps its traceback
    return run_command(COMMAND, argv, run, errors={RecordError: 1, MissingData: 2})


if __name__ == "__main__":
    raise SystemExit(main())
