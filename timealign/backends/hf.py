"""Batched generation with transformers (CPU or GPU), full checkpoints or LoRA adapters (`timealign.backends.base`)."""

from __future__ import annotations

from pathlib import Path

from tqdm.auto import tqdm

from timealign.backends.base import BaseBackend, model_fingerprint
from timealign.config.dtypes import torch_dtype
from timealign.render import tokens


class HFBackend(BaseBackend):
    """Generates continuations of already-rendered prompt strings (rendered by the shared PromptRenderer)."""

    name = "hf"
    group_by_length = True  # batch each call's prompts longest first (outputs in the caller's order)

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        device: str | None = None,
        batch_size: int = 16,
        trust_remote_code: bool = False,
        sampling: dict | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(sampling)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        weights_dtype = torch_dtype(dtype)
        adapter = Path(model_path, "adapter_config.json")
        if adapter.exists():  # a LoRA checkpoint: load its base, then the adapter
            from peft import AutoPeftModelForCausalLM

            self.model = AutoPeftModelForCausalLM.from_pretrained(model_path, dtype=weights_dtype)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=weights_dtype, trust_remote_code=trust_remote_code
            )
        self.model.to(self.device).eval()
        self._attach(
            AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code),
            batch_size,
            model_fingerprint(model_path),
        )

    @classmethod
    def from_model(
        cls, model, tokenizer, *, batch_size: int = 16, sampling: dict | None = None, model_id: str = "in-memory"
    ) -> HFBackend:
        """A backend on a model already in memory (evaluation while training, `timealign.train.live_eval`): used as
        it is, on its device, in its dtype and train/eval mode (the caller's business); `tokenizer` gets left padding
        and a pad token, so pass a copy of one that something else uses."""
        backend = cls.__new__(cls)
        BaseBackend.__init__(backend, sampling)
        backend.model, backend.device = model, model.device
        backend._attach(tokenizer, batch_size, model_id)
        return backend

    def _attach(self, tokenizer, batch_size: int, model_id: str) -> None:
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"  # decoder-only batched generation
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.batch_size = batch_size
        self.cache_chunk = 4 * batch_size  # prompts per call from cached_generate: whole batches only
        self.model_id = model_id
        self.generated_tokens = 0  # ids generated so far (up to and with each row's EOS): speed counts ids, not text
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos_ids = set(eos) | ({self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set())

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int = 64,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        desc: str | None = "Generating",
    ) -> list[str]:
        import torch

        s = self.resolve_sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
        sampling = s["temperature"] > 0
        knobs = (
            {
                "do_sample": True,
                "temperature": s["temperature"],
                "top_p": s["top_p"],
                "top_k": s["top_k"],
                "min_p": s["min_p"],
            }
            if sampling
            else {"do_sample": False}
        )
        if sampling:
            torch.manual_seed(s["seed"])
        ids = [tokens.prompt_ids(self.tokenizer, prompt) for prompt in prompts]  # the ids training's prompts have
        order = list(range(len(prompts)))
        if self.group_by_length and len(prompts) > self.batch_size:
            # Longest first, so each batch holds prompts of similar length: less left padding (benchmarks/
            # bench_eval.py); the outputs keep the caller's order.
            order.sort(key=lambda i: -len(ids[i]))
        outputs: list[str] = [""] * len(prompts)
        for start in tqdm(range(0, len(prompts), self.batch_size), desc=desc, unit="batch", disable=desc is None):
            index = order[start : start + self.batch_size]
            enc = self.tokenizer.pad({"input_ids": [ids[i] for i in index]}, return_tensors="pt").to(self.device)
            with torch.no_grad():
                out = self.model.generate(
                    **enc, max_new_tokens=max_new_tokens, pad_token_id=self.tokenizer.pad_token_id, **knobs
                )
            for i, row in zip(index, out[:, enc["input_ids"].shape[1] :].tolist()):
                # End at the first EOS (kept): later positions are padding of rows that finished early.
                end = next((j + 1 for j, t in enumerate(row) if t in self.eos_ids), len(row))
                self.generated_tokens += end
                # Keep special tokens: tool-call markers such as <tool_call> are special in several tokenizers.
                outputs[i] = self.tokenizer.decode(row[:end], skip_special_tokens=False)
        return outputs
