"""The recipe schema: one dataclass per section, every field with its help text (what `--help` prints).

A recipe YAML (`recipes/NAME.yaml`) and the command line's dotted `key=value` overrides are merged onto these
dataclasses by `timealign.config.recipes.load_recipe` (OmegaConf structured configs: unknown keys and wrong types
fail). `training` is free-form here and checked against the installed TRL's DPOConfig/SFTConfig.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def opt(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A field with its help text (TRL's `metadata={"help": ...}` convention).

    `choices`: the values an enumerated field accepts; `--help` lists them and `load_recipe` refuses any other value
    (with a did-you-mean) before anything runs (`timealign.config.validate.choice_problems`).
    """
    metadata = {"help": help} if choices is None else {"help": help, "choices": tuple(choices)}
    return field(default=default, metadata=metadata)


def opt_list(help: str) -> Any:
    return field(default_factory=list, metadata={"help": help})


def section(cls: type, help: str) -> Any:
    return field(default_factory=cls, metadata={"help": help})


# data.source: the TicToc sources of task dpo (timealign.data.pairs) and the dialog sources of task sft
# (timealign.data.timer_prep); `validate` refuses a source of the other task.
DPO_SOURCES = ("synthetic", "v1", "annotated", "hub")
SFT_SOURCES = ("synthetic", "timelychat", "dialogs", "hub")
SOURCES = tuple(dict.fromkeys(DPO_SOURCES + SFT_SOURCES))


@dataclass
class ModelSection:
    name_or_path: str = opt(
        "tiny",
        "hub id, local folder, `tiny` (a random toy) or `smol` (SmolLM2-135M-Instruct, real weights); both built "
        "locally on first use (timealign.models)",
    )
    dtype: str = opt(
        "bfloat16", "float32 | bfloat16 | float16 | auto", choices=("float32", "bfloat16", "float16", "auto")
    )
    attn_implementation: str | None = opt(None, "e.g. sdpa, flash_attention_2")
    trust_remote_code: bool = opt(
        False, "let transformers run the model repository's own code (needed by some hub models)"
    )


@dataclass
class LoraSection:
    enabled: bool = opt(False, "train a LoRA adapter instead of all weights (PEFT)")
    r: int = opt(16, "LoRA rank")
    alpha: int = opt(32, "LoRA scaling alpha")
    dropout: float = opt(0.05, "dropout on the LoRA branch")
    target_modules: Any = opt("all-linear", "modules given adapters: all-linear or a list of module names")


@dataclass
class DataSection:
    source: str = opt(
        "synthetic",
        "task dpo: synthetic (embedded generator, no download) | v1 (TicToc v1 release folder) | annotated "
        "(JSON/JSONL with per-sample mean score S) | hub; task sft: synthetic | timelychat (TimelyChat-layout "
        "JSON/JSONL) | dialogs (dialog-turns JSON/JSONL) | hub. hub: a release as published, data.path = a hub "
        "dataset id (e.g. yizecheng/TicToc; the local hub cache first, HF_HUB_OFFLINE=1 honoured) or its downloaded "
        "folder, its layout detected from its files (docs/hub_data.md)",
        choices=SOURCES,
    )
    path: str | None = opt(None, "the source's folder, file or hub id (not used by source=synthetic)")
    prepared_dir: str | None = opt(
        None,
        "where data prep writes (and training reads) the prepared data; None: "
        "<output_dir>/data/<pairs|dialogs>-<fingerprint>. A folder holding data of other settings is refused, never "
        "reused",
    )
    prep_timeout: float = opt(
        3600.0,
        "seconds a process waits for data prep by another (its job's rank 0, or another job holding the folder's "
        "lock)",
    )
    timestamps: bool = opt(True, "ISO time at the start of every user/assistant/tool message")
    elapsed: bool = opt(False, "also '(+3 minutes 13 seconds since the last tool result)' after the reply's stamp")
    elapsed_separator: str = opt(
        "direct",
        "with data.elapsed: what comes between the badge and the reply: direct (nothing: the reply follows the "
        "badge's closing parenthesis) | newline | space. After a bare badge SmolLM2 starts its replies with a "
        "newline that no training pair has, and a trained smol never called (docs/experiment/real.md)",
        choices=("direct", "newline", "space"),
    )
    protocol: str = opt(
        "timealign",
        "how prompts are rendered, in training and evaluation alike: timealign (the model's own chat template, see "
        "docs/protocols.md) | paper (the TicToc authors' prompts byte for byte, timealign/render/paper.py)",
        choices=("timealign", "paper"),
    )
    overlength: str = opt(
        "truncate_prompt",
        "pairs longer than training.max_length (prompt + completion in the model's tokens): truncate_prompt (the "
        "prompt loses whole turns, oldest first; the system message, tool schemas, the latest tool result's turn and "
        "the final question stay; a pair that still does not fit is an error naming it) | truncate_prompt_or_drop "
        "(the same, but such a pair is left out) | drop (every longer pair is left out) | error (any longer pair "
        "stops the run) | trl (TRL's own handling: pairs whose prompt fills max_length are dropped, longer "
        "completions cut). Counted in <output_dir>/lengths.json, the log and the W&B summary",
        choices=("truncate_prompt", "truncate_prompt_or_drop", "drop", "error", "trl"),
    )
    score_orientation: str = opt(
        "tool_high",
        "tool_high: S = 3 means Tool (App. D.2) | tool_low: S = 0 means Tool (Sec. 2.5)",
        choices=("tool_high", "tool_low"),
    )
    margin_prefer_tool: float = opt(1.0, "delta when S is unknown (v1 release); retained v1 samples have |S-1.5| > 1")
    margin_prefer_no_tool: float = opt(1.0, "delta for prefer-noTool pairs when S is unknown (v1 release)")
    offset_scale: float = opt(1.0, "ODPO's alpha: offset = offset_scale * |S - 1.5|; 0 = plain DPO on the same pairs")
    min_margin: float = opt(0.0, "drop pairs with |S - 1.5| below this (the paper's evaluation keeps > 1.0)")
    unknown_scenarios: str = opt(
        "error",
        "error | bucket (kept under scenario 'unknown', split 'unknown'; the hub release's layout: kept under the "
        "name as given, in its file's split)",
        choices=("error", "bucket"),
    )
    direct_answer: str = opt(
        "latest_tool_result",
        "strategy when a sample has no direct-answer text: latest_tool_result | last_assistant_text | generate (a "
        "model writes every direct answer, the data's own too; see direct_answer_model)",
        choices=("latest_tool_result", "last_assistant_text", "generate"),
    )
    direct_answer_model: str | None = opt(
        None,
        "direct_answer=generate: the model that writes the direct answers (hub id, folder, tiny names; with the "
        "openai backend, the tokenizer to render with), prompted with each pair's own training prompt, then without "
        "the tools if it called one (still a call: that pair falls back to latest_tool_result, counted in "
        "manifest.json); None: model.name_or_path. Generations are cached beside the prepared folder "
        "(generations/direct_answers.jsonl)",
    )
    direct_answer_backend: str = opt(
        "hf",
        "direct_answer=generate: hf | vllm | openai, the evaluator's backends with the eval.* settings (sampling, "
        "dtype, engine, eval.base_url); data prep runs on rank 0 while the other ranks wait data.prep_timeout: "
        "prepare a large set first with data_prep/tictoc.py",
        choices=("hf", "vllm", "openai"),
    )
    direct_answer_max_new_tokens: int = opt(
        128,
        "direct_answer=generate: at most this many tokens per generated answer (answers cut by it are counted in "
        "manifest.json)",
    )
    on_error: str = opt(
        "raise", "raise | skip (bad records go to rejects.jsonl with their reason)", choices=("raise", "skip")
    )
    assume_timezone: str | None = opt(
        None,
        "TicToc: the zone of message times written without one (e.g. UTC, Europe/Berlin, +02:00); None: such a naive "
        "timestamp is an error naming its file and record",
    )
    synthetic_trajectories: int = opt(240, "per split, for source=synthetic")
    synthetic_max_rounds: int = opt(2, "retrieval rounds before the follow-up (1 = shorter sequences)")
    synthetic_sensitivity_swap: float = opt(
        0.0, "train split: share of tools given another sensitivity (see timealign/data/synthetic/generator.py)"
    )
    balance_train_labels: bool = opt(
        False, "subsample the train split to equal prefer-Tool/noTool counts (within data.balance_within)"
    )
    balance_within: str = opt(
        "scenario",
        "with balance_train_labels: scenario (equal labels in every scenario; a scenario with one label is dropped) "
        "| split (equal labels over the whole train split, the larger side drawn in proportion from every scenario "
        "and gap level: every scenario kept). timealign/data/pairs.py balance_labels",
        choices=("scenario", "split"),
    )
    validation_share: float = opt(
        0.0,
        "TicToc pairs: share of the train split's trajectories (every gap level of one together, about this share "
        "of each scenario) set aside as split 'validation' before label balancing, to choose a configuration "
        "without the test split (eval_split=validation); the same trajectories whatever data.seed; 0: none",
    )
    validation_by: str = opt(
        "trajectory",
        "with validation_share: trajectory (that share of each scenario's trajectories: validation scenarios are "
        "training scenarios) | scenario (that share of each sensitivity class's scenarios, whole: validation asks, "
        "as the test split does, about tools never trained on)",
        choices=("trajectory", "scenario"),
    )
    seed: int = opt(0, "seed of the synthetic generators and of label balancing")
    train_split: str = opt("train", "split that training reads")
    eval_split: str = opt("test", "held-out split that evaluation reads")


@dataclass
class EvalSection:
    backend: str = opt(
        "hf",
        "hf (transformers) | vllm (offline vllm.LLM engine) | openai (OpenAI-compatible server, completions with our "
        "rendered prompts) | chat (API models: chat completions with messages and tools, structured tool calls; "
        "TicToc only) | clock (no model: the elapsed-time rule of eval.clock_seconds, the baseline beside a model's "
        "NAR; TicToc only, no checkpoint=)",
        choices=("hf", "vllm", "openai", "chat", "clock"),
    )
    clock_seconds: float = opt(
        1800.0,
        "the elapsed-time rule's threshold in seconds: a tool call when the last tool result is older than this at "
        "the reply time, or when there is none (timealign/backends/clock.py); the rule of eval.backend=clock, and "
        "the line every TicToc report of a model carries for the same samples",
    )
    max_samples: int | None = opt(
        None,
        "cap on held-out samples: a seeded sample (data.seed) stratified by label and spread over the scenarios, the "
        "same rows for every run and checkpoint (timealign/data/sampling.py); None: all",
    )
    max_new_tokens: int = opt(
        24,
        "tokens generated per sample (chat: max_completion_tokens, which hidden reasoning counts against: raise it "
        "for API models; 0: no limit, as the TicToc authors' API runs)",
    )
    batch_size: int = opt(16, "hf: prompts per generate call; openai: concurrent requests")
    temperature: float | None = opt(
        None, "sampling temperature; None: the paper's default (0 = greedy; Qwen3 reasoning mode: 0.6)"
    )
    top_p: float | None = opt(None, "nucleus sampling; None: the paper's default (1.0; Qwen3 reasoning mode: 0.95)")
    top_k: int | None = opt(None, "0: no top-k")
    min_p: float | None = opt(None, "min-p sampling; None: the paper's default (0)")
    seed: int = opt(0, "sampling seed (used when temperature > 0)")
    reasoning: bool | None = opt(
        None, "Qwen3 thinking on/off (chat template's enable_thinking); None: template default"
    )
    dtype: str | None = opt(
        None, "hf/vllm weights dtype; None: model.dtype (bfloat16 -> the checkpoint's own, 'auto')"
    )
    cache: bool = opt(True, "cache finished samples in <out>/generations/<suite>.jsonl; a killed run resumes from it")
    tensor_parallel_size: int = opt(1, "vllm: GPUs that shard the model")
    max_model_len: int | None = opt(None, "vllm: context length; None: the model's own")
    enforce_eager: bool = opt(False, "vllm: no CUDA graphs / compilation (faster start; required on CPU in practice)")
    gpu_memory_utilization: float = opt(0.9, "vllm: share of GPU memory the engine may take")
    max_lora_rank: int | None = opt(
        None, "vllm: largest LoRA rank to serve; None: read off the adapter's adapter_config.json"
    )
    kv_cache_gib: float | None = opt(
        None, "vllm: KV-cache size in GiB; None: vLLM's own (GPU) or VLLM_CPU_KVCACHE_SPACE / 1 GiB (CPU)"
    )
    base_url: str | None = opt(
        None, "openai, chat: the OpenAI-compatible server (e.g. `vllm serve`), e.g. http://node17:8000/v1"
    )
    served_model: str | None = opt(None, "openai, chat: the server's model name (default: the checkpoint as given)")
    api_key_env: str = opt(
        "OPENAI_API_KEY", "openai, chat: environment variable holding the API key (unset: no key sent)"
    )
    allow_insecure_key: bool = opt(
        False,
        "openai, chat: true sends the API key over plain http to a server that is not a loopback address, where "
        "anyone on the network path can read it; false: the key goes only over https or to 127.0.0.0/8, ::1, "
        "localhost, else the run stops before any request",
    )
    request_timeout: float = opt(600.0, "openai, chat: seconds per request")
    max_retries: int = opt(5, "openai, chat: retries with exponential backoff on connection errors, 408/409/429/5xx")
    tool_choice: str = opt(
        "auto", "chat: tool_choice of each request: auto (the TicToc authors') | required | none | a tool's name"
    )
    prefix_caching: bool = opt(
        True,
        "vllm: automatic prefix caching (vLLM's enable_prefix_caching): the KV of a prompt prefix computed once is "
        "reused by later prompts with that prefix (a TicToc trajectory's elapse levels share all but their last "
        "message); the greedy outputs are the same either way; false: every prompt is prefilled in full",
    )
    bootstrap: int = opt(
        1000,
        "bootstrap resamples for the confidence interval of each suite's metrics, written as the report's "
        '"intervals" block and in report.md (percentile bootstrap over the samples, TicToc within each label; '
        "timealign/eval/bootstrap.py); 0: no intervals",
    )
    confidence: float = opt(0.95, "level of the bootstrap intervals, in (0, 1)")
    chat_sampling: bool = opt(
        True,
        "chat: send the sampling settings (temperature; top_p, seed when sampling); false: send none, the server's "
        "defaults, as the TicToc authors' API runs did",
    )
    max_failed_share: float = opt(
        0.05,
        "the evaluation fails (exit 1, the run not published as <out>/latest) when more than this share of a suite's "
        "generations failed (server errors, timeouts, malformed or overlong replies); the counts are in each suite "
        'JSON\'s "failures" block, report.md and the log; 0: any failure fails it, 1: never',
    )


@dataclass
class TimerSection:
    """TIMER-style multi-task SFT (TimelyChat paper, Sec. 5.2 and the Sec. 6.5 ablations); read by task: sft only."""

    lambda_time: float = opt(
        1.0, "loss = CE(response tokens) + lambda * CE(time tokens); 0 = the 'w/o time loss' ablation"
    )
    special_tokens: bool = opt(True, "<SPK> <TIME> <UTT> markers; false = the 'w/o special tokens' ablation")
    order: str = opt(
        "time_first",
        "time_first: <SPK> s <TIME> tau <UTT> u | utterance_first: the ablation",
        choices=("time_first", "utterance_first"),
    )
    loss_turns: str = opt(
        "all",
        "all: every turn after the first (Eq. 4, t = 2..T) | target: the final turn only",
        choices=("all", "target"),
    )
    loss_normalization: str = opt(
        "tokens",
        "tokens: one normalizer for both sums (Eq. 4-5) | per_type: two token means",
        choices=("tokens", "per_type"),
    )
    packing: bool = opt(
        False,
        "pack several rendered dialogs into each row of training.max_length tokens (TRL's best-fit decreasing; "
        "padding-free batches); each token keeps its time/response mask, positions restart and attention stays "
        "inside every dialog, so the loss is the unpacked one. false: one padded row per dialog",
    )
    emit_instant_counterpart: bool = opt(False, "also train the untimely reply given tau = 0 (tau given, not trained)")
    lora_new_tokens: str = opt(
        "trainable_tokens",
        "with LoRA: trainable_tokens (new rows only) | modules_to_save",
        choices=("trainable_tokens", "modules_to_save"),
    )
    synthetic_dialogs: int = opt(2000, "train dialogs for data.source=synthetic")
    synthetic_eval_dialogs: int = opt(200, "held-out dialogs for data.source=synthetic")


@dataclass
class DpoSection:
    """Offset-DPO (task: dpo): the margin's role in the loss, and speed settings (exact: they change how the batch
    is computed, not the loss)."""

    shared_prompt: bool = opt(
        True,
        "each pair's prompt goes through the policy (and the reference) once for both completions: [prompt | chosen "
        "| rejected] in one row, the completions kept apart by a tree attention mask, positions restarting after the "
        "prompt (timealign/train/shared_prompt.py); same loss, gradients and metrics as false: TRL's own rows "
        "(prompt + chosen, prompt + rejected). Needs model.attn_implementation sdpa, eager or flex_attention (a "
        "block-sparse BlockMask; GPU training only: torch has no flex backward on CPU) and a llama, mistral, "
        "ministral, qwen2 or qwen3 model (refused otherwise)",
    )
    margin_mode: str = opt(
        "offset",
        "how each pair's margin (|S - 1.5| times data.offset_scale) enters the loss: offset (the TicToc paper's "
        "formula: -log sigmoid(beta * h - delta)) | plain (plain DPO on the same pairs) | log_offset (ODPO's "
        "log-scaled offset, delta = log(1 + margin)) | weight (no offset; each pair's loss weighted by its margin, "
        "the paper's prose reading; needs shared_prompt). timealign/train/odpo.py",
        choices=("offset", "plain", "log_offset", "weight"),
    )
    padding_free: bool = opt(
        False,
        "with shared_prompt: the micro-batch's pairs packed into one row with no padding (block-diagonal attention "
        "mask over the whole row: attention work and mask memory grow with the square of the packed length); false: "
        "one row per pair, padded to the longest",
    )
    prompt_cache: bool = opt(
        False,
        "with shared_prompt: each pair's prompt runs once as a plain causal forward (the fast attention kernels, no "
        "tree mask) and both completions attend to its cached keys and values (timealign/train/prompt_cache.py); "
        "same loss, gradients and metrics. Needs model.attn_implementation sdpa or eager, no "
        "training.gradient_checkpointing (transformers drops the cache under it) and padding_free=false (refused "
        "otherwise); false: the tree-mask layout",
    )


@dataclass
class LiveEvalSection:
    """Evaluation while training (timealign.train.live_eval): the model being trained scores a fixed held-out slice
    with the evaluator's own code (dpo: TicToc NAR and attempt rates; sft: TimelyChat delay F1, RMSLE, BLEU-2,
    ROUGE-L), logged as eval_live/* at the global step into the trainer log and training.report_to (W&B: eval/live/*).
    Generation: transformers on the training process's model in memory (eval.batch_size, eval.max_new_tokens and the
    eval.* sampling settings apply; eval.backend does not); DDP: the main process evaluates, the others wait; ZeRO-3:
    every rank generates; FSDP: refused."""

    every_steps: int = opt(0, "score the held-out slice every N optimizer steps and after the last step; 0: off")
    max_samples: int = opt(
        64,
        "the slice: N rows of the prepared data's data.eval_split, a seeded sample "
        "stratified by label (timealign/data/sampling.py), the same rows every time (what "
        "eval/run.py scores with eval.max_samples=N)",
    )
    at_start: bool = opt(
        True, "also score before the first step, so the curve starts at the base model (not on resume)"
    )


@dataclass
class WandbSection:
    project: str = opt("timealign", "W&B project of training and evaluation runs")
    entity: str | None = opt(None, "W&B entity (team or user); None: your default")
    name: str | None = opt(None, "run name; None: W&B picks one")
    tags: list = opt_list("extra run tags (the recipe, data fingerprint and git commit are added)")


@dataclass
class BatchSection:
    """One global batch, whatever the process count (timealign.train.batch)."""

    global_size: int | None = opt(
        None,
        "pairs (dpo) or rows (sft) per optimizer step over all processes: global "
        "batch = per device x processes x gradient accumulation, solved at launch "
        'for the process count and logged ("global batch 16 = 1 per device x 4 '
        'processes x 4 accumulation"). The per-device batch is '
        "training.per_device_train_batch_size when set (it must divide global_size / "
        "processes), else the largest divisor up to TRL's default; "
        "training.gradient_accumulation_steps follows (set as well, it must agree). "
        "A global_size the processes cannot divide stops the run with the "
        "arithmetic. null: training.per_device_train_batch_size and "
        "gradient_accumulation_steps as given (the global batch then grows with the "
        "process count)",
    )


@dataclass
class LaunchSection:
    """Cluster launch defaults, read by `python -m timealign.cluster` and slurm/*.sbatch; every training run also
    checks at start that it runs as `accelerate_config` says (`check`)."""

    accelerate_config: str = opt(
        "ddp", "recipes/accelerate/NAME.yaml or a path: ddp | fsdp | fsdp_offload | zero2 | zero3 | zero3_offload"
    )
    check: str = opt(
        "error",
        "at training start, compare what runs (processes, DDP/FSDP/DeepSpeed and their settings, mixed precision) "
        "with accelerate_config and the recipe: error (stop, print the right command) | warn (log and go on) | off",
        choices=("error", "warn", "off"),
    )
    nodes: int = opt(1, "nodes of a SLURM job")
    gpus_per_node: int = opt(
        8,
        "GPUs per node that `submit` requests (--gres=gpu:N); inside a job the GPUs Slurm "
        "allocated decide, one process each; 0: a CPU-only job (--gres=none)",
    )
    gpu_type: str | None = opt(None, "gres type, e.g. a100, l40s (None: any GPU)")
    partition: str | None = opt(None, "SLURM partition (None: the cluster's default)")
    account: str | None = opt(None, "SLURM account (None: your default)")
    time: str = opt("24:00:00", "SLURM time limit (HH:MM:SS or D-HH:MM:SS)")
    cpus_per_gpu: int = opt(8, "SLURM CPUs per GPU (a CPU-only job: per process)")
    mem_per_gpu: str | None = opt(
        "32G",
        "host RAM per GPU (a CPU-only job: per process), e.g. 64G or 4000M: "
        "`submit` asks --mem=<processes per node x this> per node, checked against "
        "the partition's nodes (8B bf16 policy + reference is ~32 GB before sharding, read "
        "by rank 0 only under the shipped FSDP configs, by every process otherwise; FSDP/ZeRO "
        "CPU offload holds shards in RAM too). null: the cluster's default memory",
    )
    requeue: bool = opt(True, "checkpoint on the warning signal, requeue, resume from the newest checkpoint")
    signal_seconds: int = opt(
        120,
        "the warning signal (USR1: checkpoint, requeue) comes this long before the time limit (--signal=B:USR1@N); "
        "it must cover one optimizer step + one checkpoint save (each save logs its time and warns when it does not "
        "fit): 8B full fine-tuning: 600 or more",
    )
    max_requeues: int = opt(20, "give up after this many requeues")
    main_process_port: int | None = opt(
        None,
        "rendezvous port; None: MASTER_PORT, else the first port free on the first node from 20000 + job id % 12000 "
        "(two jobs on one node never share one)",
    )
    setup: str | None = opt(
        None, "shell line run first on every node, e.g. 'module load cuda; source .venv/bin/activate'"
    )


@dataclass
class Recipe:
    name: str = opt("", "the recipe's name (its file name, unless set)")
    description: str = opt("", "one line shown in recipe listings")
    task: str = opt(
        "dpo", "dpo (offset-DPO on TicToc pairs) | sft (TIMER-style SFT on dialogs)", choices=("dpo", "sft")
    )
    output_dir: str = opt("outputs/{name}", "where checkpoints and the final model go ({name} is the recipe's name)")
    overwrite_output_dir: bool = opt(
        False,
        "output_dir belongs to one run (timealign_run.json: its recipe and data fingerprint): a run with the same "
        "recipe and data resumes there, another stops and names the differences. true: another run's checkpoints, "
        "model, logs and evaluation reports there are deleted and this run starts (its prepared data under data/ is "
        "kept)",
    )
    model: ModelSection = section(ModelSection, "the policy model")
    lora: LoraSection = section(LoraSection, "LoRA instead of full fine-tuning")
    data: DataSection = section(DataSection, "data prep and prompt rendering")
    eval: EvalSection = section(EvalSection, "evaluation backend and generation")
    dpo: DpoSection = section(DpoSection, "offset-DPO speed (task: dpo)")
    live_eval: LiveEvalSection = section(LiveEvalSection, "evaluation while training (curves in the log and W&B)")
    wandb: WandbSection = section(WandbSection, "Weights & Biases run settings")
    timer: TimerSection = section(TimerSection, "TIMER-style SFT (task: sft)")
    batch: BatchSection = section(BatchSection, "the global batch, independent of the process count")
    launch: LaunchSection = section(LaunchSection, "cluster launch (slurm/*.sbatch, timealign.cluster)")
    training: dict = field(
        default_factory=dict,
        metadata={
            "help": "any field of TRL's DPOConfig (task dpo) or SFTConfig (task sft), checked against the "
            "installed TRL"
        },
    )

    def resolved_output_dir(self) -> str:
        return self.output_dir.format(name=self.name)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
