"""A test oracle: the TicToc authors' own templates, rendered the way their inference handlers render them.

Used when a checkout of chengez/TicToc is at hand (`TIMEALIGN_TICTOC_REPO=/path/to/TicToc`, or
../shared/reference/tictoc beside the project): the templates
are read from that checkout, never copied here. The message preparation below restates their handlers'
`format_input` (inference/local/*.py) as a second, independent implementation of what `timealign.render.paper`
does, so the two can be compared on every v1 sample.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

# handler -> (template file, extra render variables); every local handler of inference/model_map.py
HANDLERS = {
    "llama3_1": (
        "llama3_1.jinja",
        {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "tools_in_user_message": True,
            "custom_tools": None,
            "date": True,
        },
    ),
    "llama3_2": (
        "llama3_1.jinja",
        {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "tools_in_user_message": True,
            "custom_tools": None,
            "date": True,
        },
    ),
    "deepseek_distill_llama": (
        "deepseek_distill_llama.jinja",
        {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "tools_in_user_message": True,
            "custom_tools": None,
            "date": True,
        },
    ),
    "deepseek_distill_qwen": ("deepseek_distill_qwen.jinja", {"enable_thinking": False}),
    "qwen2_5": ("qwen3.jinja", {"enable_thinking": False}),
    "qwen3": ("qwen3.jinja", {"enable_thinking": False}),
    "qwen3_reason": ("qwen3.jinja", {"enable_thinking": True}),
    "ministral": ("ministral.jinja", {"bos_token": "<s>", "eos_token": "</s>", "nine_char_ids": True}),
}


# The authors' code kept beside the project (../shared/reference/tictoc, chengez/TicToc at c0b2b56).
SHARED_REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "tictoc"


def authors_repo() -> Path | None:
    """TIMEALIGN_TICTOC_REPO, else ../shared/reference/tictoc; None where neither holds their templates."""
    path = Path(os.environ.get("TIMEALIGN_TICTOC_REPO") or SHARED_REFERENCE)
    return path if (path / "templates").is_dir() else None


def read_constants(repo: Path) -> dict[str, str]:
    """NAIVE and RULE of inference/sys_pmts.py, read as Python literals (no code of theirs is executed)."""
    tree = ast.parse((repo / "inference" / "sys_pmts.py").read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)}


def render(
    repo: Path, handler: str, history: list[dict], tools, *, level: int, use_time_stamp: bool, mode: str = "none"
) -> str:
    """Their prompt for one raw v1 sample (history with the final time list), or raises as their code would."""
    import jinja2

    template_file, extra = HANDLERS[handler]
    constants = read_constants(repo)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(repo / "templates")), trim_blocks=True, lstrip_blocks=True
    )
    messages = []
    for msg in history:
        m = {"role": msg["role"]}
        stamp = msg["time"] if isinstance(msg["time"], str) else msg["time"][level]
        if msg.get("content") is not None and "tool_calls" not in msg:
            m["content"] = f"[{stamp}] " + msg["content"] if use_time_stamp else msg["content"]
            if m["role"] == "system" and mode == "reminder":
                m["content"] = m["content"] + constants["NAIVE"]
            elif m["role"] == "system" and mode == "rules":
                m["content"] = m["content"] + constants["RULE"]
        if "tool_calls" in msg:
            m["tool_calls"] = msg["tool_calls"]
            m["content"] = None
        if msg["role"] == "tool" and "tool_call_id" in msg:
            m["tool_call_id"] = msg["tool_call_id"]
            if extra.get("nine_char_ids") and len(msg["tool_call_id"]) != 9:
                raise ValueError(f"Tool call ID {msg['tool_call_id']} is not 9 characters long.")
        messages.append(m)
    variables = {k: v for k, v in extra.items() if k not in ("date", "nine_char_ids")}
    if extra.get("date"):
        variables["date_string"] = history[0]["time"].split("T")[0]
    return env.get_template(template_file).render(
        messages=messages, tools=tools, add_generation_prompt=True, **variables
    )
