"""The TimelyChat suite's `timelychat.key=value` options (the names and defaults of the suite's former `OPTIONS`)."""

from __future__ import annotations

from dataclasses import dataclass

from timealign.config.schema import opt
from timealign.suites.timelychat.metrics import INTERVAL_READINGS


@dataclass
class TimelyChatOptions:
    data: str | None = opt(
        None,
        "a TimelyChat-layout (or dialog-layout) JSON/JSONL file or folder to evaluate on "
        "instead of the recipe's data, or `synthetic` (n synthetic held-out dialogs of "
        "seed=); unset: an sft (TIMER) recipe's own data.eval_split (data.source, "
        "data.path, as training read it), else synthetic",
    )
    n: int | None = opt(
        None,
        "number of dialogs: a seeded sample stratified by delayed / instant target of the "
        "recipe's split or of data= (default: all; the recipe's eval.max_samples), or n "
        "synthetic held-out dialogs (default 40)",
    )
    seed: int = opt(12345, "seed of the synthetic held-out dialogs (and of the sample n= draws from a file)")
    timing_turns: str = opt(
        "all",
        "all | target: predict the interval before every turn 2..T (the paper's "
        "protocol) or only before the target turn",
    )
    unparsed: str = opt(
        "instant",
        "instant | wrong | exclude: an unparseable predicted interval is scored as 0 "
        "minutes, counted as misclassified, or left out",
    )
    interval_reading: str = opt(
        "extract",
        "extract | strict | paper: read a predicted interval that is not a bare "
        "interval from prose and markdown (timealign.render.intervals."
        "extract_interval), or count it as unparsed, or read every interval as "
        "the TimelyChat authors' convert_to_minutes does (first quantity only: "
        '"1 hour 30 minutes" is 60; 0 where it reads none), the gold intervals written as text too',
    )
    postprocess: bool = opt(
        False,
        "true | false: clean generated replies the TimelyChat authors' way (first line, "
        "no speaker tag, cut at run-on markers) before BLEU-2 / ROUGE-L / BERTScore / "
        "the judge",
    )
    instant_max_minutes: float = opt(
        0.0, "a turn is delayed when its interval is above this many minutes, instant otherwise"
    )
    interval_max_new_tokens: int = opt(12, "generation budget of a predicted interval (tokens)")
    response_max_new_tokens: int = opt(64, "generation budget of a reply (tokens)")
    special_tokens: bool | None = opt(
        None,
        "true | false: whether the checkpoint uses the TIMER special tokens; "
        "unset: from its timealign_recipe.yaml, else true",
    )
    order: str | None = opt(
        None,
        "time_first | utterance_first: the TIMER turn order; unset: from the checkpoint's recipe, else time_first",
    )
    checkpoint: str | None = opt(
        None, "the folder whose timealign_recipe.yaml tells the TIMER format (default: the evaluated checkpoint)"
    )
    bertscore_model: str | None = opt(
        None, "BERTScore model name or local path (e.g. roberta-large); unset: BERTScore is skipped"
    )
    bertscore_num_layers: int | None = opt(None, "BERTScore layer (required for a model bert_score does not know)")
    bertscore_batch_size: int = opt(32, "BERTScore batch size")
    judge_url: str | None = opt(
        None, "OpenAI-compatible /v1 URL of an LLM judge (naturalness, time-specificity); needs judge_model"
    )
    judge_model: str | None = opt(None, "the judge's model name; needs judge_url")
    judge_api_key_env: str | None = opt(None, "environment variable holding the judge's API key")
    judge_max_samples: int | None = opt(None, "judge at most this many replies (default: all)")
    # Dialog-level evaluation (timealign.suites.timelychat.dialog).
    level: str = opt(
        "turn",
        "turn | dialog | both: the turn-level evaluation (Tables 2-3), the dialog-level one "
        "(Sec. 6.3, Fig. 3: the checkpoint converses with a simulated user from each dialog's "
        "first utterance, then an LLM judge rates coherence, delay-appropriateness and "
        "time-specificity; needs partner_url/partner_model, and judge_url/judge_model for the "
        "scores), or both",
    )
    dialog_turns: int = opt(
        10, "dialog-level: turns after the seed utterance, agent and simulated user alternating (the paper's 10)"
    )
    dialog_history: str = opt(
        "zero",
        "zero | predicted: the agent's earlier turns in its prompt carry 0 minutes "
        "(the authors' TIMER prompt, as in training) or the delays it chose",
    )
    partner_url: str | None = opt(
        None, "dialog-level: OpenAI-compatible /v1 URL of the simulated user (the paper: GPT-4o); needs partner_model"
    )
    partner_model: str | None = opt(None, "the simulated user's model name; needs partner_url")
    partner_api_key_env: str | None = opt(None, "environment variable holding the simulated user's API key")
    partner_temperature: float = opt(
        1.0, "the simulated user's sampling temperature (the authors called GPT-4o with the API default, 1.0)"
    )
    partner_structured: bool = opt(
        True,
        'true | false: ask the simulated user for a JSON {"answer": ...} '
        "object (response_format json_schema), as the authors' structured-output "
        "call did; false: plain text, for servers without structured outputs",
    )
    partner_max_new_tokens: int = opt(256, "generation budget of a simulated-user turn (tokens)")
    dialog_judge_max_new_tokens: int = opt(512, "generation budget of one dialog-level judgement (tokens)")
    judge_structured: bool = opt(
        False,
        "true | false: have the server enforce the dialog-level judge's JSON "
        "{score, explanation} answer (response_format json_schema), for weak local "
        "judges (a vLLM server: start it with --structured-outputs-config "
        '\'{"backend": "xgrammar", "disable_any_whitespace": true}\' or a '
        "weak model may pad the JSON with whitespace until its budget ends); the "
        "paper's judge answered freely",
    )

    def __post_init__(self):
        if self.interval_reading not in INTERVAL_READINGS:
            raise ValueError(
                f"timelychat.interval_reading={self.interval_reading!r}; known: {', '.join(INTERVAL_READINGS)}"
            )
        levels = ("turn", "dialog", "both")
        if self.level not in levels:
            raise ValueError(f"timelychat.level={self.level!r}; known: {', '.join(levels)}")
        if self.level != "turn" and not (self.partner_url and self.partner_model):
            raise ValueError(
                f"timelychat.level={self.level} needs a simulated user: timelychat.partner_url= (an "
                "OpenAI-compatible /v1 URL) and timelychat.partner_model="
            )
        if self.dialog_history not in ("zero", "predicted"):
            raise ValueError(f"timelychat.dialog_history={self.dialog_history!r}; known: zero, predicted")
        if self.dialog_turns < 1:
            raise ValueError(f"timelychat.dialog_turns={self.dialog_turns}: at least one turn after the seed")
