#!/usr/bin/env bash
# Search-R1 baseline (v0.3 outcome + format reward), GRPO (group 5): recipes/searchr1/config/searchr1_grpo.yaml.
#   bash recipes/searchr1/run_grpo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B bash recipes/searchr1/run_grpo.sh
#   DRY_RUN=1 bash recipes/searchr1/run_grpo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/searchr1/run_grpo.sh    # same YAML on this CPU box (tiny model, 2 steps)
set -euo pipefail
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs --------------------------------------------------------------------------------------------------------
MODEL=${MODEL:-Qwen/Qwen2.5-3B}                              # Search-R1 trains base and instruct 3B / 7B models
NNODES=${NNODES:-1}
N_GPUS=${N_GPUS:-8}                                          # Search-R1: 8 GPUs (micro-batches are per GPU)
ROLLOUT=${ROLLOUT:-vllm}                                     # vllm | sglang
TP=${TP:-1}                                                  # rollout tensor parallel size
RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}   # `python -m retriever_server serve` (E5, wiki-18)
DATA_DIR=${DATA_DIR:-data/searchr1_nq_hotpotqa}              # agentrag-verl data prepare --preset searchr1_nq_hotpotqa
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
PROJECT=${PROJECT:-agentrag_searchr1}
EXPERIMENT=${EXPERIMENT:-searchr1-$(model_tag "$MODEL")-grpo}
CKPT_DIR=${CKPT_DIR:-checkpoints/$PROJECT/$EXPERIMENT}
LOGGER=${LOGGER:-[console]}                                  # wandb opt-in: LOGGER='[console,wandb]' + WANDB_API_KEY
# PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=searchr1_grpo
FORMAT=searchr1
REWARD_METHOD=searchr1
REWARD_CLASS=SearchR1RewardManager
recipe_init

CLUSTER_OVERRIDES=(
  "actor_rollout_ref.model.path=$MODEL"
  "trainer.nnodes=$NNODES"
  "trainer.n_gpus_per_node=$N_GPUS"
  "actor_rollout_ref.rollout.name=$ROLLOUT"
  "actor_rollout_ref.rollout.tensor_model_parallel_size=$TP"
  "trainer.project_name=$PROJECT"
  "trainer.experiment_name=$EXPERIMENT"
  "trainer.default_local_dir=$CKPT_DIR"
  "trainer.logger=$LOGGER"
)
COMMON_OVERRIDES=(
  "data.train_files=$TRAIN_FILES"
  "data.val_files=$VAL_FILES"
  "actor_rollout_ref.rollout.custom.agentrag.retriever_url=$RETRIEVER_URL"
)
run_recipe "$@"
