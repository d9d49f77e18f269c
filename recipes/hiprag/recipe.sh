# HiPRAG: the body of run_grpo.sh and run_ppo.sh (sourced by them with ALGO and MODEL set, never run directly).
# ALGO (grpo | ppo) picks config/hiprag_$ALGO.yaml and the experiment name; ppo adds the local critic settings.
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/run_common.sh"

# ---- knobs (MODEL is set in run_grpo.sh / run_ppo.sh: the papers' default differs per setting) ------------------
N_GPUS=${N_GPUS:-4}                                          # HiPRAG §4.3: four A100 80GB
# RETRIEVER_URL: E5 top-3 over wiki-18 (retriever_server)
JUDGE_URL=${JUDGE_URL:-https://api.openai.com/v1}            # any OpenAI-compatible endpoint (vLLM: http://host:8001/v1)
OVER_SEARCH_MODEL=${OVER_SEARCH_MODEL:-gpt-4.1-mini}         # HiPRAG §4.3
UNDER_SEARCH_MODEL=${UNDER_SEARCH_MODEL:-gpt-5-mini}         # HiPRAG §4.3
JUDGE_API_KEY_ENV=${JUDGE_API_KEY_ENV:-OPENAI_API_KEY}       # NAME of the env var holding the key; none = no key
LAMBDA_P=${LAMBDA_P:-0.4}                                    # HiPRAG §4.3; 0 = Search-R1 v0.3 "baseline"
DATA_DIR=${DATA_DIR:-data/hiprag}                            # agentrag-verl data prepare --preset searchr1_nq_hotpotqa --format hiprag
# NNODES, ROLLOUT, TP, RETRIEVER_URL, TRAIN_FILES, VAL_FILES, PROJECT, EXPERIMENT, CKPT_DIR, LOGGER (defaults for the
# knobs every recipe has), PROFILE=gpu|local, DRY_RUN=1|true|yes, PYTHON, LOCAL_WORK, LOCAL_STEPS: see
# recipes/common/run_common.sh
# --------------------------------------------------------------------------------------------------------------------

CONFIG_NAME=hiprag_$ALGO FORMAT=hiprag REWARD_METHOD=hiprag REWARD_CLASS=HipragRewardManager
recipe_init
SERVICE_URL_KNOBS+=(JUDGE_URL)
if [[ "$PROFILE" == local ]]; then OVER_SEARCH_MODEL=$JUDGE_MODEL UNDER_SEARCH_MODEL=$JUDGE_MODEL; fi

COMMON_OVERRIDES=(
  "reward.reward_kwargs.lambda_p=$LAMBDA_P"
  "reward.reward_kwargs.over_search_judge.base_url=$JUDGE_URL"
  "reward.reward_kwargs.over_search_judge.model=$OVER_SEARCH_MODEL"
  "reward.reward_kwargs.over_search_judge.api_key_env=$JUDGE_API_KEY_ENV"
  "reward.reward_kwargs.under_search_judge.base_url=$JUDGE_URL"
  "reward.reward_kwargs.under_search_judge.model=$UNDER_SEARCH_MODEL"
  "reward.reward_kwargs.under_search_judge.api_key_env=$JUDGE_API_KEY_ENV"
)
run_recipe "$@"
