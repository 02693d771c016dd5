"""Memory planner: what a recipe needs per GPU and per node before it is submitted (`cluster plan gpu=h100`).

An estimate from the model's shape (timealign/cluster/model_shapes/*.json: the families' published config values,
no weights), the recipe (task, micro-batch, max_length, gradient checkpointing, LoRA, precomputed reference) and the
sharding strategy read off the accelerate config (ddp, fsdp, fsdp_offload, zero2, zero2_offload, zero3,
zero3_offload). Per GPU: parameters, gradients, optimizer state, the reference model, activations, logits and a fixed
runtime reserve; per node: host RAM at load and at the optimizer step.

Assumptions (stated once, here):
- AdamW. FSDP2 and DeepSpeed with training.bf16 keep fp32 master weights, fp32 Adam moments (and FSDP fp32
  gradients): about 16 bytes a parameter, sharded. DDP keeps the weights in model.dtype, its moments in the same dtype
  (torch's AdamW) and one extra gradient copy in its buckets.
- LoRA adapters are fp32 (PEFT upcasts them), 16 bytes a trainable parameter; the reference is the base with the
  adapter disabled (no second model).
- Activations: per token and layer, the tensors HF's Llama/Qwen/Mistral decoder saves for backward (two RMSNorms
  with their fp32 copy, q/k/v/attention output, four intermediate-sized MLP tensors); with gradient checkpointing
  each layer's input plus one layer recomputed. SDPA/flash attention keeps no seq x seq scores; eager does; the shared
  prompt's dense mask (sdpa) is one seq x seq mask per row (none with `dpo.prompt_cache`, which shares the prompt as
  a key/value cache; that layout's peak is not yet measured on a GPU). Logits: none as a whole; TRL's fused LM
  head, which the trainers call, projects tiles of 4096 positions x 32768 columns and keeps fp32 gradient accumulators
  (`fused_head_bytes`).
- DPO rows: chosen and rejected, each up to max_length: 2 x micro-batch x max_length tokens. The shared prompt packs
  a pair in one row, the prompt once and both completions: micro-batch x the longest such row (`shared_row_length`,
  when the data is known), at most 2 x max_length. With `dpo.padding_free` the micro-batch's rows are one row of
  their summed lengths, no padding (`packed_row_length`, the longest such row when the data is known; else
  micro-batch x the longest pair row): its dense tree mask (sdpa, eager) is that row squared, FlexAttention keeps
  none (its BlockMask holds a few integers per 128 x 128 block). SFT: micro-batch x max_length.
- The LM head projects every position of TRL's rows on CPU and only the labelled ones on CUDA/XPU (Triton); the
  shared layouts project only the labelled positions on every device (`timealign.train.compact_head` on CPU), so
  when the data is known (`labelled_tokens`: a micro-batch's completion tokens) the head counts those.
- A runtime reserve per GPU (CUDA context, NCCL, cuBLAS workspace, allocator slack) and per process on the host
  (torch and CUDA libraries): constants below, not measured here.
Checked on CPU against measured peaks of small models (tests/test_memory_plan.py, tolerance stated there).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from timealign.config import RecipeError

SHAPES_DIR = Path(__file__).with_name("model_shapes")
GIB = 1024**3
MIB = 1024**2
# Usable memory as nvidia-smi reports it.
GPUS = {"l40s": 46068 * MIB, "a100-40": 40960 * MIB, "a100-80": 81920 * MIB, "h100": 81559 * MIB, "h200": 143771 * MIB}
GPU_RESERVE = int(2.0 * GIB)  # CUDA context + NCCL + cuBLAS workspace + allocator fragmentation
HOST_PER_PROCESS = int(3.0 * GIB)  # torch, CUDA libraries, tokenizer, dataset in each process
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
STRATEGIES = ("ddp", "fsdp", "fsdp_offload", "zero2", "zero2_offload", "zero3", "zero3_offload")


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qk_norm: bool = False

    def layer_params(self) -> int:
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return h * q + 2 * h * kv + q * h + 3 * h * self.intermediate_size + norms

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def params(self) -> int:
        return self.num_hidden_layers * self.layer_params() + self.embedding_params() + self.hidden_size

    def lora_params(self, r: int) -> int:
        """all-linear LoRA: r x (in + out) for q, k, v, o, gate, up and down in every layer."""
        h, q, kv, i = (
            self.hidden_size,
            self.num_attention_heads * self.head_dim,
            self.num_key_value_heads * self.head_dim,
            self.intermediate_size,
        )
        return self.num_hidden_layers * r * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))


def shape_for(name_or_path: str) -> ModelShape:
    """The shape of a recipe's model: a local folder's config.json, else model_shapes/<org>--<name>.json."""
    local = Path(name_or_path) / "config.json"
    if local.is_file():
        config = json.loads(local.read_text())
        config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
        config.setdefault("num_key_value_heads", config["num_attention_heads"])
        config["qk_norm"] = config.get("model_type") == "qwen3"
    else:
        key = "tiny" if name_or_path.startswith("tiny") else name_or_path.replace("/", "--")
        path = SHAPES_DIR / f"{key}.json"
        if not path.is_file():
            known = ", ".join(sorted(p.stem.replace("--", "/") for p in SHAPES_DIR.glob("*.json")))
            raise RecipeError(
                f"model.name_or_path={name_or_path}: no shape for the memory planner; known: {known}; "
                f"add {path.relative_to(SHAPES_DIR.parents[2])} (the model's config.json values) or "
                "point model.name_or_path at a local folder with config.json"
            )
        config = json.loads(path.read_text())
    fields_ = ModelShape.__dataclass_fields__
    return ModelShape(**{k: config[k] for k in fields_ if k in config})


@dataclass(frozen=True)
class Strategy:
    name: str
    shard_params: bool = False
    shard_grads: bool = False
    shard_optimizer: bool = False
    offload_params: bool = False
    offload_optimizer: bool = False
    fsdp: bool = False
    one_copy_per_node_at_load: bool = False  # fsdp cpu_ram_efficient_loading, or DeepSpeed zero3_init_flag


def strategy_from_config(config: dict) -> Strategy:
    """The sharding strategy of an accelerate config (as a dict)."""
    kind = str(config.get("distributed_type", "NO"))
    if kind == "FSDP":
        fsdp = config.get("fsdp_config") or {}
        offload = bool(fsdp.get("fsdp_offload_params"))
        full = str(fsdp.get("fsdp_reshard_after_forward", True)).lower() in ("true", "full_shard", "1")
        return Strategy(
            "fsdp_offload" if offload else "fsdp",
            shard_params=full,
            shard_grads=True,
            shard_optimizer=True,
            offload_params=offload,
            offload_optimizer=offload,
            fsdp=True,
            one_copy_per_node_at_load=bool(fsdp.get("fsdp_cpu_ram_efficient_loading")),
        )
    if kind == "DEEPSPEED":
        ds = config.get("deepspeed_config") or {}
        stage = int(ds.get("zero_stage", 0))
        off_opt = str(ds.get("offload_optimizer_device", "none")) == "cpu"
        off_par = str(ds.get("offload_param_device", "none")) == "cpu" and stage == 3
        name = f"zero{stage}" + ("_offload" if off_opt or off_par else "")
        return Strategy(
            name,
            shard_params=stage == 3,
            shard_grads=stage >= 2,
            shard_optimizer=stage >= 1,
            offload_params=off_par,
            offload_optimizer=off_opt,
            one_copy_per_node_at_load=stage == 3 and bool(ds.get("zero3_init_flag")),
        )
    return Strategy("ddp")


def named_strategy(name: str) -> Strategy:
    from timealign.config.accelerate import read_accelerate_config

    return strategy_from_config(read_accelerate_config(name)[1])


@dataclass(frozen=True)
class Workload:
    """What the recipe asks of each GPU."""

    task: str  # dpo | sft
    micro_batch: int
    max_length: int
    gradient_checkpointing: bool
    dtype_bytes: int  # model.dtype
    mixed_precision: bool  # training.bf16 / fp16 (master weights fp32 under FSDP / DeepSpeed)
    lora_r: int | None = None  # None: full fine-tuning
    precompute_ref: bool = False
    attn: str = "sdpa"
    shared_prompt: bool = False
    # DPO with shared_prompt: the longest [prompt | chosen | rejected] row of the data, when it is known (the prompt
    # once, then both completions); None: its bound, 2 x max_length.
    shared_row_length: int | None = None
    # dpo.prompt_cache: the shared prompt as a key/value cache, no seq x seq tree mask (timealign.train.prompt_cache)
    prompt_cache: bool = False
    # dpo.padding_free: the micro-batch's shared rows packed into one row (timealign.train.shared_prompt)
    padding_free: bool = False
    # with padding_free: the longest packed row of the data (a micro-batch's [prompt | chosen | rejected] rows summed),
    # when it is known; None: its bound, micro-batch x the pair row
    packed_row_length: int | None = None
    # a micro-batch's labelled (completion) tokens, when the data is known: what the shared layouts put through the LM
    # head; None: every position
    labelled_tokens: int | None = None

    @property
    def shared(self) -> bool:
        return self.task == "dpo" and self.shared_prompt

    @property
    def packed(self) -> bool:
        return self.shared and self.padding_free and not self.prompt_cache

    @property
    def pair_row_length(self) -> int:
        """One pair's shared row: the prompt once and both completions."""
        return min(self.shared_row_length or 2 * self.max_length, 2 * self.max_length)

    @property
    def tokens(self) -> int:
        if self.packed:
            return self.row_length
        if self.shared:
            return self.micro_batch * self.row_length
        return (2 if self.task == "dpo" else 1) * self.micro_batch * self.max_length

    @property
    def row_length(self) -> int:
        if self.packed:
            bound = self.micro_batch * self.pair_row_length
            return min(self.packed_row_length or bound, bound)
        if self.shared:
            return self.pair_row_length
        return self.max_length

    @property
    def rows(self) -> int:
        if self.packed:
            return 1
        return self.micro_batch if self.shared else self.tokens // self.max_length

    @property
    def head_positions(self) -> int:
        """Positions the LM head projects: the shared layouts' labelled tokens when known, else every token."""
        if self.shared and self.labelled_tokens is not None:
            return min(self.labelled_tokens, self.tokens)
        return self.tokens

    @property
    def reference_model(self) -> bool:
        return self.task == "dpo" and self.lora_r is None and not self.precompute_ref


def activation_bytes(shape: ModelShape, work: Workload) -> dict[str, int]:
    """Peak activation memory of one micro-batch (forward + backward), by part."""
    b, h = work.dtype_bytes, shape.hidden_size
    q, kv = shape.num_attention_heads * shape.head_dim, shape.num_key_value_heads * shape.head_dim
    per_token_layer = 2 * (4 + b) * h + b * (3 * q + 2 * kv) + 4 * b * shape.intermediate_size
    tokens = work.tokens
    if work.attn == "eager":  # scores and softmax kept per head
        per_layer_extra = 2 * b * shape.num_attention_heads * work.rows * work.row_length**2
    else:
        per_layer_extra = 0
    if work.gradient_checkpointing:
        layers = shape.num_hidden_layers * tokens * b * h + tokens * per_token_layer + per_layer_extra
    else:
        layers = shape.num_hidden_layers * (tokens * per_token_layer + per_layer_extra)
    tree_mask = work.shared and not work.prompt_cache and work.attn in ("sdpa", "eager")
    mask = work.rows * work.row_length**2 * b if tree_mask else 0
    return {"layers": layers, "mask": mask, "logits": fused_head_bytes(shape, work)}


# TRL's fused LM head (trl/kernels/chunked_logprob.py), which every timealign trainer calls with `fused_lm_head=True`:
# the vocabulary is projected in tiles of at most 4096 positions x 32768 columns, one buffer reused for the whole
# vocabulary, so no (tokens x vocab) logits exist.
HEAD_TOKEN_CHUNK, HEAD_VOCAB_CHUNK = 4096, 32768


def fused_head_bytes(shape: ModelShape, work: Workload) -> int:
    """Peak of the fused LM head: the tile buffer in the compute dtype, and at backward the fp32 accumulators of the
    hidden-state gradient (positions x hidden, cast to the model dtype on return) and, when the head trains (not
    under LoRA), of its weight gradient (vocab x hidden), each cast to the model dtype on return (where the
    gradients are not sharded that cast becomes the weight's .grad: `estimate` takes it off again). Positions:
    `Workload.head_positions`, the shared layouts' labelled tokens when the data is known, else every token of the
    micro-batch (TRL's rows on CUDA project only the labelled ones, so there this bounds it from above). On CUDA,
    Triton folds each tile in place; the torch fallback on other devices adds temporaries (`CPU_HEAD_TEMPORARIES`,
    tests/test_memory_plan.py)."""
    b, h, positions = work.dtype_bytes, shape.hidden_size, work.head_positions
    compute = 2 if work.mixed_precision else b
    tile = min(positions, HEAD_TOKEN_CHUNK) * HEAD_VOCAB_CHUNK * compute
    grad_hidden = positions * h * (4 + b)
    grad_head = shape.vocab_size * h * (4 + b) if work.lora_r is None else 0
    return tile + grad_hidden + grad_head


@dataclass
class Estimate:
    gpu: str
    strategy: str
    processes: int
    processes_per_node: int
    per_gpu: dict[str, int] = field(default_factory=dict)
    host: dict[str, int] = field(default_factory=dict)
    gpu_capacity: int = 0
    host_limit: int | None = None

    @property
    def per_gpu_bytes(self) -> int:
        return sum(self.per_gpu.values())

    @property
    def host_bytes(self) -> int:
        return max(self.host.values())

    @property
    def fits_gpu(self) -> bool:
        return self.per_gpu_bytes <= self.gpu_capacity

    @property
    def fits_host(self) -> bool:
        return self.host_limit is None or self.host_bytes <= self.host_limit

    @property
    def fits(self) -> bool:
        return self.fits_gpu and self.fits_host

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "per_gpu_bytes": self.per_gpu_bytes,
            "host_bytes": self.host_bytes,
            "fits": self.fits,
            "fits_gpu": self.fits_gpu,
            "fits_host": self.fits_host,
        }


def estimate(
    shape: ModelShape,
    work: Workload,
    strategy: Strategy,
    *,
    gpu: str,
    nodes: int,
    gpus_per_node: int,
    host_limit: int | None = None,
) -> Estimate:
    if gpu not in GPUS:
        raise RecipeError(f"gpu={gpu}: unknown; use one of {', '.join(GPUS)}")
    if gpus_per_node < 1 or nodes < 1:
        raise RecipeError(
            f"gpu={gpu} with nodes={nodes}, gpus_per_node={gpus_per_node}: the memory planner needs "
            ">= 1 node and >= 1 GPU per node (a CPU-only recipe: add gpus_per_node=N)"
        )
    n = nodes * gpus_per_node
    P, b = shape.params(), work.dtype_bytes
    master = 4 if work.mixed_precision and (strategy.fsdp or strategy.name.startswith("zero")) else b

    def share(sharded: bool) -> float:
        return 1 / n if sharded else 1.0

    gpu_parts = {"params": 0.0, "grads": 0.0, "optimizer": 0.0, "reference": 0.0}
    host_step = 0.0  # one process's offloaded state
    trainable = shape.lora_params(work.lora_r) if work.lora_r else P
    # The frozen base under LoRA (model dtype), or the trained weights.
    if work.lora_r:
        weights, lora_state = P * b * share(strategy.shard_params), trainable * 16.0
        gpu_parts["params"] += weights
        gpu_parts["optimizer"] += lora_state  # fp32 adapter, its gradient and moments: small, replicated
    else:
        if strategy.fsdp:
            state = {"params": master, "grads": master, "optimizer": 2 * 4 if master == 4 else 2 * b}
        elif strategy.name.startswith("zero"):
            state = {"params": b, "grads": b, "optimizer": (12 if master == 4 else 2 * b)}
        else:  # DDP: grads plus the bucket copy
            state = {"params": b, "grads": 2 * b, "optimizer": 2 * b}
        sharded = {
            "params": strategy.shard_params or strategy.fsdp,
            "grads": strategy.shard_grads,
            "optimizer": strategy.shard_optimizer,
        }
        offloaded = {
            "params": strategy.offload_params,
            "grads": strategy.offload_params,
            "optimizer": strategy.offload_optimizer,
        }
        if strategy.name.startswith("zero") and strategy.offload_optimizer:
            host_step += P * 4 / n  # ZeRO-Offload keeps fp32 gradients on the host for the CPU Adam step
        for part, per_param in state.items():
            size = P * per_param * share(sharded[part])
            if offloaded[part]:
                host_step += size
            else:
                gpu_parts[part] += size
    if strategy.shard_params or strategy.fsdp:  # two gathered layers (current + prefetch) and the embeddings
        gpu_parts["params"] += (2 * shape.layer_params() + shape.embedding_params()) * b
    if work.reference_model:
        ref = P * b * share(strategy.shard_params or strategy.fsdp)
        if strategy.offload_params:
            host_step += ref
        else:
            gpu_parts["reference"] += ref
    acts = activation_bytes(shape, work)
    if work.lora_r is None and not strategy.shard_grads:
        # Unsharded gradients: the head's weight gradient, cast on return, becomes the weight's .grad, counted in
        # `grads` already (sharded, it is a full-size buffer beside the shards until reduce-scattered). Counted twice,
        # TIMER SFT on one H200 came out 16-21% over its measured peak (tests/test_gpu_measurements.py).
        acts["logits"] -= shape.vocab_size * shape.hidden_size * b
    per_gpu = {k: int(v) for k, v in gpu_parts.items()}
    per_gpu.update(
        {"activations": acts["layers"] + acts["mask"], "logits": acts["logits"], "runtime_reserve": GPU_RESERVE}
    )
    if work.reference_model and strategy.fsdp:
        # The reference's forward gathers its units before the policy's activations exist: the peak is the larger of
        # the two phases, counted here as what the gather needs beyond the activations and the LM head. With weights
        # read once, timealign shards it one unit per decoder layer (timealign.train.fsdp_loading): two layers and
        # the embeddings at a time, as the policy. Otherwise TRL shards it as one unit (trl.models.prepare_fsdp:
        # fully_shard on the root only), gathered whole on every GPU.
        if strategy.one_copy_per_node_at_load:
            gathered = (2 * shape.layer_params() + shape.embedding_params()) * b
        else:
            gathered = P * b * (1.0 if strategy.offload_params else 1 - 1 / n)
        per_gpu["reference_gathered"] = int(max(0.0, gathered - per_gpu["activations"] - per_gpu["logits"]))
    copies = 1 if strategy.one_copy_per_node_at_load else gpus_per_node
    # Under FSDP a precomputed reference is still loaded, for the precompute pass (the policy is not sharded yet).
    loads_reference = work.reference_model or (strategy.fsdp and replace(work, precompute_ref=False).reference_model)
    loaded = P * b * (2 if loads_reference else 1)
    host = {
        "at_load": int(gpus_per_node * HOST_PER_PROCESS + copies * loaded),
        "at_optimizer_step": int(gpus_per_node * (HOST_PER_PROCESS + host_step)),
    }
    return Estimate(
        gpu=gpu,
        strategy=strategy.name,
        processes=n,
        processes_per_node=gpus_per_node,
        per_gpu=per_gpu,
        host=host,
        gpu_capacity=GPUS[gpu],
        host_limit=host_limit,
    )


def workload_for(recipe) -> Workload:
    training = recipe.training
    lora = recipe.lora
    if lora.enabled and lora.target_modules != "all-linear":
        raise RecipeError(f"lora.target_modules={lora.target_modules}: the memory planner knows all-linear only")
    return Workload(
        task=recipe.task,
        micro_batch=int(training.get("per_device_train_batch_size", 8)),
        max_length=int(training.get("max_length") or 1024),
        gradient_checkpointing=bool(training.get("gradient_checkpointing", False)),
        dtype_bytes=DTYPE_BYTES[recipe.model.dtype],
        mixed_precision=bool(training.get("bf16") or training.get("fp16")),
        lora_r=lora.r if lora.enabled else None,
        precompute_ref=bool(training.get("precompute_ref_log_probs", False)),
        attn=recipe.model.attn_implementation or "sdpa",
        shared_prompt=recipe.task == "dpo" and recipe.dpo.shared_prompt,
        prompt_cache=recipe.task == "dpo" and recipe.dpo.shared_prompt and recipe.dpo.prompt_cache,
        padding_free=recipe.task == "dpo" and recipe.dpo.shared_prompt and recipe.dpo.padding_free,
    )


def candidate_changes(work: Workload, strategy: Strategy) -> list[tuple[str, Workload, str]]:
    """Single changes to try when a plan does not fit, cheapest first: (override, workload, accelerate config)."""
    out = []
    if work.reference_model:
        out.append(("training.precompute_ref_log_probs=true", replace(work, precompute_ref=True), strategy.name))
    if not work.gradient_checkpointing:
        out.append(("training.gradient_checkpointing=true", replace(work, gradient_checkpointing=True), strategy.name))
    if work.micro_batch > 1:
        out.append(("training.per_device_train_batch_size=1", replace(work, micro_batch=1), strategy.name))
    for config in ("fsdp", "zero3", "fsdp_offload", "zero3_offload"):
        if config != strategy.name and STRATEGIES.index(config) > STRATEGIES.index(strategy.name):
            out.append((f"accelerate_config={config}", work, config))
    if work.lora_r is None:
        out.append(("lora.enabled=true", replace(work, lora_r=16, precompute_ref=False), strategy.name))
    if work.reference_model:
        out.append(
            (
                "training.precompute_ref_log_probs=true accelerate_config=fsdp_offload",
                replace(work, precompute_ref=True),
                "fsdp_offload",
            )
        )
    return out


def suggest(shape: ModelShape, work: Workload, strategy: Strategy, **where) -> str | None:
    """The first single change (candidate_changes order) with which the plan fits, or None. GPU memory that fits
    with too little host RAM requested: the launch.mem_per_gpu (x processes per node = --mem) that holds it."""
    est = estimate(shape, work, strategy, **where)
    if est.fits_gpu and not est.fits_host:
        return f"launch.mem_per_gpu={-(-est.host_bytes // (GIB * est.processes_per_node))}G"
    for override, changed, config in candidate_changes(work, strategy):
        other = strategy if config == strategy.name else named_strategy(config)
        if estimate(shape, changed, other, **where).fits:
            return override
    return None


def gib(n: float) -> str:
    return f"{n / GIB:.1f}"


def report(est: Estimate, fix: str | None) -> str:
    """The planner's printout: per GPU and per node, and the verdict."""
    lines = [
        f"# memory plan: {est.processes} GPU(s) {est.gpu} ({gib(est.gpu_capacity)} GiB), {est.strategy}, "
        f"{est.processes_per_node} process(es) per node"
    ]
    lines += [f"#   per GPU {part:<17} {gib(v):>7} GiB" for part, v in est.per_gpu.items()]
    lines.append(f"#   per GPU {'total':<17} {gib(est.per_gpu_bytes):>7} GiB of {gib(est.gpu_capacity)}")
    lines += [f"#   per node host RAM {part:<17} {gib(v):>7} GiB" for part, v in est.host.items()]
    if est.host_limit is not None:
        lines.append(f"#   per node host RAM requested (--mem) {gib(est.host_limit):>7} GiB")
    if est.fits:
        verdict = "fits"
    elif fix:
        verdict = f"does not fit; fits with {fix}"
    else:
        verdict = "does not fit (no single change found: more GPUs or a smaller max_length)"
    lines.append(f"# {verdict}")
    return "\n".join(lines)


def plan_recipe(
    recipe,
    *,
    gpu: str,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    accelerate_config: str | None = None,
    mem: str | None = None,
) -> tuple[Estimate, str | None]:
    """(estimate, the change that makes it fit or None) for a loaded recipe on `gpu` GPUs."""
    from timealign.cluster.slurm import memory_mb

    launch = recipe.launch
    nodes = nodes or launch.nodes
    gpus_per_node = launch.gpus_per_node if gpus_per_node is None else gpus_per_node
    strategy = named_strategy(accelerate_config or launch.accelerate_config)
    mem = mem or (f"{memory_mb(launch.mem_per_gpu) * max(gpus_per_node, 1)}M" if launch.mem_per_gpu else None)
    host_limit = memory_mb(mem) * MIB if mem else None
    shape, work = shape_for(recipe.model.name_or_path), workload_for(recipe)
    where = {"gpu": gpu, "nodes": nodes, "gpus_per_node": gpus_per_node, "host_limit": host_limit}
    est = estimate(shape, work, strategy, **where)
    return est, None if est.fits else suggest(shape, work, strategy, **where)
