# shellcheck shell=bash
# Shared logic of slurm/dpo.sbatch, slurm/sft.sbatch and slurm/eval.sbatch: sourced, defines functions only.
#
# Training (ta_train TASK ARGS...): `srun` starts one `python -m timealign.cluster launch` per node, which execs
# that node's `accelerate launch` (machine rank from SLURM_NODEID, processes = nodes x the GPUs Slurm allocated per
# node, or processes_per_node on a CPU-only job). The main process's address is resolved once, on the first node
# (`srun -w FIRST python -m timealign.cluster address`: Slurm's NodeAddr, else a non-loopback address of the node),
# and handed to every node as TIMEALIGN_MAIN_ADDR: a node name need not resolve on the other nodes.
# The rendezvous port is the first free one on the first node (this batch shell runs there) from 20000 + job id %
# 12000 (`python -m timealign.cluster port`, TIMEALIGN_MAIN_PORT): two jobs on one node never share one.
# On the warning signal (`#SBATCH --signal=B:USR1@120`, or `submit`'s launch.signal_seconds; sent to this batch
# shell only, or with `scancel --signal=USR1 --full` to every process) it creates $TIMEALIGN_STOP_FILE and logs how
# far the time limit really is; the trainer polls the file every step, saves a checkpoint, writes
# $TIMEALIGN_STOP_FILE.requeue and exits 75; then this script runs
# `scontrol requeue $SLURM_JOB_ID` and the requeued job resumes from the newest checkpoint
# (training.resume_from_checkpoint=auto) after Slurm's BeginTime hold (~2 min). A stop file rather than a forwarded
# signal: signals do not reach the trainers reliably through srun + accelerate launch. The launcher (torchrun's
# agent) ignores USR1 and only logs SIGTERM in a job (timealign.cluster.accelerate.outlive_job_signals), so a slow
# save is never cut short by the launcher dying. Only the USR1 warning requeues from here; SIGTERM (scancel,
# preemption, the time limit itself) makes the trainers checkpoint within Slurm's KillWait, and the job is requeued
# only when Slurm requeues it (preemption with Requeue=1). USR1 to the job steps only (`scancel --signal=USR1 JOB`
# without --batch/--full, a --signal without B:) reaches the trainers but not this shell: they checkpoint and stop
# (exit 75), no stop file is made, and the job is not requeued; the trainer says so.
#
# Evaluation (ta_eval ARGS...): eval/run.py on vLLM with tensor parallelism over the node's GPUs (offline engine,
# or `vllm serve` + the OpenAI backend with TIMEALIGN_SERVE=1); a job without GPUs uses the recipe's eval.backend. On USR1 the job requeues right away: finished
# samples are cached in <out>/generations/ and the requeued job skips them.
#
# Environment (all optional):
#   TIMEALIGN_ROOT          repo checkout (default: found by the sbatch script from its own path, any submit dir)
#   TIMEALIGN_SETUP         shell line run first on the batch node, e.g. "module load cuda/12.4; source env/bin/activate"
#   TIMEALIGN_PYTHON        interpreter (default: python on PATH after TIMEALIGN_SETUP, else $ROOT/.venv/bin/python)
#   TIMEALIGN_DRY_RUN=1     print the exact per-node commands (srun still runs one task per node), train nothing
#   TIMEALIGN_REQUEUE=0     never requeue;  TIMEALIGN_MAX_REQUEUES (default 20) caps SLURM_RESTART_COUNT
#   TIMEALIGN_SERVE=1       eval through `vllm serve`;  TIMEALIGN_LOG_DIR (default $ROOT/slurm/logs)
#   TIMEALIGN_MAIN_ADDR     the rendezvous address (default: resolved on the first node, see above)
#   TIMEALIGN_MAIN_PORT     the rendezvous port (default: the first free one from 20000 + job id % 12000)
#   TIMEALIGN_SERVE_PORT    eval's `vllm serve` port (default: the first free one from 10000 + job id % 10000)
#   TIMEALIGN_TEST_SLOW_SAVE  TEST-ONLY: every checkpoint save sleeps this many seconds (tests/test_slurm_real.py)

TA_EXIT_REQUEUE=75

ta_log() { echo "[timealign $(date +%H:%M:%S)] $*"; }

ta_setup() {
  TIMEALIGN_ROOT=${TIMEALIGN_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
  if [[ ! -f $TIMEALIGN_ROOT/timealign/cluster/cli.py ]]; then
    echo "error: TIMEALIGN_ROOT=$TIMEALIGN_ROOT is not the timealign checkout: set it to the checkout's path" >&2
    exit 2
  fi
  cd "$TIMEALIGN_ROOT" || exit 2
  export TIMEALIGN_ROOT
  if [[ -n ${TIMEALIGN_SETUP:-} ]]; then
    eval "$TIMEALIGN_SETUP"
  fi
  if [[ -z ${TIMEALIGN_PYTHON:-} ]]; then
    if [[ -z ${TIMEALIGN_SETUP:-} && -x $TIMEALIGN_ROOT/.venv/bin/python ]]; then
      TIMEALIGN_PYTHON=$TIMEALIGN_ROOT/.venv/bin/python
    else
      TIMEALIGN_PYTHON=$(command -v python || command -v python3)
    fi
  fi
  export TIMEALIGN_PYTHON
  TA_LOG_DIR=${TIMEALIGN_LOG_DIR:-$TIMEALIGN_ROOT/slurm/logs}
  mkdir -p "$TA_LOG_DIR"
  ta_log_to_repo
  ta_log "job ${SLURM_JOB_ID:-none} (${SLURM_JOB_NAME:-}) on ${SLURM_JOB_NODELIST:-$(hostname)}:" \
    "${SLURM_NNODES:-1} node(s), GPUs/node ${SLURM_GPUS_ON_NODE:-none}, CPUs/task ${SLURM_CPUS_PER_TASK:-1}," \
    "restart ${SLURM_RESTART_COUNT:-0}"
}

# A plain `sbatch` without --output writes to Slurm's default slurm-JOBID.out in the submit directory (a relative
# #SBATCH --output would resolve against whatever directory the user submitted from, and a missing folder there
# loses the log): continue in $TA_LOG_DIR/JOBNAME-JOBID.out, an absolute path in the checkout, and leave its name in
# Slurm's file. An --output the user chose (or `submit`'s, already in $TA_LOG_DIR) is left alone.
ta_log_to_repo() {
  [[ -n ${SLURM_JOB_ID:-} ]] || return 0
  local default current target
  default=$(readlink -f "${SLURM_SUBMIT_DIR:-$PWD}/slurm-${SLURM_JOB_ID}.out")
  current=$(readlink -f "/proc/$$/fd/1" 2>/dev/null) || return 0
  [[ $current == "$default" ]] || return 0
  target=$TA_LOG_DIR/${SLURM_JOB_NAME:-timealign}-${SLURM_JOB_ID}.out
  ta_log "log: $target"
  exec >>"$target" 2>&1
}

# Run "$@" in the background and wait for it, also across trapped signals; sets TA_RC.
ta_wait_for() {
  "$@" &
  local pid=$!
  TA_RC=0
  wait "$pid" || TA_RC=$?
  while kill -0 "$pid" 2>/dev/null; do  # `wait` returned early for a trapped signal: keep waiting
    TA_RC=0
    wait "$pid" || TA_RC=$?
  done
}

ta_requeue() {
  if [[ ${TIMEALIGN_REQUEUE:-1} == 0 ]]; then
    ta_log "requeue disabled (TIMEALIGN_REQUEUE=0)"
    return 1
  fi
  if (( ${SLURM_RESTART_COUNT:-0} >= ${TIMEALIGN_MAX_REQUEUES:-20} )); then
    ta_log "not requeueing: already restarted ${SLURM_RESTART_COUNT:-0} times (TIMEALIGN_MAX_REQUEUES)"
    return 1
  fi
  if [[ -z ${SLURM_JOB_ID:-} ]]; then
    ta_log "not in a SLURM job: nothing to requeue"
    return 1
  fi
  ta_log "requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
}

# The first node's address as the other nodes reach it (run there through srun); 127.0.0.1 for one node.
ta_main_addr() {
  if [[ -n ${TIMEALIGN_MAIN_ADDR:-} ]]; then
    return 0
  fi
  if (( ${SLURM_NNODES:-1} <= 1 )) || [[ -z ${SLURM_JOB_NODELIST:-} ]]; then
    TIMEALIGN_MAIN_ADDR=127.0.0.1
  else
    local first
    first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    if ! TIMEALIGN_MAIN_ADDR=$(srun --nodes=1 --ntasks=1 --nodelist="$first" "$TIMEALIGN_PYTHON" -m timealign.cluster \
        address) || [[ -z $TIMEALIGN_MAIN_ADDR ]]; then
      echo "error: cannot resolve the address of $first (the main process's node): set TIMEALIGN_MAIN_ADDR" >&2
      exit 2
    fi
  fi
  export TIMEALIGN_MAIN_ADDR
  ta_log "main process address: $TIMEALIGN_MAIN_ADDR"
}

# A rendezvous port free on the first node, where this batch shell runs (MASTER_PORT or the recipe's
# launch.main_process_port still win in the launcher).
ta_main_port() {
  if [[ -z ${TIMEALIGN_MAIN_PORT:-} ]]; then
    if ! TIMEALIGN_MAIN_PORT=$("$TIMEALIGN_PYTHON" -m timealign.cluster port) || [[ -z $TIMEALIGN_MAIN_PORT ]]; then
      echo "error: cannot find a free rendezvous port on $(hostname): set TIMEALIGN_MAIN_PORT" >&2
      exit 2
    fi
  fi
  export TIMEALIGN_MAIN_PORT
  ta_log "free rendezvous port on the first node: $TIMEALIGN_MAIN_PORT"
}

ta_job_state() {  # "JobState=... Reason=... Restarts=..." as Slurm has it now (Reason=TimeLimit: the limit)
  [[ -n ${SLURM_JOB_ID:-} ]] || return 0
  scontrol show job --oneliner "$SLURM_JOB_ID" 2>/dev/null | grep -o 'JobState=[^ ]*\|Reason=[^ ]*\|Restarts=[^ ]*' |
    paste -sd ' ' -
}

ta_time_left() {  # how far the time limit is (scontrol's EndTime): what the warning's lead really was
  local fields end
  fields=$(scontrol show job --oneliner "${SLURM_JOB_ID:-}" 2>/dev/null)
  end=$(grep -o 'EndTime=[^ ]*' <<<"$fields" | cut -d= -f2)
  if [[ $fields == *TimeLimit=UNLIMITED* || $end == Unknown ]]; then  # EndTime: a year ahead, or Unknown
    echo "no time limit: sent by hand"
  elif [[ -n $end ]] && end=$(date -d "$end" +%s 2>/dev/null); then
    if ((end - $(date +%s) > 300 * 86400)); then  # an unlimited job's EndTime can read a year ahead, whatever TimeLimit says
      echo "no time limit: sent by hand"
    else
      echo "the time limit is $((end - $(date +%s))) s away"
    fi
  else
    echo "time limit unknown"
  fi
}

ta_train() {  # ta_train dpo|sft recipe=NAME [key=value ...]
  local task=$1
  shift
  ta_setup
  local nodes=${SLURM_NNODES:-1}
  ta_main_addr
  ta_main_port
  local -a launcher=("$TIMEALIGN_PYTHON" -m timealign.cluster launch "task=$task")
  if [[ ${TIMEALIGN_DRY_RUN:-0} == 1 ]]; then
    launcher+=(dry_run=true)
  fi
  launcher+=("$@")
  local -a step=(srun --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 --kill-on-bad-exit=1 --wait=60)
  if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
    step+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")  # srun does not inherit it from sbatch (Slurm >= 22.05)
  elif [[ -n ${SLURM_JOB_ID:-} ]]; then
    ta_log "warning: no --cpus-per-task: the training step gets one CPU for all of this node's processes;" \
      "submit with --cpus-per-task=<processes per node x launch.cpus_per_gpu> (\`python -m timealign.cluster" \
      "submit\` does)"
  fi
  export TIMEALIGN_STOP_FILE=$TA_LOG_DIR/${SLURM_JOB_ID:-local}.stop
  rm -f "$TIMEALIGN_STOP_FILE" "$TIMEALIGN_STOP_FILE.requeue"
  TA_WARNED=0 TA_TERMED=0
  # The stop file only when this batch shell got USR1 (B:USR1, --batch, --full): USR1 to the job steps only stops
  # the trainer too, which then says the job is not requeued.
  trap 'TA_WARNED=1; touch "$TIMEALIGN_STOP_FILE"
    ta_log "USR1 to the batch shell ($(ta_time_left)): the trainer checkpoints and stops"' USR1
  trap 'TA_TERMED=1; ta_log "SIGTERM: Slurm is ending the job ($(ta_job_state)); the trainers checkpoint" \
    "within KillWait; no requeue from here"' TERM
  ta_log "${step[*]} ${launcher[*]}"
  ta_wait_for "${step[@]}" "${launcher[@]}"
  trap - USR1 TERM
  local rc=$TA_RC
  if [[ $TA_WARNED == 1 && -f $TIMEALIGN_STOP_FILE.requeue ]]; then
    ta_log "trainer saved $(cat "$TIMEALIGN_STOP_FILE.requeue")"
    rm -f "$TIMEALIGN_STOP_FILE" "$TIMEALIGN_STOP_FILE.requeue"
    if ta_requeue; then
      exit 0
    fi
    exit "$TA_EXIT_REQUEUE"
  fi
  rm -f "$TIMEALIGN_STOP_FILE" "$TIMEALIGN_STOP_FILE.requeue"
  if [[ $rc == "$TA_EXIT_REQUEUE" && $TA_TERMED == 1 ]]; then
    ta_log "the trainer checkpointed and stopped on SIGTERM ($(ta_job_state)): not requeued from here"
  elif [[ $rc == "$TA_EXIT_REQUEUE" ]]; then
    ta_log "the trainer checkpointed and stopped on a signal this batch shell did not get ($(ta_job_state)):" \
      "not requeued from here; USR1 requeues only through the batch shell (scancel --signal=USR1 --batch or" \
      "--full, --signal=B:USR1@N)"
  fi
  ta_log "finished with exit code $rc"
  exit "$rc"
}

ta_eval() {  # ta_eval recipe=NAME checkpoint=PATH [suites=...] [out=DIR] [key=value ...]
  ta_setup
  local -a cmd=("$TIMEALIGN_PYTHON" -m timealign.cluster eval)
  if [[ ${TIMEALIGN_DRY_RUN:-0} == 1 ]]; then
    cmd+=(dry_run=true)
  fi
  if [[ ${TIMEALIGN_SERVE:-0} == 1 ]]; then
    cmd+=(serve=true)  # port: the first free one on this node from 10000 + job id % 10000
    if [[ -n ${TIMEALIGN_SERVE_PORT:-} ]]; then
      cmd+=("port=$TIMEALIGN_SERVE_PORT")
    fi
  fi
  cmd+=("$@")
  trap 'ta_log "USR1 (time limit near): finished samples are cached"; ta_requeue && exit 0' USR1
  ta_log "${cmd[*]}"
  ta_wait_for "${cmd[@]}"
  trap - USR1
  ta_log "finished with exit code $TA_RC"
  exit "$TA_RC"
}
