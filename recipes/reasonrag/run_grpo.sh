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
N_GPUS=${N_GPUS:-8}                                          # Search-R1: 8 GPUs (micro-batches are per GPU)
# RETRIEVER_URL: ReasonRAG's BGE top-3 (retriever_server build --preset bge)
DATA_DIR=${DATA_DIR:-data/reasonrag_orl}                     # agentrag-verl data prepare --preset reasonrag_questions --format searchr1
EXPERIMENT=${EXPERIMENT:-reasonrag-orl-$(model_tag "$MODEL")-grpo}
# NNODES, ROLLOUT, TP, RETRIEVER_URL, TRAIN_FILES, VAL_FILES, PROJECT, EXPERIMENT, CKPT_DIR, LOGGER (defaults for the
# knobs every recipe has), PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see
# recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=reasonrag_orl_grpo FORMAT=searchr1 REWARD_METHOD=searchr1 REWARD_CLASS=SearchR1RewardManager
recipe_init
run_recipe "$@"
