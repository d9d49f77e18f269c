#!/usr/bin/env bash
# Warm start (SFT on teacher demonstrations) with verl's SFT trainer: recipes/warmstart/config/sft.yaml.
#   DEMOS=outputs/demos/hiprag/demos.jsonl bash recipes/warmstart/run_sft.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B-Instruct N_GPUS=8 DEMOS=... bash recipes/warmstart/run_sft.sh
#   DRY_RUN=1 ... bash recipes/warmstart/run_sft.sh        # print the exact command, start nothing
# On a CPU-only machine use `agentrag-verl sft-local` (same dataset class and trainer, CPU settings).
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------------------------
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}        # the policy the RL recipe will train (3B / 7B as the papers)
DEMOS=${DEMOS:?set DEMOS to the demos.jsonl written by agentrag-verl demos generate (comma-separate several)}
N_GPUS=${N_GPUS:-8}                             # GPUs per node
NNODES=${NNODES:-1}
EPOCHS=${EPOCHS:-2}
LR=${LR:-1e-5}
EXPERIMENT=${EXPERIMENT:-sft-$(basename "$MODEL")}
CKPT_DIR=${CKPT_DIR:-checkpoints/agentrag_warmstart/$EXPERIMENT}
PYTHON=${PYTHON:-python3}
DRY_RUN=${DRY_RUN:-0}
# --------------------------------------------------------------------------------------------------------------------

case "$DRY_RUN" in 0 | "" | false | no) DRY_RUN=0 ;; 1 | true | yes) DRY_RUN=1 ;;
  *) echo "$(basename "$0"): DRY_RUN=$DRY_RUN; use 1/true/yes or 0/false/no" >&2; exit 2 ;; esac
[[ "$N_GPUS" =~ ^[1-9][0-9]*$ ]] || { echo "$(basename "$0"): N_GPUS=$N_GPUS must be a positive integer" >&2; exit 2; }

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cmd=(
  torchrun --nnodes="$NNODES" --nproc_per_node="$N_GPUS" -m verl.trainer.sft_trainer
  --config-path="$RECIPE_DIR/config" --config-name=sft
  "data.train_files=[$DEMOS]"
  "model.path=$MODEL"
  "trainer.n_gpus_per_node=$N_GPUS"
  "trainer.nnodes=$NNODES"
  "trainer.total_epochs=$EPOCHS"
  "optim.lr=$LR"
  "trainer.experiment_name=$EXPERIMENT"
  "trainer.default_local_dir=$CKPT_DIR"
  "$@"
)
if [[ "$DRY_RUN" == 1 ]]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
