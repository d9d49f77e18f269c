#!/usr/bin/env bash
# AutoSearch, PPO-GAE with per-step rewards: recipes/autosearch/config/autosearch_ppo.yaml.
#   bash recipes/autosearch/run_ppo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B bash recipes/autosearch/run_ppo.sh
#   DRY_RUN=1 bash recipes/autosearch/run_ppo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/autosearch/run_ppo.sh    # same YAML on this CPU box (tiny model, 2 steps)
set -euo pipefail
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs --------------------------------------------------------------------------------------------------------
MODEL=${MODEL:-Qwen/Qwen2.5-3B}                              # AutoSearch §4: Qwen2.5-3B-Base and 7B-Base
NNODES=${NNODES:-1}
N_GPUS=${N_GPUS:-8}                                          # App. C: one node, eight H20
ROLLOUT=${ROLLOUT:-vllm}                                     # vllm | sglang
TP=${TP:-1}                                                  # rollout tensor parallel size
RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}   # `python -m retriever_server serve` (E5, wiki-18)
DATA_DIR=${DATA_DIR:-data/autosearch}                        # agentrag-verl data prepare --preset searchr1_nq_hotpotqa --format autosearch
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
PROJECT=${PROJECT:-agentrag_autosearch}
EXPERIMENT=${EXPERIMENT:-autosearch-$(model_tag "$MODEL")-ppo}
CKPT_DIR=${CKPT_DIR:-checkpoints/$PROJECT/$EXPERIMENT}
LOGGER=${LOGGER:-[console]}                                  # wandb opt-in: LOGGER='[console,wandb]' + WANDB_API_KEY
# PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=autosearch_ppo
FORMAT=autosearch
REWARD_METHOD=autosearch
REWARD_CLASS=AutoSearchRewardManager
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
local_critic_overrides
run_recipe "$@"
