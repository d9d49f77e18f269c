# Shared body of the recipes' run_<algo>.sh scripts (sourced, never run directly).
#
# A run script sources this file, sets its knobs (env vars; MODEL, N_GPUS, DATA_DIR, its paper's own and whatever
# follows from the model: see model_tag and model_size_b), calls `recipe_init`, builds up to three bash arrays and
# calls `run_recipe "$@"`:
#   CLUSTER_OVERRIDES  GPU-cluster settings beyond those of every recipe, which run_recipe writes from the knobs
#                      MODEL, NNODES, N_GPUS, ROLLOUT, TP, PROJECT, EXPERIMENT, CKPT_DIR and LOGGER
#   COMMON_OVERRIDES   settings of both profiles beyond those of every recipe, which run_recipe writes first from the
#                      knobs TRAIN_FILES, VAL_FILES and RETRIEVER_URL (judge endpoints, reward options)
#   LOCAL_OVERRIDES    local CPU profile only (keys the tiny run must change; train-local's own CPU overrides
#                      from agentrag_verl.local_cpu.train_local.cpu_overrides come first, these replace them)
# and these variables: CONFIG_NAME (YAML in ./config), FORMAT (trajectory format of the data),
# REWARD_METHOD and REWARD_CLASS (the reward manager class in agentrag_verl.methods.$REWARD_METHOD.manager),
# optional ALGO (ppo: the local profile gets the critic's CPU settings, local_critic_overrides),
# optional LOCAL_RESPONSE_LENGTH, and an optional
# function `local_prepare` (extra local setup, e.g. the Search-P1 planner cache).
#
# Knobs every script has, with these defaults where neither the user nor the script set one (recipe_init):
#   NNODES 1, ROLLOUT vllm (or sglang), TP 1 (rollout tensor parallel size), RETRIEVER_URL
#   http://127.0.0.1:8000/retrieve (`python -m retriever_server serve`), TRAIN_FILES $DATA_DIR/train.parquet,
#   VAL_FILES $DATA_DIR/test.parquet, PROJECT agentrag_<the recipe's folder>, EXPERIMENT
#   <folder>-<model_tag MODEL>-$ALGO, CKPT_DIR checkpoints/$PROJECT/$EXPERIMENT, LOGGER [console] (wandb opt-in:
#   LOGGER='[console,wandb]' + WANDB_API_KEY).
#
# Profiles (PROFILE env var):
#   gpu   (default) python -m verl.trainer.main_ppo --config-path=<recipe>/config --config-name=<name> overrides...
#   local agentrag-verl train-local with the SAME recipe YAML on this CPU box: tiny random Qwen2, the fixture QA set
#         prepared by `agentrag-verl data prepare`, the real retriever server over a MiniLM index of the fixture
#         corpus, and the stand-in judge endpoint (python -m agentrag_verl.standin; rules, not a model).
#         Knobs of a local run on real data (benchmarks/learning.py sets them): LOCAL_MODEL (a Hugging Face folder,
#         e.g. a warm start, instead of the tiny random model), LOCAL_DATA_DIR (a folder with train.parquet and
#         test.parquet in the recipe's FORMAT, instead of the fixture QA set), LOCAL_RETRIEVER_URL and
#         LOCAL_JUDGE_URL (services already running, e.g. over another corpus, instead of starting the fixture's),
#         LOCAL_BATCH_SIZE and LOCAL_ROLLOUT_N (prompts per step and group size; default train-local's 4 and 2),
#         LOCAL_STEPS, LOCAL_RESPONSE_LENGTH (default 128), LOCAL_SAVE_FREQ (a checkpoint every N steps; default
#         after the last only) and LOCAL_RESUME=1 (continue a stopped run of LOCAL_WORK from its latest checkpoint:
#         train-local --resume).
# DRY_RUN=1 (or true, yes) prints the exact final command (shell-quoted, one line) and exits without starting or
# creating anything; any other non-empty DRY_RUN is refused (common/knobs.sh). PREFLIGHT=1 (or true, yes) checks that
# command instead, as verl's main_ppo starts it, without Ray or a GPU (`agentrag-verl preflight`), and exits with its
# status. With NNODES > 1, the URL knobs in SERVICE_URL_KNOBS must not point at this machine (knob_reachable_url).
# Knobs every script has are checked in recipe_init: PROFILE (gpu|local), ROLLOUT (vllm|sglang), NNODES,
# N_GPUS (GPUs per node), TP and LOCAL_STEPS (whole numbers >= 1), TRAINER_MODE (sync | colocate_async |
# separate_async: verl's V1 trainer mode, the recipe's trainer_mode config group, agentrag_verl/config/trainer_mode;
# docs/async.md) and, for separate_async, ROLLOUT_NNODES x ROLLOUT_N_GPUS, the rollout pool beside the trainer's
# NNODES x N_GPUS (defaults 1 x N_GPUS). The names of earlier versions (MODEL_PATH,
# GPUS_PER_NODE) are refused with the new name rather than silently ignored.

RECIPES_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$RECIPES_ROOT/common/knobs.sh"
PYTHON=${PYTHON:-python3}
AGENTRAG=${AGENTRAG:-agentrag-verl}
PROFILE=${PROFILE:-gpu}
knob_dry_run
knob_flag PREFLIGHT "to check the command as verl starts it, without Ray or a GPU"
_BG_PIDS=()
CLUSTER_OVERRIDES=()
COMMON_OVERRIDES=()
LOCAL_OVERRIDES=()
SERVICE_URL_KNOBS=(RETRIEVER_URL)  # services the workers call; a script adds its judge / embedding URL knobs

_die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

# model_tag MODEL: the model's name for experiment names: the last path component, lower case, "-instruct" shortened
# to "-it" (Qwen/Qwen2.5-3B-Instruct -> qwen2.5-3b-it).
model_tag() {
  local name=${1%/}
  name=${name##*/}
  name=${name,,}
  printf '%s\n' "${name/-instruct/-it}"
}

# model_size_b MODEL: the parameter count in billions that the model's name states (Qwen2.5-7B-Instruct -> 7,
# Qwen2.5-1.5B -> 1.5); nothing when the name states none (a local checkpoint directory).
model_size_b() {
  local name=${1%/}
  name=${name##*/}
  [[ "${name,,}" =~ (^|[^0-9.])([0-9]+(\.[0-9]+)?)b($|[^a-z0-9]) ]] && printf '%s\n' "${BASH_REMATCH[2]}"
  return 0
}

_free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_cleanup() {
  local pid
  for pid in "${_BG_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${_BG_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}

_wait_http() {  # url seconds
  local url=$1 deadline=$((SECONDS + $2))
  until "$PYTHON" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$url" 2>/dev/null; do
    ((SECONDS < deadline)) || _die "service at $url did not come up within $2 s (see the logs under $LOCAL_WORK)"
    sleep 0.5
  done
}

# recipe_init: default and check the knobs; in the local profile point them at local services and files (a dry run
# creates none).
recipe_init() {
  local paper
  paper=$(basename "$RECIPE_DIR")
  NNODES=${NNODES:-1}
  ROLLOUT=${ROLLOUT:-vllm}
  TP=${TP:-1}
  RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}
  TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
  VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
  PROJECT=${PROJECT:-agentrag_$paper}
  EXPERIMENT=${EXPERIMENT:-$paper-$(model_tag "$MODEL")-${ALGO:?set ALGO or EXPERIMENT before recipe_init}}
  CKPT_DIR=${CKPT_DIR:-checkpoints/$PROJECT/$EXPERIMENT}
  LOGGER=${LOGGER:-[console]}
  knob_renamed MODEL_PATH MODEL GPUS_PER_NODE N_GPUS
  knob_choice PROFILE gpu local
  knob_choice ROLLOUT vllm sglang
  knob_positive_int NNODES N_GPUS TP
  TRAINER_MODE=${TRAINER_MODE:-sync}
  knob_choice TRAINER_MODE sync colocate_async separate_async
  ROLLOUT_NNODES=${ROLLOUT_NNODES:-1} ROLLOUT_N_GPUS=${ROLLOUT_N_GPUS:-$N_GPUS}
  knob_positive_int ROLLOUT_NNODES ROLLOUT_N_GPUS
  if [[ "$TRAINER_MODE" == separate_async ]]; then
    CLUSTER_OVERRIDES+=("actor_rollout_ref.rollout.nnodes=$ROLLOUT_NNODES" "actor_rollout_ref.rollout.n_gpus_per_node=$ROLLOUT_N_GPUS")
  fi
  LOCAL_STEPS=${LOCAL_STEPS:-2}
  knob_positive_int LOCAL_STEPS
  case "$PROFILE" in
    gpu) ;;
    local)
      LOCAL_WORK=${LOCAL_WORK:-outputs/local/${CONFIG_NAME:?set CONFIG_NAME before recipe_init}}
      [[ "$LOCAL_WORK" == /* ]] || LOCAL_WORK="$PWD/$LOCAL_WORK"  # absolute; created when the run starts, not here
      LOCAL_RETRIEVER_PORT=${LOCAL_RETRIEVER_PORT:-$(_free_port)}
      LOCAL_JUDGE_PORT=${LOCAL_JUDGE_PORT:-$(_free_port)}
      RETRIEVER_URL=${LOCAL_RETRIEVER_URL:-"http://127.0.0.1:${LOCAL_RETRIEVER_PORT}/retrieve"}
      RETRIEVER_ROOT=${RETRIEVER_URL%/retrieve}
      JUDGE_URL=${LOCAL_JUDGE_URL:-"http://127.0.0.1:${LOCAL_JUDGE_PORT}/v1"}
      JUDGE_MODEL=standin-judge
      JUDGE_API_KEY_ENV=none
      LOCAL_BATCH_SIZE=${LOCAL_BATCH_SIZE:-4} LOCAL_ROLLOUT_N=${LOCAL_ROLLOUT_N:-2}
      knob_positive_int LOCAL_BATCH_SIZE LOCAL_ROLLOUT_N
      [[ -z "${LOCAL_SAVE_FREQ:-}" ]] || knob_positive_int LOCAL_SAVE_FREQ
      knob_flag LOCAL_RESUME "to continue a stopped run from its latest checkpoint"
      [[ -z "${LOCAL_MODEL:-}" || -f "$LOCAL_MODEL/config.json" ]] ||
        _die "LOCAL_MODEL=$LOCAL_MODEL is not a Hugging Face model folder (no config.json); unset it for the tiny random model"
      if [[ -n "${LOCAL_DATA_DIR:-}" ]]; then
        [[ -f "$LOCAL_DATA_DIR/train.parquet" && -f "$LOCAL_DATA_DIR/test.parquet" ]] ||
          _die "LOCAL_DATA_DIR=$LOCAL_DATA_DIR must hold train.parquet and test.parquet (agentrag-verl data prepare --format $FORMAT)"
        TRAIN_FILES="$LOCAL_DATA_DIR/train.parquet"
        VAL_FILES="$LOCAL_DATA_DIR/test.parquet"
      else
        TRAIN_FILES="$LOCAL_WORK/data/train.parquet"
        VAL_FILES="$LOCAL_WORK/data/test.parquet"
      fi
      ;;
  esac
}

# _local_services: data, index, retriever server, stand-in judge (local profile, not in DRY_RUN).
_local_services() {
  local qa corpus
  mkdir -p "$LOCAL_WORK"
  if [[ -z "${LOCAL_DATA_DIR:-}" ]]; then
    qa=$("$PYTHON" -c 'from agentrag_verl.data.corpus import QA_PATH; print(QA_PATH)')
    "$AGENTRAG" data prepare --input "$qa" --name mini --split train --format "$FORMAT" --out "$LOCAL_WORK/data" >/dev/null
    "$AGENTRAG" data prepare --input "$qa" --name mini --split test --max-per-source 8 --format "$FORMAT" \
      --out "$LOCAL_WORK/data" >/dev/null
  fi
  trap _cleanup EXIT
  if [[ -z "${LOCAL_RETRIEVER_URL:-}" ]]; then
    "$PYTHON" -c 'import sys; from agentrag_verl.data.corpus import load_corpus, write_corpus
write_corpus(load_corpus(), sys.argv[1])' "$LOCAL_WORK/corpus.jsonl"
    minilm=$("$PYTHON" -c 'from agentrag_verl.demo.models import minilm_path; print(minilm_path())')
    "$PYTHON" -m retriever_server build --corpus "$LOCAL_WORK/corpus.jsonl" --model "$minilm" --retriever-name mean \
      --out "$LOCAL_WORK/index" --no-progress >"$LOCAL_WORK/index_build.log" 2>&1 \
      || _die "index build failed: $LOCAL_WORK/index_build.log"
    "$PYTHON" -m retriever_server serve --index "$LOCAL_WORK/index" --port "$LOCAL_RETRIEVER_PORT" --num-threads 1 \
      >"$LOCAL_WORK/retriever.log" 2>&1 &
    _BG_PIDS+=($!)
    _wait_http "${RETRIEVER_ROOT}/health" 120
  fi
  if [[ -z "${LOCAL_JUDGE_URL:-}" ]]; then
    "$PYTHON" -m agentrag_verl.standin --port "$LOCAL_JUDGE_PORT" --model "$JUDGE_MODEL" \
      >"$LOCAL_WORK/standin_judge.log" 2>&1 &
    _BG_PIDS+=($!)
  fi
  _wait_http "${JUDGE_URL}/models" 60
  if declare -F local_prepare >/dev/null; then
    local_prepare
  fi
}

# run_recipe "$@": build the final command of the profile; print it (DRY_RUN=1) or run it. Extra arguments are
# Hydra overrides appended last (they win). RECIPE_LAUNCHER (set by ray/submit.sh for PROFILE=local) is a command
# that runs the local profile's final command for us, as a Ray job: the local services still start here, on this
# machine, and train-local joins the job's cluster (--ray-address auto) instead of starting its own.
run_recipe() {
  local config_path=${CONFIG_PATH:-$RECIPE_DIR/config}
  local -a cmd launcher=()
  COMMON_OVERRIDES=("data.train_files=$TRAIN_FILES" "data.val_files=$VAL_FILES"
    "actor_rollout_ref.rollout.custom.agentrag.retriever_url=$RETRIEVER_URL" "${COMMON_OVERRIDES[@]}")
  if [[ "${ALGO:-}" == ppo ]]; then local_critic_overrides; fi
  [[ -n "${RECIPE_LAUNCHER:-}" ]] && read -r -a launcher <<<"$RECIPE_LAUNCHER"
  if [[ "$PROFILE" == local ]]; then
    cmd=("$AGENTRAG" train-local ${launcher[0]:+--ray-address auto} --work-dir "$LOCAL_WORK/train" --format "$FORMAT"
      --config-path "$config_path" --config-name "$CONFIG_NAME"
      --reward-module "pkg://agentrag_verl.methods.$REWARD_METHOD.manager" --reward-name "$REWARD_CLASS"
      --train-files "$TRAIN_FILES" --val-files "$VAL_FILES"
      --steps "$LOCAL_STEPS" --response-length "${LOCAL_RESPONSE_LENGTH:-128}"
      --batch-size "$LOCAL_BATCH_SIZE" --rollout-n "$LOCAL_ROLLOUT_N" ${LOCAL_MODEL:+--model "$LOCAL_MODEL"}
      ${LOCAL_SAVE_FREQ:+--save-freq "$LOCAL_SAVE_FREQ"} ${LOCAL_RESUME:+--resume}
      -- "trainer_mode=$TRAINER_MODE" "${COMMON_OVERRIDES[@]}" "${LOCAL_BASE_OVERRIDES[@]}" "${LOCAL_OVERRIDES[@]}" "$@")
  else
    cmd=("$PYTHON" -m verl.trainer.main_ppo "--config-path=$config_path" "--config-name=$CONFIG_NAME"
      "actor_rollout_ref.model.path=$MODEL" "trainer.nnodes=$NNODES" "trainer.n_gpus_per_node=$N_GPUS"
      "actor_rollout_ref.rollout.name=$ROLLOUT" "actor_rollout_ref.rollout.tensor_model_parallel_size=$TP"
      "trainer.project_name=$PROJECT" "trainer.experiment_name=$EXPERIMENT" "trainer.default_local_dir=$CKPT_DIR"
      "trainer.logger=$LOGGER" "trainer_mode=$TRAINER_MODE" "${CLUSTER_OVERRIDES[@]}" "${COMMON_OVERRIDES[@]}" "$@")
  fi
  [[ "$PROFILE" == local ]] || knob_reachable_url "${SERVICE_URL_KNOBS[@]}"
  if [[ "$PREFLIGHT" == 1 ]]; then
    "$AGENTRAG" preflight -- "${cmd[@]}"
    return
  fi
  if [[ "$DRY_RUN" == 1 ]]; then
    if ((${#launcher[@]})); then
      DRY_RUN=1 "${launcher[@]}" "${cmd[@]}"
    else
      printf '%q ' "${cmd[@]}"
      printf '\n'
    fi
    return 0
  fi
  if [[ "$PROFILE" == local ]]; then
    _local_services
    "${launcher[@]}" "${cmd[@]}"
  else
    exec "${cmd[@]}"
  fi
}

# What every recipe's local profile changes on top of train-local's CPU overrides: no FSDP offload (a CPU run has
# nowhere to offload to), room for the papers' long system prompts (HiPRAG Figure 4), short observations so a
# 128-token response holds a search turn, and one retrieval for the question before the first generation
# (initial_search: a random tiny policy never writes a search tag, so the real retriever would go unused).
# Batches by count, not tokens: the multi-stage recipe packs up to 18432 tokens per actor micro-batch (dynamic batch
# size, Table 5's 16k-token sequences), about ten of the local profile's full-length sequences at once, and its
# first two CPU learning runs were killed for memory in the actor update (docs/learning.md); the rollout's and the ref's
# log-prob batching follow the actor's (verl's defaults interpolate it).
LOCAL_BASE_OVERRIDES=(
  actor_rollout_ref.actor.use_dynamic_bsz=false
  actor_rollout_ref.actor.fsdp_config.param_offload=false
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=false
  actor_rollout_ref.ref.fsdp_config.param_offload=false
  data.max_prompt_length=1024
  actor_rollout_ref.rollout.prompt_length=1024
  actor_rollout_ref.rollout.custom.agentrag.max_observation_tokens=48
  +actor_rollout_ref.rollout.custom.agentrag.initial_search=true
)

# Overrides that make the local CPU run of a PPO-GAE recipe work: the critic gets the CPU settings train-local
# gives the actor (FSDP2, SDPA attention, no remove-padding, no torch.compile); its model path follows the actor's
# (the recipes set critic.model.path: ${actor_rollout_ref.model.path}), i.e. the tiny model.
# verl 0.9.1's V1 trainer builds the critic's engine from critic.fsdp, whose use_dynamic_bsz defaults to true with a
# budget of critic.ppo_infer_max_token_len_per_gpu (32768 tokens), and ignores critic.ppo_micro_batch_size_per_gpu:
# a whole step's batch went through the critic in one pass (12.7 GB for 15 SmolLM2 trajectories on CPU, killed by
# Ray's memory monitor). The engine here takes the critic's own micro-batch size, for its update and its values.
local_critic_overrides() {
  LOCAL_OVERRIDES+=(
    critic.strategy=fsdp2
    critic.model.use_remove_padding=false
    critic.model.enable_gradient_checkpointing=false
    +critic.model.override_config.attn_implementation=sdpa
    critic.ppo_micro_batch_size_per_gpu=4
    +critic.fsdp.use_dynamic_bsz=false
    '+critic.fsdp.micro_batch_size_per_gpu=${critic.ppo_micro_batch_size_per_gpu}'
    '+critic.fsdp.infer_micro_batch_size_per_gpu=${critic.ppo_micro_batch_size_per_gpu}'
    critic.fsdp.use_torch_compile=false
    critic.fsdp.param_offload=false
    critic.fsdp.optimizer_offload=false
  )
}
