#!/usr/bin/env bash
# ReasonRAG outcome-RL baseline (RL-ORL), GRPO: recipes/reasonrag/config/reasonrag_orl_grpo.yaml.
#   bash recipes/reasonrag/run_grpo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-3B-Instruct bash recipes/reasonrag/run_grpo.sh
#   DRY_RUN=1 bash recipes/reasonrag/run_grpo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/reasonrag/run_grpo.sh    # same YAML on this CPU box (tiny model, 2 steps)
set -euo pipefail
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs --------------------------------------------------------------------------------------------------------
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}                     # ReasonRAG §3.1
NNODES=${NNODES:-1}
N_GPUS=${N_GPUS:-8}                                          # Search-R1: 8 GPUs (micro-batches are per GPU)
ROLLOUT=${ROLLOUT:-vllm}                                     # vllm | sglang
TP=${TP:-1}                                                  # rollout tensor parallel size
RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}   # ReasonRAG: BGE top-3 (build --preset bge)
DATA_DIR=${DATA_DIR:-data/reasonrag_orl}                     # agentrag-verl data prepare --preset reasonrag_questions --format searchr1
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
PROJECT=${PROJECT:-agentrag_reasonrag}
EXPERIMENT=${EXPERIMENT:-reasonrag-orl-$(model_tag "$MODEL")-grpo}
CKPT_DIR=${CKPT_DIR:-checkpoints/$PROJECT/$EXPERIMENT}
LOGGER=${LOGGER:-[console]}                                  # wandb opt-in: LOGGER='[console,wandb]' + WANDB_API_KEY
# PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=reasonrag_orl_grpo
FORMAT=searchr1
REWARD_METHOD=searchr1
REWARD_CLASS=SearchR1RewardManager
recipe_init

COMMON_OVERRIDES=(
  "data.train_files=$TRAIN_FILES"
  "data.val_files=$VAL_FILES"
  "actor_rollout_ref.rollout.custom.agentrag.retriever_url=$RETRIEVER_URL"
)
run_recipe "$@"
