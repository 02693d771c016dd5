"""TIMER sequences (TimelyChat paper, "From What to Respond to When to Respond", Sec. 5.2 and 6.5).

Like `timealign.render.chat.PromptRenderer`, and for the same reason: training and the two-step inference
(`timealign.suites.timelychat.infer`) build their text with the one `TimerRenderer`, made from the recipe's `timer`
section by `TimerRenderer.for_timer` (at evaluation, the section the checkpoint saved:
`timealign.render.checkpoint`), so the model is prompted with exactly the prefix it was trained on.

How it relates to the chat template. TIMER is trained as a plain sequence model on its own format, not inside the
model's chat template: every turn is `<SPK> s_t <TIME> tau_t <UTT> u_t`, turns are concatenated, and the sequence ends
with the tokenizer's EOS. That is the paper's format (its TIMER 3B is an encoder-decoder with no chat template), and
it is what makes "predict the interval, then the utterance" two ordinary continuations of one prefix. Wrapping the
turns in user/assistant messages would put role headers (and, for TicToc's renderer, timestamps) between the
speaker and its interval and tie a two-speaker dialog to a user/assistant split it does not have. So
`PromptRenderer` (chat template) and `TimerRenderer` (TIMER format) are two renderers of one package; a checkpoint
trained with one is evaluated with the same one, and `TimerRenderer` text is tokenized the way every backend
tokenizes a rendered prompt (`add_special_tokens=True`, so a BOS-adding tokenizer adds its BOS in both places).

Spans and the time-token boundary. A sequence is built from spans whose kind is OTHER (not trained), TIME or
RESPONSE; token masks come from tokenizing the whole text once (what inference sees) and mapping tokens back to spans
by character offsets:
- `tau_t` is the canonical phrase of `timealign.render.intervals.render_minutes` ("0 minutes", "1 hour 30 minutes").
- The marker that ends a span belongs to it: `<UTT>` closes the interval (time-first order), so it is a TIME token;
  the next turn's `<SPK>` (or the final EOS) closes the utterance, so it is a RESPONSE token. The model thereby
  learns where each span stops, which the two-step inference relies on. Opening markers and speaker names are
  conditioning (OTHER), as in Eq. 4 (s_{<=t} is given).
- With special tokens, markers are added tokens, so no BPE piece can straddle a boundary and the interval is exactly
  the tokens between `<TIME>` and `<UTT>` (no spaces are put around markers for that reason).
- Without special tokens (the ablation) the turn is `s tau u` with single spaces and turns are separated by "\\n".
  Byte-level BPE pieces such as "Ġ2" or "Ġminutes" carry the space before a word, so each span owns the space
  before it (" 20 minutes" is the TIME span), and a token is assigned to the span holding its first non-whitespace
  character (a whitespace-only token: its first character). The "\\n" separator closes the previous utterance.
- Turns trained: `loss_turns="all"` trains turns 2..T (Eq. 4 sums t = 2..T; context turns carry tau = 0, Sec. 5.2),
  `"target"` only the last turn.

"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

TIMER_SPK, TIMER_TIME, TIMER_UTT = "<SPK>", "<TIME>", "<UTT>"
TIMER_TOKENS = (TIMER_SPK, TIMER_TIME, TIMER_UTT)
TOKEN_OTHER, TOKEN_TIME, TOKEN_RESPONSE = 0, 1, 2
TIMER_ORDERS = ("time_first", "utterance_first")
LOSS_TURNS = ("all", "target")


@dataclass(frozen=True)
class TimerTurn:
    """One dialog turn: who speaks, what, and the minutes elapsed since the previous turn (0 for context turns)."""

    speaker: str
    utterance: str
    minutes: float = 0.0


def add_timer_tokens(tokenizer) -> list[int]:
    """Add `<SPK>`, `<TIME>`, `<UTT>` as special tokens (no-op for those present); returns their ids.

    Added with normalized=False and no lstrip/rstrip, so they match exactly and leave the text around them alone.
    The caller resizes the model's embeddings (`timealign.train.timer.add_timer_tokens_to_model`).
    """
    from tokenizers import AddedToken

    vocab = tokenizer.get_vocab()
    missing = [t for t in TIMER_TOKENS if t not in vocab]
    if missing:
        tokenizer.add_tokens(
            [AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False) for t in missing],
            special_tokens=True,
        )
    return tokenizer.convert_tokens_to_ids(list(TIMER_TOKENS))


@dataclass
class TimerRenderer:
    """TIMER sequences and masks for training, and the matching prompts for two-step inference.

    special_tokens: `<SPK>/<TIME>/<UTT>` markers (the tokenizer must contain them: `add_timer_tokens`), or the
        plain `s tau u` ablation. order: "time_first" (TIMER) or "utterance_first" (the ablation).
    """

    tokenizer: Any = None
    special_tokens: bool = True
    order: str = "time_first"

    @classmethod
    def for_timer(cls, tokenizer: Any, timer: Any) -> "TimerRenderer":
        """The renderer a recipe's `timer` section asks for (`timealign.config.TimerSection`, or the one a checkpoint
        saved: `timealign.render.checkpoint`). Training and inference both build it here, so a render setting added
        to the section reaches both."""
        return cls(tokenizer, special_tokens=timer.special_tokens, order=timer.order)

    def __post_init__(self):
        if self.order not in TIMER_ORDERS:
            raise ValueError(f"unknown TIMER order {self.order!r}; known: {', '.join(TIMER_ORDERS)}")
        if self.special_tokens and self.tokenizer is not None:
            vocab = self.tokenizer.get_vocab()
            missing = [t for t in TIMER_TOKENS if t not in vocab]
            if missing:
                raise ValueError(
                    f"the tokenizer lacks the TIMER tokens {missing}; call add_timer_tokens(tokenizer) "
                    "(and resize the model's embeddings) first"
                )

    # -- text ----------------------------------------------------------------------------------------------------
    @property
    def eos(self) -> str:
        eos = getattr(self.tokenizer, "eos_token", None) if self.tokenizer is not None else None
        return eos or ""

    def _opener(self, index: int) -> str:
        """Text that opens turn `index` (and closes the previous turn's last span)."""
        if self.special_tokens:
            return TIMER_SPK
        return "" if index == 0 else "\n"

    def _turn_spans(self, turn: TimerTurn) -> list[tuple[str, str]]:
        """The turn after its opener, as (text, role) with role in speaker/marker/time/utt/close_time/close_utt."""
        tau = _render_tau(turn.minutes)
        if self.special_tokens:
            time = [(TIMER_TIME, "marker"), (tau, "time"), (TIMER_UTT, "close_time")]
            utt_first = [(TIMER_UTT, "marker"), (turn.utterance, "utt"), (TIMER_TIME, "close_utt")]
            if self.order == "time_first":
                return [(turn.speaker, "speaker"), *time, (turn.utterance, "utt")]
            return [(turn.speaker, "speaker"), *utt_first, (tau, "time")]
        if self.order == "time_first":
            return [(turn.speaker, "speaker"), (" " + tau, "time"), (" " + turn.utterance, "utt")]
        return [(turn.speaker, "speaker"), (" " + turn.utterance, "utt"), (" " + tau, "time")]

    def spans(
        self, turns: list[TimerTurn], train_turns=(), end: bool = True, time_turns=None
    ) -> list[tuple[str, int]]:
        """(text, kind) spans of a whole sequence.

        `train_turns`: turn indices whose utterance (and, unless `time_turns` is given, interval) is trained;
        `time_turns`: turn indices whose interval is trained (default: `train_turns`).
        """
        resp_on = set(train_turns)
        time_on = resp_on if time_turns is None else set(time_turns)

        def closing_kind(i: int) -> int:  # a turn's last span is its utterance (time-first) or its interval
            if self.order == "time_first":
                return TOKEN_RESPONSE if i in resp_on else TOKEN_OTHER
            return TOKEN_TIME if i in time_on else TOKEN_OTHER

        out: list[tuple[str, int]] = []
        for i, turn in enumerate(turns):
            opener = self._opener(i)
            if opener:
                out.append((opener, closing_kind(i - 1)))
            for text, role in self._turn_spans(turn):
                if role in ("time", "close_time"):
                    kind = TOKEN_TIME if i in time_on else TOKEN_OTHER
                elif role in ("utt", "close_utt"):
                    kind = TOKEN_RESPONSE if i in resp_on else TOKEN_OTHER
                else:
                    kind = TOKEN_OTHER
                out.append((text, kind))
        if end and self.eos:
            out.append((self.eos, closing_kind(len(turns) - 1)))
        return out

    def text(self, turns: list[TimerTurn], end: bool = True) -> str:
        return "".join(text for text, _ in self.spans(turns, (), end=end))

    # -- training features ---------------------------------------------------------------------------------------
    @staticmethod
    def train_turn_indices(num_turns: int, loss_turns: str = "all") -> list[int]:
        if loss_turns not in LOSS_TURNS:
            raise ValueError(f"unknown loss_turns {loss_turns!r}; known: {', '.join(LOSS_TURNS)}")
        if loss_turns == "target":
            return [num_turns - 1]
        return list(range(1, num_turns))  # Eq. 4: t = 2..T

    def features(
        self, turns: list[TimerTurn], train_turns=None, *, time_turns=None, max_length: int | None = None
    ) -> dict[str, list[int]]:
        """`input_ids`, `labels` (-100 off the trained spans) and `token_types` (0 other, 1 time, 2 response)."""
        return self.batch_features([(turns, train_turns, time_turns)], max_length=max_length)[0]

    def batch_features(self, items, *, max_length: int | None = None) -> list[dict[str, list[int]]]:
        """`features` for many items with one tokenizer call. An item is (turns, train_turns) or (turns,
        train_turns, time_turns), as in `spans`; `train_turns=None` trains turns 2..T.

        A row longer than `max_length` loses its oldest tokens, not its last turn (the target is the point of the
        row): the kept tail then starts at the first `<SPK>` it contains (a whole turn), and a tokenizer BOS is
        kept in front. Without special tokens the tail is cut at the token.
        """
        if self.tokenizer is None:
            raise ValueError("TimerRenderer needs a tokenizer to build token features")
        all_spans, texts = [], []
        for item in items:
            turns, train = item[0], item[1]
            time_turns = item[2] if len(item) > 2 else None
            if train is None:
                train = self.train_turn_indices(len(turns))
            spans = self.spans(turns, train, time_turns=time_turns)
            all_spans.append(spans)
            texts.append("".join(t for t, _ in spans))
        encoded = self._encode(texts)
        types_per_row = _batch_token_types(texts, all_spans, [offsets for _, offsets in encoded])
        spk_id = self.tokenizer.convert_tokens_to_ids(TIMER_SPK) if self.special_tokens else None
        out = []
        for (ids, offsets), types in zip(encoded, types_per_row):
            if max_length is not None and len(ids) > max_length:
                ids, types = self._truncate_left(ids, offsets, types, max_length, spk_id)
            labels = [i if t else -100 for i, t in zip(ids, types)]
            out.append({"input_ids": ids, "labels": labels, "token_types": types})
        return out

    @staticmethod
    def _truncate_left(ids, offsets, types, max_length, spk_id):
        head = 1 if offsets and offsets[0][0] == offsets[0][1] == 0 and len(ids) > 1 else 0  # tokenizer's BOS
        keep = max_length - head
        tail_ids, tail_types = ids[len(ids) - keep :], types[len(types) - keep :]
        if spk_id is not None and spk_id in tail_ids:
            first = tail_ids.index(spk_id)
            tail_ids, tail_types = tail_ids[first:], tail_types[first:]
        return ids[:head] + tail_ids, types[:head] + tail_types

    def _encode(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """(ids, character offsets) per text, tokenized as `tokenizer(text, add_special_tokens=True)` does.

        Calls the fast tokenizer's backend directly (transformers' per-row conversion costs more than the
        tokenization); the first call checks that this gives the same ids as the public call, else falls back.
        """
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None and getattr(self, "_backend_ok", None) is None and texts:
            probe = self.tokenizer(texts[0], add_special_tokens=True)["input_ids"]
            self._backend_ok = list(backend.encode(texts[0], add_special_tokens=True).ids) == list(probe)
        if backend is not None and getattr(self, "_backend_ok", False):
            return [(e.ids, e.offsets) for e in backend.encode_batch(texts, add_special_tokens=True)]
        enc = self.tokenizer(texts, add_special_tokens=True, return_offsets_mapping=True)
        return [(list(i), [tuple(o) for o in off]) for i, off in zip(enc["input_ids"], enc["offset_mapping"])]

    # -- inference prompts and readers ---------------------------------------------------------------------------
    def _turn_prefix(self, context: list[TimerTurn], speaker: str) -> str:
        return self.text(context, end=False) + self._opener(len(context)) + speaker

    def interval_prompt(self, context: list[TimerTurn], speaker: str) -> str:
        """Step 1 of time-first inference: the prefix after which the model writes the interval."""
        self._need("time_first")
        return self._turn_prefix(context, speaker) + (TIMER_TIME if self.special_tokens else "")

    def response_prompt(self, context: list[TimerTurn], speaker: str, minutes: float) -> str:
        """Step 2 of time-first inference: the prefix (with the interval) after which the model writes the reply."""
        self._need("time_first")
        tau = _render_tau(minutes)
        if self.special_tokens:
            return self.interval_prompt(context, speaker) + tau + TIMER_UTT
        return self._turn_prefix(context, speaker) + " " + tau

    def utterance_prompt(self, context: list[TimerTurn], speaker: str) -> str:
        """Step 1 of utterance-first inference: the prefix after which the model writes the utterance."""
        self._need("utterance_first")
        return self._turn_prefix(context, speaker) + (TIMER_UTT if self.special_tokens else "")

    def interval_after_prompt(self, context: list[TimerTurn], speaker: str, utterance: str) -> str:
        """Step 2 of utterance-first inference: the prefix (with the utterance) after which the interval follows."""
        self._need("utterance_first")
        if self.special_tokens:
            return self.utterance_prompt(context, speaker) + utterance + TIMER_TIME
        return self._turn_prefix(context, speaker) + " " + utterance

    def _need(self, order: str) -> None:
        if self.order != order:
            raise ValueError(f"this prompt is for order={order}; the renderer is order={self.order}")

    def _cut(self, generated: str, stops) -> str:
        stops = [s for s in (*stops, self.eos, getattr(self.tokenizer, "pad_token", None)) if s]
        end = len(generated)
        for stop in stops:
            pos = generated.find(stop)
            if pos != -1:
                end = min(end, pos)
        return generated[:end]

    def read_interval(self, generated: str) -> tuple[str, float | None]:
        """The interval text a model generated at an interval position, and its minutes (None if unreadable)."""
        from timealign.render.intervals import (
            IntervalParseError,
            parse_minutes,
            split_leading_interval,
        )

        if self.special_tokens:
            text = self._cut(generated, TIMER_TOKENS).strip()
            try:
                return text, parse_minutes(text)
            except IntervalParseError:
                return text, None
        text = self._cut(generated, ("\n",))
        if self.order == "time_first":
            found = split_leading_interval(text)
            if found is None:
                return text.strip(), None
            minutes, rest = found
            return text[: len(text) - len(rest)].strip(), minutes
        text = text.strip()
        try:
            return text, parse_minutes(text)
        except IntervalParseError:
            return text, None

    def read_utterance(self, generated: str) -> str:
        """The utterance a model generated at an utterance position (cut at the next marker, EOS or pad).

        Plain utterance-first text has nothing between the utterance and the interval that follows it on the same
        line; a trailing interval phrase is removed.
        """
        from timealign.render.intervals import split_trailing_interval

        stops = TIMER_TOKENS if self.special_tokens else ("\n",)
        text = self._cut(generated, stops).strip()
        if not self.special_tokens and self.order == "utterance_first":
            found = split_trailing_interval(text)
            if found is not None:
                text = found[0].strip()
        return text


@functools.lru_cache(maxsize=4096)
def _render_tau(minutes: float) -> str:
    from timealign.render.intervals import render_minutes

    return render_minutes(minutes)


def _batch_token_types(texts: list[str], all_spans: list[list[tuple[str, int]]], all_offsets) -> list[list[int]]:
    """Kind of each token: that of the span holding its first non-whitespace character (see the module docstring).

    Offsets are (start, end) character positions; tokens the tokenizer adds itself (BOS) have start == end: OTHER.
    All rows are laid end to end in one coordinate system and typed with one vectorised search; only the few tokens
    straddling a span edge take the Python path.
    """
    import itertools

    import numpy as np

    sizes = [len(offsets) for offsets in all_offsets]
    if not sum(sizes):
        return [[] for _ in texts]
    bases = np.cumsum([0] + [len(text) + 1 for text in texts[:-1]], dtype=np.int64)  # +1: rows never touch
    span_lengths = [len(piece) for spans in all_spans for piece, _ in spans]
    kinds_a = np.fromiter((kind for spans in all_spans for _, kind in spans), dtype=np.int64, count=len(span_lengths))
    span_rows = np.repeat(np.arange(len(texts)), [len(spans) for spans in all_spans])
    row_offsets = np.cumsum([0] + [len(spans) for spans in all_spans], dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(span_lengths, dtype=np.int64)])
    # start of each span within its own row, then in the joined coordinates
    span_starts_a = cum[:-1] - cum[row_offsets[span_rows]] + bases[span_rows]
    flat = np.fromiter(
        itertools.chain.from_iterable(itertools.chain.from_iterable(all_offsets)), dtype=np.int64, count=2 * sum(sizes)
    ).reshape(-1, 2)
    row_base = np.repeat(bases, sizes)
    starts = flat[:, 0] + row_base
    ends = np.where(flat[:, 1] > flat[:, 0], flat[:, 1] + row_base, -1)  # -1: added by the tokenizer (no chars)
    real = ends > starts
    first = np.searchsorted(span_starts_a, starts, side="right") - 1
    last = np.searchsorted(span_starts_a, np.maximum(ends - 1, 0), side="right") - 1
    types = np.where(real, kinds_a[np.clip(first, 0, None)], TOKEN_OTHER)
    straddling = np.nonzero(real & (first != last))[0]
    if len(straddling):
        joined = "\x00".join(texts)  # same coordinates as `base` above
        for j in straddling:
            start, end = int(starts[j]), int(ends[j])
            piece = joined[start:end]
            stripped = len(piece) - len(piece.lstrip())
            key = start + stripped if stripped < len(piece) else start
            types[j] = kinds_a[np.searchsorted(span_starts_a, key, side="right") - 1]
    out, pos = [], 0
    flat_types = types.tolist()
    for size in sizes:
        out.append(flat_types[pos : pos + size])
        pos += size
    return out
