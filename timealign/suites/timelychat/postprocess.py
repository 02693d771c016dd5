"""The TimelyChat authors' clean-up of generated replies, as an option (`timelychat.postprocess=true`).

The authors' turn-level script (sb-jang/timelychat, evaluate_turn-level.py) passes every generated reply through
`utils.postprocess.postprocess_response` before BLEU-2, ROUGE-L and BERTScore. It keeps the first line of the reply
and cuts it at the first sign of the model running on into another turn or into markup. `clean_reply` does the same
steps, in the same order (written here, not copied):

1. strip; drop a leading speaker tag with a parenthesised note ("B: (20 minutes later) ...");
2. collapse runs of spaces; keep the first line only;
3. drop a leading speaker tag ("B: ..."); drop up to three leading bracketed or parenthesised groups
   ("[20 minutes later] (laughs) ...");
4. cut at the first of: "A:", "B:", "#", "``", "--", "==", "__", "''", "[", "]", "<", ">", "(", ")", " ... ";
5. remove any remaining "( ... )" and "[ ... ]" groups (none are left after step 4; kept for parity).

Speaker tags are one capital letter followed by a colon, as in TimelyChat's A/B dialogs. A reply that is only
markup comes out empty (as with the authors' function). TIMER replies are cut at the next TIMER marker already
(`timealign.render.timer.TimerRenderer.read_utterance`), so this mostly matters for baselines that answer with a
speaker tag, an interval or a second turn; it is off by default.
"""

from __future__ import annotations

import re

__all__ = ["CUT_MARKERS", "clean_reply"]

# Where a reply is cut (step 4), in the authors' order; the order does not change the result, since each cut keeps
# the text before the first occurrence.
CUT_MARKERS = ("A:", "B:", "#", "``", "--", "==", "__", "''", "[", "]", "<", ">", "(", ")", " ... ")

_TAG_WITH_NOTE = re.compile(r"^[A-Z]:\s*\(.*?\)")
_TAG = re.compile(r"^[A-Z]\s*:")
_LEADING_GROUP = re.compile(r"^[\[\(].*?[\]\)]")


def clean_reply(reply: str) -> str:
    """The reply as the authors score it (module docstring): first line, no speaker tag, cut before run-on text."""
    text = _TAG_WITH_NOTE.sub("", reply.strip()).strip()
    text = re.sub(r" +", " ", text).strip()
    text = text.split("\n", 1)[0].strip()
    text = _TAG.sub("", text).strip()
    for _ in range(3):
        text = _LEADING_GROUP.sub("", text).strip()
    for marker in CUT_MARKERS:
        text = text.split(marker, 1)[0].strip()
    # The authors remove parenthesised groups, then bracketed ones; one pass of each.
    text = re.sub(r"\(.*?\)", "", text).strip()
    return re.sub(r"\[.*?\]", "", text).strip()
