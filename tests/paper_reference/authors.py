"""A test oracle: the TicToc authors' own inference handlers, imported and called as their evaluation calls them.

Their code is read from ../shared/reference/tictoc (chengez/TicToc at c0b2b56) or a checkout named by
`TIMEALIGN_TICTOC_REPO=/path/to/TicToc`, never copied here. Each handler module of `inference/local/*.py` is
imported as it is written; only the engine it builds in `__init__` is kept out: the `vllm` import those modules make
at import time gets a stand-in (nothing of it runs: `render` calls `format_input`, which reads their templates and
`inference/sys_pmts.py`, on a handler made without `__init__`). So a prompt compared with `render` is the string
their code builds, message preparation and template both. `api_request` calls their API handler
(`inference/api/openai.py`, whose `openai` import gets a stand-in) the same way.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import types
from pathlib import Path

# handler module (inference/local/<name>.py, every local handler of inference/model_map.py) -> its class
HANDLERS = {
    "llama3_1": "Llama3_1_Handler",
    "llama3_2": "Llama3_2_Handler",
    "deepseek_distill_llama": "DeepSeek_Distill_Llama_Handler",
    "deepseek_distill_qwen": "DeepSeek_distill_Qwen_Handler",
    "qwen2_5": "Qwen2_5_Handler",
    "qwen3": "Qwen3_Handler",
    "qwen3_reason": "Qwen3_Handler",
    "ministral": "Ministral_Handler",
}

# The authors' code kept beside the project (../shared/reference/tictoc, chengez/TicToc at c0b2b56).
SHARED_REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "tictoc"


def authors_repo() -> Path | None:
    """TIMEALIGN_TICTOC_REPO, else ../shared/reference/tictoc; None where neither holds their handlers."""
    path = Path(os.environ.get("TIMEALIGN_TICTOC_REPO") or SHARED_REFERENCE)
    return path if (path / "inference" / "local").is_dir() and (path / "templates").is_dir() else None


def _vllm_stand_in() -> types.ModuleType:
    """What `from vllm import LLM, SamplingParams` needs; using either fails loudly (only `format_input` runs)."""
    module = types.ModuleType("vllm")

    def unused(*args, **kwargs):
        raise RuntimeError("the vLLM stand-in of tests/paper_reference/authors.py runs no engine")

    module.LLM = module.SamplingParams = unused
    return module


def _their_module(repo: Path, module: str):
    """One module of their `inference` package from `repo`, with stand-ins for the engines it imports."""
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))  # their modules import `inference.model_handler`, `inference.sys_pmts`
    loaded = sys.modules.get("inference")
    if loaded is not None and Path(list(loaded.__path__)[0]).resolve() != (repo / "inference").resolve():
        raise RuntimeError(f"another `inference` package is imported ({loaded.__path__}); theirs is {repo}/inference")
    # The stand-ins live in sys.modules only while their module imports: left there, a later test in the same
    # process would find a `vllm` that imports (require_vllm would not skip) or an empty `openai` SDK.
    stand_ins = {
        "vllm": _vllm_stand_in(),
        "openai": types.ModuleType("openai"),  # the API handler builds a client in __init__ only
    }
    added = {name: module for name, module in stand_ins.items() if name not in sys.modules}
    sys.modules.update(added)
    try:
        return importlib.import_module(f"inference.{module}")
    finally:
        for name, module in added.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


@functools.lru_cache(maxsize=None)
def handler(repo: Path, name: str):
    """Their handler `name` (a HANDLERS key) from `repo`, made without `__init__` (which would start vLLM)."""
    cls = getattr(_their_module(repo, f"local.{name}"), HANDLERS[name])
    return cls.__new__(cls)


def api_request(
    repo: Path, history: list[dict], tools, *, level: int, use_time_stamp: bool, mode: str = "none"
) -> dict:
    """Their chat-completions request (`inference/api/openai.py` `format_input`: messages and tools) for a record."""
    cls = _their_module(repo, "api.openai").OpenAI_Handler
    return cls.__new__(cls).format_input(
        history,
        tools,
        time_elapsed_level=level,
        use_time_stamp=use_time_stamp,
        use_special_sys_prompt_naive=mode == "reminder",
        use_special_sys_prompt_rule=mode == "rules",
    )


def render(
    repo: Path, name: str, history: list[dict], tools, *, level: int, use_time_stamp: bool, mode: str = "none"
) -> str:
    """Their prompt for one raw record (history as the data file has it), or what their code raises."""
    return handler(repo, name).format_input(
        history,
        tools,
        time_elapsed_level=level,
        use_time_stamp=use_time_stamp,
        use_special_sys_prompt_naive=mode == "reminder",
        use_special_sys_prompt_rule=mode == "rules",
    )
