#!/usr/bin/env bash
# Multi-stage reward ("Learning When to Search"), DAPO, 2WikiMultihopQA 80/20 (recipes/multistage/config).
#   STAGE=1 bash recipes/multistage/run_dapo.sh                  # stage 1 (two-run schedule)
#   STAGE=2 STAGE1_CKPT=checkpoints/.../global_step_250 bash recipes/multistage/run_dapo.sh
#   STAGE=switch bash recipes/multistage/run_dapo.sh             # one run, stage 2 from STAGE_SWITCH_STEP
#   MODEL=Qwen/Qwen3-8B STAGE=1 bash recipes/multistage/run_dapo.sh
#   DRY_RUN=1 ... prints the exact command; PROFILE=local ... runs the same YAML on this CPU box (tiny model)
set -euo pipefail
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs --------------------------------------------------------------------------------------------------------
STAGE=${STAGE:-1}                                            # 1 | 2 | switch
STAGE_SWITCH_STEP=${STAGE_SWITCH_STEP:-250}                  # not stated in the paper: half of Table 5's 500 steps
STAGE1_CKPT=${STAGE1_CKPT:-}                                 # STAGE=2: stage-1 checkpoint dir (.../global_step_N)
MODEL=${MODEL:-Qwen/Qwen3-4B}                                # paper: Qwen3-4B / 8B (reasoning), Qwen2.5-3B/7B-Instruct
N_GPUS=${N_GPUS:-8}                                          # App. B.2: eight H800
TP=${TP:-4}                                                  # Table 5: tensor_model_parallel_size 4
# RETRIEVER_URL: e5 (mean pooling), top-5
JUDGE_URL=${JUDGE_URL:-http://127.0.0.1:8001/v1}             # B.2: Qwen3-235B-A22B-Instruct as judge (vLLM)
JUDGE_MODEL=${JUDGE_MODEL:-Qwen/Qwen3-235B-A22B-Instruct-2507}
JUDGE_API_KEY_ENV=${JUDGE_API_KEY_ENV:-none}                 # NAME of the env var holding the key; none = no key
EMBEDDING_KIND=${EMBEDDING_KIND:-openai}                     # openai (/v1/embeddings) | retriever (our /encode)
EMBEDDING_URL=${EMBEDDING_URL:-http://127.0.0.1:8002/v1}     # §4.2: Qwen3-Embedding served OpenAI-compatibly
EMBEDDING_MODEL=${EMBEDDING_MODEL:-Qwen/Qwen3-Embedding-8B}
DATA_DIR=${DATA_DIR:-data/multistage_2wiki}                  # agentrag-verl data prepare --preset 2wiki_80_20 --format multistage
VAL_FILES=${VAL_FILES:-$DATA_DIR/val.parquet}
EXPERIMENT=${EXPERIMENT:-multistage-$(model_tag "$MODEL")-dapo-stage$STAGE}
# NNODES, ROLLOUT, TP, RETRIEVER_URL, TRAIN_FILES, VAL_FILES, PROJECT, EXPERIMENT, CKPT_DIR, LOGGER (defaults for the
# knobs every recipe has), PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see
# recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

knob_choice STAGE 1 2 switch
knob_positive_int STAGE_SWITCH_STEP
case "$STAGE" in
  1 | switch) CONFIG_NAME=multistage_stage1 ;;
  2) CONFIG_NAME=multistage_stage2 ;;
esac
FORMAT=multistage REWARD_METHOD=multistage REWARD_CLASS=MultistageRewardManager
recipe_init
SERVICE_URL_KNOBS+=(JUDGE_URL EMBEDDING_URL)
if [[ "$PROFILE" == local ]]; then EMBEDDING_KIND=retriever EMBEDDING_URL=$RETRIEVER_ROOT; fi

case "$STAGE" in
  # two-run schedule: stage 1 stops at the switch step, stage 2 resumes there and runs to Table 5's 500 steps
  1) CLUSTER_OVERRIDES+=("trainer.total_training_steps=$STAGE_SWITCH_STEP") ;;
  2)
    # a dry run too: the command it prints must be one that runs. The local profile does not resume (LOCAL_OVERRIDES)
    if [[ -z "$STAGE1_CKPT" && "$PROFILE" == gpu ]]; then
      _die "STAGE=2 resumes from stage 1: set STAGE1_CKPT to its checkpoint dir (checkpoints/.../global_step_N)"
    fi
    CLUSTER_OVERRIDES+=("trainer.resume_from_path=$STAGE1_CKPT")
    ;;
esac
COMMON_OVERRIDES=(
  "reward.reward_kwargs.judge.base_url=$JUDGE_URL"
  "reward.reward_kwargs.judge.model=$JUDGE_MODEL"
  "reward.reward_kwargs.judge.api_key_env=$JUDGE_API_KEY_ENV"
  "reward.reward_kwargs.embedding.kind=$EMBEDDING_KIND"
  "reward.reward_kwargs.embedding.url=$EMBEDDING_URL"
  "reward.reward_kwargs.embedding.model=$EMBEDDING_MODEL"
)
if [[ "$STAGE" == switch ]]; then
  COMMON_OVERRIDES+=(reward.reward_kwargs.stage=null "+reward.reward_kwargs.stage_switch_step=$STAGE_SWITCH_STEP")
fi
# async trainers: verl's async replay buffer refills exactly the groups it drops, as prompts finish, and bounds
# staleness instead of generation batches; the bounded sampler (synchronous only) gives way to it, and DAPO's
# max_num_gen_batches, which that buffer ignores, is set to 0 (no bound) so that nothing silently drops it
if [[ "$TRAINER_MODE" != sync ]]; then
  COMMON_OVERRIDES+=(trainer.v1.sampler.custom_sampler.path=null trainer.v1.sampler.custom_sampler.name=null
    algorithm.filter_groups.max_num_gen_batches=0)
fi
# local: a random tiny policy gives every response of a group the same reward, so dynamic sampling would discard
# every group; a stage-2 local run has no stage-1 checkpoint to resume
LOCAL_OVERRIDES=(algorithm.filter_groups.enable=false)
if [[ "$STAGE" == 2 ]]; then LOCAL_OVERRIDES+=(trainer.resume_mode=disable); fi
run_recipe "$@"
