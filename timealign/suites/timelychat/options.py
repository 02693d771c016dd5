"""The TimelyChat suite's `timelychat.key=value` options (the names and defaults of the suite's former `OPTIONS`)."""

from __future__ import annotations

from dataclasses import dataclass

from timealign.config.schema import opt


@dataclass
class TimelyChatOptions:
    data: str | None = opt(None, "a TimelyChat-layout (or dialog-layout) JSON/JSONL file or folder to evaluate on; "
                                 "unset: n synthetic held-out dialogs")
    n: int | None = opt(None, "number of dialogs: the first n of data=, or n synthetic held-out dialogs (default 40)")
    seed: int = opt(12345, "seed of the synthetic held-out dialogs")
    timing_turns: str = opt("all", "all | target: predict the interval before every turn 2..T (the paper's "
                                   "protocol) or only before the target turn")
    unparsed: str = opt("instant", "instant | wrong | exclude: an unparseable predicted interval is scored as 0 "
                                   "minutes, counted as misclassified, or left out")
    interval_reading: str = opt("extract", "extract | strict: read a predicted interval that is not a bare interval "
                                           "from prose and markdown (timealign.render.intervals.extract_interval), "
                                           "or count it as unparsed")
    postprocess: bool = opt(False, "true | false: clean generated replies the TimelyChat authors' way (first line, "
                                   "no speaker tag, cut at run-on markers) before BLEU-2 / ROUGE-L / BERTScore / "
                                   "the judge")
    instant_max_minutes: float = opt(0.0, "a turn is delayed when its interval is above this many minutes, instant "
                                          "otherwise")
    interval_max_new_tokens: int = opt(12, "generation budget of a predicted interval (tokens)")
    response_max_new_tokens: int = opt(64, "generation budget of a reply (tokens)")
    special_tokens: bool | None = opt(None, "true | false: whether the checkpoint uses the TIMER special tokens; "
                                            "unset: from its timealign_recipe.yaml, else true")
    order: str | None = opt(None, "time_first | utterance_first: the TIMER turn order; unset: from the checkpoint's "
                                  "recipe, else time_first")
    checkpoint: str | None = opt(None, "the folder whose timealign_recipe.yaml tells the TIMER format (default: the "
                                       "evaluated checkpoint)")
    bertscore_model: str | None = opt(None, "BERTScore model name or local path (e.g. roberta-large); unset: "
                                            "BERTScore is skipped")
    bertscore_num_layers: int | None = opt(None, "BERTScore layer (required for a model bert_score does not know)")
    bertscore_batch_size: int = opt(32, "BERTScore batch size")
    judge_url: str | None = opt(None, "OpenAI-compatible /v1 URL of an LLM judge (naturalness, time-specificity); "
                                      "needs judge_model")
    judge_model: str | None = opt(None, "the judge's model name; needs judge_url")
    judge_api_key_env: str | None = opt(None, "environment variable holding the judge's API key")
    judge_max_samples: int | None = opt(None, "judge at most this many replies (default: all)")
