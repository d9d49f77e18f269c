# AutoSearch: the body of run_grpo.sh and run_ppo.sh (sourced by them with ALGO and MODEL set, never run directly).
# ALGO (grpo | ppo) picks config/autosearch_$ALGO.yaml and the experiment name; ppo adds the local critic settings.
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs (MODEL is set in run_grpo.sh / run_ppo.sh: the papers' default differs per setting) ------------------
NNODES=${NNODES:-1}
N_GPUS=${N_GPUS:-8}                                          # App. C: one node, eight H20
ROLLOUT=${ROLLOUT:-vllm}                                     # vllm | sglang
TP=${TP:-1}                                                  # rollout tensor parallel size
RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}   # `python -m retriever_server serve` (E5, wiki-18)
DATA_DIR=${DATA_DIR:-data/autosearch}                        # agentrag-verl data prepare --preset searchr1_nq_hotpotqa --format autosearch
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
PROJECT=${PROJECT:-agentrag_autosearch}
EXPERIMENT=${EXPERIMENT:-autosearch-$(model_tag "$MODEL")-$ALGO}
CKPT_DIR=${CKPT_DIR:-checkpoints/$PROJECT/$EXPERIMENT}
LOGGER=${LOGGER:-[console]}                                  # wandb opt-in: LOGGER='[console,wandb]' + WANDB_API_KEY
# PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=autosearch_$ALGO
FORMAT=autosearch
REWARD_METHOD=autosearch
REWARD_CLASS=AutoSearchRewardManager
recipe_init

COMMON_OVERRIDES=(
  "data.train_files=$TRAIN_FILES"
  "data.val_files=$VAL_FILES"
  "actor_rollout_ref.rollout.custom.agentrag.retriever_url=$RETRIEVER_URL"
)
if [[ "$ALGO" == ppo ]]; then local_critic_overrides; fi
run_recipe "$@"
