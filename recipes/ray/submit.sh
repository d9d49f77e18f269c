#!/usr/bin/env bash
# Submit a recipe to a Ray cluster as a Ray job:
#   ray job submit --address $RAY_ADDRESS --runtime-env <recipes/ray/runtime_env.yaml + env> -- <the recipe's command>
#
#   RAY_ADDRESS=http://head:8265 bash recipes/ray/submit.sh recipes/hiprag/run_ppo.sh [overrides...]
#   PROFILE=local RAY_ADDRESS=http://127.0.0.1:8265 bash recipes/ray/submit.sh recipes/hiprag/run_ppo.sh
#   DRY_RUN=1 ... prints the exact `ray job submit` command instead of running it
#   bash recipes/ray/submit.sh --job -- COMMAND...   submits any command as a job and waits (what PROFILE=local uses)
#
# PROFILE=gpu (default): the run script's knobs (MODEL, NNODES, N_GPUS, RETRIEVER_URL, JUDGE_URL, ...)
# are read here, on the submitting machine, and frozen into the job's command (python -m verl.trainer.main_ppo ...
# +ray_kwargs.ray_init.address=auto). Paths in them must be valid on the cluster; the recipe's config dir is given
# relative to the job's working_dir (the repository, uploaded by Ray).
# PROFILE=local: the run script's local profile, as a Ray job on a cluster that includes this machine (typically a
# head started here, see recipes/ray/README.md): the script prepares the data and starts the retriever and the
# stand-in judge here, then the job runs `agentrag-verl train-local --ray-address auto ...`, which joins the job's
# cluster; the CPU settings reach every Ray worker through the job's runtime env. It always waits for the job, so the
# services live as long as it runs.
#
# Waiting (NO_WAIT=0): the job's log is streamed; at the end one line gives the submission id, the final status and
# the wall time, and any status but SUCCEEDED exits 1 with the command that shows the job's log.
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------------------------
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}             # the head node's dashboard / job server
RUNTIME_ENV=${RUNTIME_ENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/runtime_env.yaml}
PROFILE=${PROFILE:-gpu}                                      # gpu | local (see above)
SUBMISSION_ID=${SUBMISSION_ID:-}                             # job id (default: agentrag-<date>-<time>-<pid>)
NO_WAIT=${NO_WAIT:-}                                         # 1: return after submitting (default 1 for gpu, else 0)
JUDGE_KEY_VARS=${JUDGE_KEY_VARS:-}                           # names of env vars to forward (values never printed)
RAY=${RAY:-ray}                                              # the ray CLI
PYTHON=${PYTHON:-python3}                                    # an interpreter with ray (job status) and pyyaml
# DRY_RUN=1|true|yes prints the `ray job submit` command and submits nothing
# --------------------------------------------------------------------------------------------------------------------

THIS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
source "$(dirname "$THIS")/../common/knobs.sh"
knob_dry_run
knob_choice PROFILE gpu local
NO_WAIT=${NO_WAIT:-$([[ "$PROFILE" == local || "${1:-}" == --job ]] && echo 0 || echo 1)}
knob_choice NO_WAIT 0 1
[[ "$PROFILE" == gpu || "$NO_WAIT" == 0 ]] ||
  _knob_die "NO_WAIT=1 with PROFILE=local: the local services run only as long as this script waits for the job"
SUBMISSION_ID=${SUBMISSION_ID:-agentrag-$(date +%Y%m%d-%H%M%S)-$$}
REPO=$(pwd)

# runtime_env: the YAML, with working_dir made absolute and env vars added (the job's CPU settings for the local
# profile, forwarded keys). Written to a private temporary file, so values never appear on a command line.
runtime_env_file() {  # out_file
  "$PYTHON" - "$RUNTIME_ENV" "$REPO" "$PROFILE" "$1" $JUDGE_KEY_VARS <<'PY'
import json, os, sys
import yaml
source, repo, profile, out, *keys = sys.argv[1:]
env = yaml.safe_load(open(source)) or {}
env["working_dir"] = os.path.join(repo, env.get("working_dir") or ".")
variables = env.setdefault("env_vars", {})
if profile == "local":
    from agentrag_verl.local_cpu.train_local import CPU_ENV
    variables.update(CPU_ENV)
for name in keys:
    if not os.environ.get(name):
        sys.exit(f"submit.sh: JUDGE_KEY_VARS names {name}, which is not set; export it or drop it from JUDGE_KEY_VARS")
    variables[name] = os.environ[name]
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as f:
    json.dump(env, f)
PY
}

# submit_job COMMAND...: submit the command as the job's entrypoint (run by bash in the job's working_dir)
submit_job() {
  local entrypoint
  entrypoint="exec $(printf '%q ' "$@")"
  # Hydra needs an absolute --config-path: __JOB_WORKDIR__ becomes the job's working directory when it starts
  entrypoint=${entrypoint//__JOB_WORKDIR__/\"\$PWD\"}
  local -a submit=("$RAY" job submit --address "$RAY_ADDRESS" --submission-id "$SUBMISSION_ID")
  if [[ "$DRY_RUN" == 1 ]]; then
    # the runtime env is shown by what it adds to the YAML; forwarded keys by their names only, never their values
    local shown="$RUNTIME_ENV" added=()
    [[ "$PROFILE" == local ]] && added+=("CPU settings")
    [[ -n "$JUDGE_KEY_VARS" ]] && read -r -a keys <<<"$JUDGE_KEY_VARS" && added+=("${keys[@]}")
    ((${#added[@]})) && shown="<$RUNTIME_ENV + env_vars: ${added[*]}>"
    submit+=(--runtime-env "$shown")
    [[ "$NO_WAIT" == 1 ]] && submit+=(--no-wait)
    printf '%q ' "${submit[@]}" -- bash -c "$entrypoint"
    printf '\n'
    return 0
  fi
  ENV_FILE=$(mktemp "${TMPDIR:-/tmp}/agentrag-runtime-env.XXXXXX")
  trap 'rm -f "$ENV_FILE"' EXIT
  runtime_env_file "$ENV_FILE"
  submit+=(--runtime-env "$ENV_FILE")  # JSON is YAML; a file keeps forwarded values off the command line
  if [[ "$NO_WAIT" == 1 ]]; then
    "${submit[@]}" --no-wait -- bash -c "$entrypoint"
    echo "submitted $SUBMISSION_ID; its log: $RAY job logs --address $RAY_ADDRESS -f $SUBMISSION_ID"
    return 0
  fi
  local start=$SECONDS status
  "${submit[@]}" -- bash -c "$entrypoint" || true  # streams the log; the status below decides
  status=$(RAY_ADDRESS="$RAY_ADDRESS" "$PYTHON" -c '
import os, sys
from ray.job_submission import JobSubmissionClient
print(JobSubmissionClient(os.environ["RAY_ADDRESS"]).get_job_status(sys.argv[1]).value)' "$SUBMISSION_ID" 2>/dev/null) ||
    status=UNKNOWN
  echo "ray job $SUBMISSION_ID: $status after $((SECONDS - start)) s"
  if [[ "$status" != SUCCEEDED ]]; then
    echo "$(basename "$THIS"): the job ended $status; its log: $RAY job logs --address $RAY_ADDRESS $SUBMISSION_ID" >&2
    return 1
  fi
}

if [[ "${1:-}" == --job ]]; then
  shift
  [[ "${1:-}" == -- ]] && shift
  [[ $# -ge 1 ]] || _knob_die "usage: $0 --job -- COMMAND..."
  submit_job "$@"
  exit $?
fi

[[ $# -ge 1 ]] || { echo "usage: $0 recipes/<paper>/run_<algo>.sh [hydra overrides...]" >&2; exit 2; }
SCRIPT=$1
shift
[[ -f "$SCRIPT" ]] || _knob_die "no run script $SCRIPT"
RECIPE_CONFIG=$(cd "$(dirname "$SCRIPT")" && pwd)/config
[[ "$RECIPE_CONFIG" == "$REPO"/* ]] ||
  _knob_die "run from the repository root (the job's working_dir); $SCRIPT is outside $REPO"

if [[ "$PROFILE" == local ]]; then
  # the run script starts the local services, then hands its final command to `submit.sh --job`
  export RAY_ADDRESS RUNTIME_ENV SUBMISSION_ID NO_WAIT JUDGE_KEY_VARS RAY PYTHON
  DRY_RUN=$DRY_RUN PROFILE=local RECIPE_LAUNCHER="bash $THIS --job --" exec bash "$SCRIPT" "$@"
fi

# the recipe's exact command, with its config dir relative to the job's working directory
REL_CONFIG=${RECIPE_CONFIG#"$REPO"/}
CMD=$(DRY_RUN=1 PROFILE=gpu CONFIG_PATH="__JOB_WORKDIR__/$REL_CONFIG" bash "$SCRIPT" "$@" "+ray_kwargs.ray_init.address=auto")
eval "CMD_ARGS=($CMD)"
submit_job "${CMD_ARGS[@]}"
