"""What several test modules share: paths, child processes (environment, checked runs, a Slurm-style cluster launch),
TicToc v1 record builders, the test model, readers of offline W&B runs, and the scripted TimelyChat backend. Test
modules import these from here, never from one another (or from conftest, which holds the fixtures)."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from timealign.config import DataSection

REPO_ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ child processes
def free_port() -> int:
    """A loopback port free now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JSONHandler(BaseHTTPRequestHandler):
    """A scripted local endpoint's request handler: quiet, with `_send(code, payload)` for a JSON reply."""

    def log_message(self, *args):
        pass

    def _send(self, code, payload):
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class LocalServer:
    """`handler` served on a free loopback port in a daemon thread; `url` ends in /v1; `close()` stops it."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_until_serving(process, url: str, log_path, startup_s: float, what: str, poll_s: float = 0.3) -> None:
    """Poll `url` until it answers; `what` exiting, or not answering within `startup_s`, fails the test with the end
    of its log."""
    deadline = time.time() + startup_s
    while True:
        if process.poll() is not None:
            pytest.fail(f"{what} exited {process.returncode}:\n{Path(log_path).read_text()[-4000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if time.time() > deadline:
                pytest.fail(f"{what} did not come up in {startup_s:.0f} s:\n{Path(log_path).read_text()[-4000:]}")
            time.sleep(poll_s)


def launcher_env(**extra: str) -> dict[str, str]:
    """This environment for a child training process: offline, unbuffered, one OpenMP thread, and none of the
    Slurm / accelerate / stop-file / W&B-run variables that would make it join or resume something else."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "ACCELERATE_", "TIMEALIGN_STOP", "WANDB_RUN_ID"))
    }
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "WANDB_MODE": "offline",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            **extra,  # a caller may replace any of these (a real model's test: two OpenMP threads)
        }
    )
    return env


def run_checked(args, env, check=True, timeout=600):
    """Run `args` in the checkout; a non-zero exit (with `check`) fails with the command and its output's tail."""
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def cluster_launch(env, prepared, out, *extra, nodes=1, gpus=2, rank=0, job="777", cpu_env=True):
    """(env, argv) of `python -m timealign.cluster launch` for a tiny DPO run as Slurm would start it on node `rank`
    of `nodes` (CPU DDP over gloo with `cpu_env`)."""
    slurm = {
        "SLURM_JOB_ID": job,
        "SLURM_JOB_NODELIST": ",".join(["127.0.0.1"] * nodes),
        "SLURM_NNODES": str(nodes),
        "SLURM_NODEID": str(rank),
        "SLURM_GPUS_ON_NODE": str(gpus),
    }
    if cpu_env:
        slurm["ACCELERATE_USE_CPU"] = "true"  # DDP over gloo; without it 2 processes train independently
    args = [
        sys.executable,
        "-m",
        "timealign.cluster",
        "launch",
        "task=dpo",
        "recipe=tiny",
        f"data.prepared_dir={prepared}",
        "data.synthetic_trajectories=8",
        f"output_dir={out}",
        "training.logging_steps=1",
        "training.per_device_train_batch_size=1",
        "training.save_strategy=no",
        *extra,
    ]
    return {**env, **slurm}, args


# ------------------------------------------------------------------------------------------ TicToc v1 records
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_price",
            "description": "Latest price of a stock.",
            "parameters": {"type": "object", "properties": {"symbol": {"type": "string"}}},
        },
    }
]
FINAL_TIMES = ["2024-05-01T09:05:00Z", "2024-05-01T12:00:00Z", "2024-05-03T12:00:00Z"]


def history(session: str, final_time="2024-05-01T12:00:00Z") -> list[dict]:
    return [
        {"role": "system", "content": f"You check stock prices. Session {session}.", "time": "2024-05-01T09:00:00Z"},
        {"role": "user", "content": "Price of ACME?", "time": "2024-05-01T09:00:00Z"},
        {
            "role": "assistant",
            "content": None,
            "time": "2024-05-01T09:00:03Z",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_price", "arguments": '{"symbol": "ACME"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_a",
            "name": "get_price",
            "content": '{"price": 10}',
            "time": "2024-05-01T09:00:04Z",
        },
        {"role": "assistant", "content": "ACME is at 10.", "time": "2024-05-01T09:00:08Z"},
        {"role": "user", "content": "Is ACME above 15 now?", "time": final_time},
    ]


def v1_record(rid: str, **changes) -> dict:
    """A valid v1 record; ids are `stock_market_order_book_<n>` (a known scenario), each its own conversation."""
    return {"id": rid, "history": history(rid, FINAL_TIMES), "function": copy.deepcopy(TOOLS), **changes}


def annotated_record(rid: str, score: float = 3.0, level: int = 1) -> dict:
    """A valid annotated record (one elapse level, the annotators' mean score)."""
    return {
        "id": rid,
        "history": history(rid, FINAL_TIMES[level]),
        "function": copy.deepcopy(TOOLS),
        "elapse_level": level,
        "score": score,
    }


def rid(n: int) -> str:
    return f"stock_market_order_book_{n}"


def write_v1(folder: Path, files: dict[str, list]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, records in files.items():
        (folder / name).write_text(json.dumps(records))
    return folder


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ------------------------------------------------------------------------------------------ the test model
BOS = "<s>"


def build_test_model(
    out: Path, base_dir: Path, rows: list[dict], *, std: float = 0.3, seed: int = 1, bos: bool = True
) -> Path:
    """The tiny architecture with weights redrawn at `std` (the stock random init emits one token over and over; at
    0.3 the greedy outputs vary per prompt and the top-2 logit gap stays far above float noise), a BOS-adding
    tokenizer whose chat template starts with the BOS (like Llama 3), and a second EOS id in generation_config
    taken from the model's own greedy output on the first of `rows` (TicToc rows), so generations end at different
    lengths within a batch."""
    import torch
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from timealign.models.tiny import TINY_CHAT_TEMPLATE

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    if bos:
        tokenizer.add_special_tokens({"bos_token": BOS})
        bos_id = tokenizer.convert_tokens_to_ids(BOS)
        tokenizer._tokenizer.post_processor = TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
        )
        tokenizer.chat_template = "{{ bos_token }}" + TINY_CHAT_TEMPLATE
        model.resize_token_embeddings(len(tokenizer))
        model.config.bos_token_id = bos_id
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, std)
    from timealign.render.chat import PromptRenderer

    probe = tokenizer(PromptRenderer(tokenizer).prompt(rows[0]["prompt"], rows[0]["tools"]), return_tensors="pt")
    greedy = model.generate(**probe, max_new_tokens=6, do_sample=False)[0, probe["input_ids"].shape[1] :].tolist()
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, greedy[2]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def tictoc_rows(folder: Path, trajectories: int = 4) -> list[dict]:
    """Held-out TicToc pair rows from the synthetic generator, as the tictoc suite reads them."""
    from timealign.data.pairs import load_prepared, prepare

    if not (folder / "manifest.json").exists():
        prepare(DataSection(synthetic_trajectories=trajectories), folder)
    return load_prepared(folder)["test"].to_list()


# ------------------------------------------------------------------------------------------ offline W&B runs
def wandb_records(run_dir: Path):
    """The protobuf Records of an offline run's `.wandb` file (wandb's LevelDB-style log: 32 KiB blocks, 7-byte
    chunk headers: crc32, length, type full/first/middle/last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = next(run_dir.glob("*.wandb")).read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the rest of a block too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending + chunk if kind == 4 else chunk)
            yield record
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk


def run_of(run_dir: Path) -> dict:
    runs = [r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run"]
    assert runs, run_dir
    run = runs[-1]
    return {
        "id": run.run_id,
        "project": run.project,
        "name": run.display_name,
        "group": run.run_group,
        "job_type": run.job_type,
    }


def wandb_history(run_dir: Path) -> list[dict]:
    """The history rows (`wandb.log` calls) of an offline run, decoded."""
    rows = []
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


# ------------------------------------------------------------------------------------------ TimelyChat, scripted
def dialog(i, context, minutes, reply):
    """A TimelyChat dialog: speakers A and B take turns over `context`, then the target turn after `minutes`."""
    from timealign.data.timelychat import timelychat_dialog

    speakers = ["A", "B"] * 5
    return timelychat_dialog(
        {
            "id": f"d{i}",
            "speaker_list": speakers[: len(context)],
            "context": context,
            "target_speaker": speakers[len(context)],
            "time_elapsed": minutes,
            "timely_response": reply,
        },
        "test",
        i,
    )


DIALOGS = [
    dialog(0, ["Gonna take a shower.", "Wash the fatigue off!"], "20 minutes", "I feel so refreshed now!"),
    dialog(1, ["Exam starts now.", "Good luck!", "Thanks, phones off."], "2 hours", "It's over! It was easy."),
]


class ScriptedBackend:
    """Answers each rendered prompt from a script (prompt -> continuation); a prompt in `fail` raises."""

    name = "scripted"

    def __init__(self, tokenizer, script, fail=()):
        self.tokenizer, self.script, self.fail, self.calls = tokenizer, script, set(fail), 0

    def generate(self, prompts, *, max_new_tokens=64, desc=None, **_):
        self.calls += len(prompts)
        for p in prompts:
            if p in self.fail:
                raise RuntimeError("backend down for this prompt")
        return [self.script[p] for p in prompts]


def scripted(tokenizer, fail_target_interval_of=None, intervals=None, replies=None):
    """A ScriptedBackend answering every TIMER prompt of DIALOGS by hand (see test_timelychat_eval for the counts)."""
    from timealign.render.timer import TIMER_UTT, TimerRenderer
    from timealign.suites.timelychat.turn_level import timing_cases

    r = TimerRenderer(tokenizer)
    intervals = intervals or {  # (dialog, turn) -> what the model writes at <TIME>
        (0, 1): "0 minutes" + TIMER_UTT,
        (0, 2): "30 minutes" + TIMER_UTT,  # TN, TP
        (1, 1): "1 hour" + TIMER_UTT,
        (1, 2): "soonish" + TIMER_UTT,  # FP, unparsed (-> instant: TN)
        (1, 3): "0 minutes" + TIMER_UTT,  # FN
    }
    script, fail = {}, set()
    for c in timing_cases(DIALOGS):
        prompt = r.interval_prompt(list(c.context), c.speaker)
        script[prompt] = intervals[(c.dialog, c.turn)]
        if fail_target_interval_of == c.dialog and c.is_target:
            fail.add(prompt)
    replies = replies or ["I feel so refreshed now!" + tokenizer.eos_token, "Still studying." + "<SPK>B"]
    for d, reply in zip(DIALOGS, replies):
        script[r.response_prompt(d.context, d.target_speaker, d.target_minutes)] = reply
    return ScriptedBackend(tokenizer, script, fail)
