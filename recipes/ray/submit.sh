#!/usr/bin/env bash
# Submit a recipe to a Ray cluster as a Ray job:
#   ray job submit --address $RAY_ADDRESS --runtime-env recipes/ray/runtime_env.yaml -- python -m verl.trainer.main_ppo ...
#
#   RAY_ADDRESS=http://head:8265 bash recipes/ray/submit.sh recipes/hiprag/run_qwen2.5_3b_instruct_ppo.sh [overrides...]
#   DRY_RUN=1 ... prints the exact `ray job submit` command instead of running it
#
# The run script's knobs (MODEL_PATH, NNODES, GPUS_PER_NODE, RETRIEVER_URL, JUDGE_URL, ...) are read here, on the
# submitting machine, and frozen into the job's command. Paths in them (data, checkpoints, models) must be valid on
# the cluster. The recipe's config dir is given relative to the job's working_dir (the repository, uploaded by Ray),
# and main_ppo joins the running cluster (+ray_kwargs.ray_init.address=auto) instead of starting its own Ray.
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------------------------
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}             # the head node's dashboard / job server
RUNTIME_ENV=${RUNTIME_ENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/runtime_env.yaml}
SUBMISSION_ID=${SUBMISSION_ID:-}                             # optional job id (ray job submit --submission-id)
NO_WAIT=${NO_WAIT:-1}                                        # 1: return after submitting (ray job logs -f <id>)
JUDGE_KEY_VARS=${JUDGE_KEY_VARS:-}                           # names of env vars to forward (values never printed)
DRY_RUN=${DRY_RUN:-0}
# --------------------------------------------------------------------------------------------------------------------

[[ $# -ge 1 ]] || { echo "usage: $0 recipes/<paper>/run_<model>_<algo>.sh [hydra overrides...]" >&2; exit 2; }
SCRIPT=$1
shift
[[ -f "$SCRIPT" ]] || { echo "$0: no run script $SCRIPT" >&2; exit 2; }
REPO=$(pwd)
RECIPE_CONFIG=$(cd "$(dirname "$SCRIPT")" && pwd)/config
[[ "$RECIPE_CONFIG" == "$REPO"/* ]] || {
  echo "$0: run from the repository root (the job's working_dir); $SCRIPT is outside $REPO" >&2
  exit 2
}
REL_CONFIG=${RECIPE_CONFIG#"$REPO"/}

# the recipe's exact command, with its config dir relative to the job's working directory
CMD=$(DRY_RUN=1 PROFILE=gpu CONFIG_PATH="__JOB_WORKDIR__/$REL_CONFIG" bash "$SCRIPT" "$@" "+ray_kwargs.ray_init.address=auto")
# Hydra needs an absolute --config-path: expand the job's working directory when the job starts
ENTRYPOINT="exec ${CMD//__JOB_WORKDIR__/\"\$PWD\"}"

SUBMIT=(ray job submit --address "$RAY_ADDRESS" --runtime-env "$RUNTIME_ENV")
[[ -n "$SUBMISSION_ID" ]] && SUBMIT+=(--submission-id "$SUBMISSION_ID")
[[ "$NO_WAIT" == 1 ]] && SUBMIT+=(--no-wait)
if [[ -n "$JUDGE_KEY_VARS" ]]; then
  # forward secrets as env vars of the job without writing them to a file or to this script's output
  json="{}"
  for name in $JUDGE_KEY_VARS; do
    [[ -n "${!name:-}" ]] || { echo "$0: $name is not set" >&2; exit 2; }
  done
  json=$(python3 -c 'import json, os, sys; print(json.dumps({"env_vars": {n: os.environ[n] for n in sys.argv[1:]}}))' $JUDGE_KEY_VARS)
  SUBMIT+=(--runtime-env-json "$json")
fi
SUBMIT+=(-- bash -c "$ENTRYPOINT")

if [[ "$DRY_RUN" == 1 ]]; then
  # never print secret values: show the forwarded variable names only
  for i in "${!SUBMIT[@]}"; do
    if [[ "${SUBMIT[$i]}" == --runtime-env-json ]]; then SUBMIT[$((i + 1))]="<env: $JUDGE_KEY_VARS>"; fi
  done
  printf '%q ' "${SUBMIT[@]}"
  printf '\n'
  exit 0
fi
exec "${SUBMIT[@]}"
