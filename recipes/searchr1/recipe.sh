# Search-R1: the body of run_grpo.sh and run_ppo.sh (sourced by them with ALGO and MODEL set, never run directly).
# ALGO (grpo | ppo) picks config/searchr1_$ALGO.yaml and the experiment name; ppo adds the local critic settings.
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs (MODEL is set in run_grpo.sh / run_ppo.sh: the papers' default differs per setting) ------------------
N_GPUS=${N_GPUS:-8}                                          # Search-R1: 8 GPUs (micro-batches are per GPU)
DATA_DIR=${DATA_DIR:-data/searchr1_nq_hotpotqa}              # agentrag-verl data prepare --preset searchr1_nq_hotpotqa
# NNODES, ROLLOUT, TP, RETRIEVER_URL, TRAIN_FILES, VAL_FILES, PROJECT, EXPERIMENT, CKPT_DIR, LOGGER (defaults for the
# knobs every recipe has), PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see
# recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=searchr1_$ALGO FORMAT=searchr1 REWARD_METHOD=searchr1 REWARD_CLASS=SearchR1RewardManager
recipe_init
run_recipe "$@"
