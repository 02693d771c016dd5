"""Model families: one registry entry holds everything timealign knows about a chat-template family.

A family decides how a tokenizer's chat template is recognised (`detect_family`), the tool-call syntax the evaluator
and data prep look for in generated text (`timealign.render.tool_calls`), the TicToc authors' attempt
signature and dropped special tokens under the `paper` protocol, the authors' prompt renderer it uses
(`timealign.render.paper.TEMPLATES`), and the model types the shared-prompt DPO layout is verified for
(`timealign.train.shared_prompt`). Adding a family is adding one `ModelFamily` to `FAMILIES` (docs: README,
"Extending timealign").
"""

from __future__ import annotations

from dataclasses import dataclass

from timealign.config.options import RecipeError


@dataclass(frozen=True)
class ModelFamily:
    name: str
    # Detection: the chat template holds every marker of at least one group, and none of `template_absent`.
    template_markers: tuple[tuple[str, ...], ...]
    # Tool calls in generated text: a match of this regex, or call-shaped JSON, in the output's action part.
    call_markers: str
    # Where the action starts: "none" (the whole output), "tags" (after </think>; an unclosed <think> is all
    # reasoning), "prompt_opens" (the generation prompt ends in <think>: without </think> the output is reasoning).
    reasoning: str
    # `paper` protocol: the authors' attempt signature (every string must occur) and the special tokens their vLLM
    # decoding dropped (a regex), so an output they saw as "" is empty here too.
    paper_signature: tuple[str, ...]
    paper_special_tokens: str
    # key of timealign.render.paper.TEMPLATES: the authors' renderer this family's prompts use under `paper`
    paper_template: str
    # transformers model types of the family's checkpoints that the shared-prompt layout is verified for
    model_types: tuple[str, ...]
    template_absent: tuple[str, ...] = ()

    def matches(self, chat_template: str) -> bool:
        return any(all(m in chat_template for m in group) for group in self.template_markers) and not any(
            m in chat_template for m in self.template_absent
        )


_CHATML_SPECIAL = r"<\|[a-z_]+\|>"
_HERMES_SIGNATURE = ("<tool_call>", "</tool_call>")

# Checked in this order by `detect_family` (tiny and smollm2 before qwen: all speak ChatML with <tool_call>).
FAMILIES: dict[str, ModelFamily] = {
    f.name: f
    for f in (
        # DeepSeek-R1 distills (Llama and Qwen bases): the R1 template and its tool-call markers
        ModelFamily(
            "deepseek_r1",
            (("<｜tool▁calls▁begin｜>",), ("<｜Assistant｜>",)),
            r"<｜tool▁calls?▁begin｜>",
            "prompt_opens",
            ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"),
            r"<｜(?:end▁of▁sentence|begin▁of▁sentence|Assistant|User)｜>",
            "deepseek_r1",
            ("llama", "qwen2"),
        ),
        # Ministral / Mistral: [TOOL_CALLS] [{"name": ..., "arguments": ...}]
        ModelFamily(
            "mistral",
            (("[TOOL_CALLS]",),),
            r"\[TOOL_CALLS\]",
            "none",
            ('"arguments"', '"name"'),
            r"</?s>|\[/?(?:TOOL_CALLS|ARGS|CALL_ID|INST|TOOL_RESULTS|AVAILABLE_TOOLS)\]",
            "mistral",
            ("mistral", "ministral"),
        ),
        # Llama 3.1 / 3.2: custom tools as {"name": ..., "parameters": ...}; builtins after <|python_tag|>
        ModelFamily(
            "llama3",
            (("<|start_header_id|>",),),
            r"<\|python_tag\|>",
            "none",
            ('"name"', '"parameters"'),
            r"<\|[a-z_0-9]+\|>",
            "llama3",
            ("llama",),
        ),
        # timealign's own test models (timealign/models/tiny.py): ChatML, <tool_call>, a "# Tools" section, no <tools>
        ModelFamily(
            "tiny",
            (("<tool_call>", "<|im_start|>", "# Tools"),),
            r"<tool_call>",
            "tags",
            _HERMES_SIGNATURE,
            _CHATML_SPECIAL,
            "qwen",
            ("llama",),
            template_absent=("<tools>",),
        ),
        # SmolLM2 as `smol` builds it (timealign/models/smol.py): ChatML, tools in <tools>, Hermes <tool_call>s; a
        # Llama architecture, so checked before qwen (whose markers its template also holds)
        ModelFamily(
            "smollm2",
            (("<tool_call>", "<|im_start|>", "SmolLM"),),
            r"<tool_call>",
            "tags",
            _HERMES_SIGNATURE,
            _CHATML_SPECIAL,
            "qwen",
            ("llama",),
        ),
        # Qwen 2.5 / Qwen 3 (Hermes-style <tool_call>{...}</tool_call>; Qwen3 thinks in <think> blocks)
        ModelFamily(
            "qwen",
            (("<tool_call>", "<|im_start|>"),),
            r"<tool_call>",
            "tags",
            _HERMES_SIGNATURE,
            _CHATML_SPECIAL,
            "qwen",
            ("qwen2", "qwen3"),
        ),
    )
}


def get_family(name: str) -> ModelFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise RecipeError(
            f"unknown model family {name!r}; one of: {', '.join(sorted(FAMILIES))} (timealign/render/families.py)"
        ) from None


def shared_prompt_model_types() -> tuple[str, ...]:
    """Every model type some family's checkpoints have: the architectures dpo.shared_prompt is verified for."""
    return tuple(dict.fromkeys(t for family in FAMILIES.values() for t in family.model_types))


def detect_family(chat_template: str | None) -> str:
    """The family whose template markers the tokenizer's chat template holds; an unknown template is a clear error."""
    template = chat_template or ""
    for family in FAMILIES.values():
        if family.matches(template):
            return family.name
    raise RecipeError(
        "cannot tell the tool-call format of this model's chat template; name it with family=NAME "
        "(python eval/run.py ... family=NAME), one of: " + ", ".join(sorted(FAMILIES))
    )
