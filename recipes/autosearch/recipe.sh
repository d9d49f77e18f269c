# AutoSearch: the body of run_grpo.sh and run_ppo.sh (sourced by them with ALGO and MODEL set, never run directly).
# ALGO (grpo | ppo) picks config/autosearch_$ALGO.yaml and the experiment name; ppo adds the local critic settings.
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs (MODEL is set in run_grpo.sh / run_ppo.sh: the papers' default differs per setting) ------------------
N_GPUS=${N_GPUS:-8}                                          # App. C: one node, eight H20
DATA_DIR=${DATA_DIR:-data/autosearch}                        # agentrag-verl data prepare --preset searchr1_nq_hotpotqa --format autosearch
# NNODES, ROLLOUT, TP, RETRIEVER_URL, TRAIN_FILES, VAL_FILES, PROJECT, EXPERIMENT, CKPT_DIR, LOGGER (defaults for the
# knobs every recipe has), PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see
# recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=autosearch_$ALGO FORMAT=autosearch REWARD_METHOD=autosearch REWARD_CLASS=AutoSearchRewardManager
recipe_init
run_recipe "$@"
