"""Secrets never leave the process: one rule says which recipe fields hold them, one function blanks them.

    recipe = load_recipe(...)          # training.hub_token=hf_... -> held on the recipe, the field reads <redacted>
    redact(tree)                       # any dict (nested, or {dotted key: value}) with secret values replaced

A secret field is one whose name ends in `token` (`hub_token`, `*_token`) but is not a tokenizer's token
(`pad_token`, `eos_token`, ...), or holds `api_key` / `apikey` / `password` / `passwd` / `secret` / `credential`.
A name ending in `_env` names an environment variable (`eval.api_key_env`): not a secret, never redacted.

`load_recipe` calls `hold_secrets`: the real values move to `recipe.secrets` (a plain attribute: never saved, never
compared) and the fields read `REDACTED`, so every saved recipe (timealign_recipe.yaml, timealign_run.json), every
W&B config (training and evaluation), model card and report shows `<redacted>`. The hub token reaches the hub
through the environment (`HF_TOKEN`, `export_hub_token`), not through TrainingArguments, which the Trainer pickles
into training_args.bin. A secret given on the command line is blanked in `sys.argv` too (`redact_argv`): W&B
records the command line in every run's metadata. Writers apply `redact` again before saving: a recipe built
another way is covered too.
"""

from __future__ import annotations

import os
import re
import sys

REDACTED = "<redacted>"
HUB_TOKEN = "training.hub_token"
# Tokenizer settings (TRL's SFTConfig.eos_token, pad_token): token strings, not credentials.
TOKENIZER_TOKENS = re.compile(r"^(pad|eos|bos|unk|sep|cls|mask|additional_special|special)_tokens?$")
SECRET_NAME = re.compile(r"(^|_)token$|api_?key|password|passwd|secret|credential")


def is_secret_key(key: str) -> bool:
    """Whether a recipe field (`hub_token`, or dotted: `training.hub_token`) holds a secret."""
    name = str(key).rsplit(".", 1)[-1].lower().lstrip("+")
    if name.endswith("_env") or TOKENIZER_TOKENS.match(name):
        return False
    return bool(SECRET_NAME.search(name))


def _blank(value):
    return value if value is None or value == "" or value == REDACTED else REDACTED


def redact(tree):
    """A copy of `tree` (dicts, lists, tuples) with the value of every secret key replaced by REDACTED."""
    if isinstance(tree, dict):
        return {k: _blank(v) if is_secret_key(k) and not isinstance(v, dict) else redact(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(redact(v) for v in tree)
    return tree


def hold_secrets(recipe) -> None:
    """Move the secret values of `recipe.training` (the free-form section) to `recipe.secrets` and blank them there
    and in `recipe.overrides`."""
    held = dict(getattr(recipe, "secrets", None) or {})
    training = recipe.training or {}
    for key in list(training):
        if is_secret_key(key) and training[key] not in (None, "", REDACTED):
            held[f"training.{key}"] = str(training[key])
            training[key] = REDACTED
    recipe.secrets = held
    recipe.overrides = redact(getattr(recipe, "overrides", None) or {})
    if held:
        redact_argv()


def redact_argv(argv: list[str] | None = None) -> None:
    """Blank `key=SECRET` arguments in `sys.argv` (in place): W&B records the command line in its run metadata."""
    argv = sys.argv if argv is None else argv
    for i, arg in enumerate(argv):
        key, sep, value = arg.partition("=")
        if sep and is_secret_key(key) and value not in ("", REDACTED):
            argv[i] = f"{key}={REDACTED}"


def training_fields(recipe) -> dict:
    """`recipe.training` without its secret fields: what goes into TRL's config (pickled as training_args.bin)."""
    return {k: v for k, v in (recipe.training or {}).items() if not is_secret_key(k)}


def export_hub_token(recipe) -> None:
    """Give the hub token to huggingface_hub through HF_TOKEN (read at each hub call) for this process."""
    token = (getattr(recipe, "secrets", None) or {}).get(HUB_TOKEN)
    if token:
        os.environ["HF_TOKEN"] = token
