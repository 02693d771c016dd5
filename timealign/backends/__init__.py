"""Generation backends: one interface (`base`), three engines (`hf`, `vllm`, `openai`), a lazy factory."""
