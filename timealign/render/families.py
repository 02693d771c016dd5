"""Which chat-template family a tokenizer speaks: decides tool-call syntax and the paper protocol's renderer."""

from __future__ import annotations

from timealign.config.options import RecipeError

# tiny: timealign's own test models (ChatML with <tool_call>, see timealign/tiny.py); the others are the TicToc
# paper's open-weight families (Llama 3.1/3.2, Qwen 2.5/3, Ministral, DeepSeek-R1-Distill Llama/Qwen).
FAMILIES = ("deepseek_r1", "llama3", "mistral", "qwen", "tiny")


def detect_family(chat_template: str | None) -> str:
    """Guess the family from a tokenizer's chat template; an unknown template is a clear error."""
    template = chat_template or ""
    if "<｜tool▁calls▁begin｜>" in template or "<｜Assistant｜>" in template:
        return "deepseek_r1"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|start_header_id|>" in template:
        return "llama3"
    if "<tool_call>" in template and "<|im_start|>" in template:
        return "tiny" if "# Tools" in template and "<tools>" not in template else "qwen"
    raise RecipeError("cannot tell the tool-call format of this model's chat template; name it with family=NAME "
                      "(python eval/run.py ... family=NAME), one of: " + ", ".join(FAMILIES))
