"""`model.dtype` / `eval.dtype` text -> the torch dtype that transformers' `from_pretrained(dtype=...)` takes.

One table for training (`timealign.train.models`) and the hf evaluation backend; torch is imported only when called.
"""

from __future__ import annotations

from timealign.config.options import RecipeError

DTYPES = ("float32", "bfloat16", "float16", "auto")


def torch_dtype(name: str):
    """`model.dtype` text -> the torch dtype transformers' `from_pretrained(dtype=...)` takes ("auto" stays)."""
    import torch

    if name == "auto":
        return "auto"
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise RecipeError(f"model.dtype must be {', '.join(DTYPES[:-1])} or auto, got {name!r}") from None
