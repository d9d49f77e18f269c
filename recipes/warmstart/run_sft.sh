#!/usr/bin/env bash
# Warm start (SFT on teacher demonstrations) with verl's SFT trainer: recipes/warmstart/config/sft.yaml.
#   DEMOS=outputs/demos/hiprag/demos.jsonl bash recipes/warmstart/run_sft.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B-Instruct N_GPUS=8 DEMOS=... bash recipes/warmstart/run_sft.sh
#   DRY_RUN=1 ... bash recipes/warmstart/run_sft.sh        # print the exact command, start nothing
#   NNODES=2 MASTER_ADDR=10.0.0.5 DEMOS=... bash recipes/warmstart/run_sft.sh   # the same command on every node
# On a CPU-only machine use `agentrag-verl sft-local` (same dataset class and trainer, CPU settings).
# Resuming a run stopped after an epoch: remove $CKPT_DIR/global_step_N/data_*.pt first, or verl 0.9.1 trains no batch
# of the next epoch (docs/gpu.md, section 4).
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------------------------
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}        # the policy the RL recipe will train (3B / 7B as the papers)
DEMOS=${DEMOS:?set DEMOS to the demos.jsonl written by agentrag-verl demos generate (comma-separate several)}
N_GPUS=${N_GPUS:-8}                             # GPUs per node
NNODES=${NNODES:-1}
MASTER_ADDR=${MASTER_ADDR:-}                    # NNODES > 1: an address of the first node that every node reaches
MASTER_PORT=${MASTER_PORT:-29500}               # NNODES > 1: torchrun's rendezvous port on MASTER_ADDR
EPOCHS=${EPOCHS:-2}
LR=${LR:-1e-5}
EXPERIMENT=${EXPERIMENT:-sft-$(basename "$MODEL")}
CKPT_DIR=${CKPT_DIR:-checkpoints/agentrag_warmstart/$EXPERIMENT}
# DRY_RUN=1|true|yes: see recipes/common/knobs.sh
# --------------------------------------------------------------------------------------------------------------------

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../common/knobs.sh"
knob_dry_run
knob_positive_int N_GPUS NNODES MASTER_PORT
launch=(torchrun --nnodes="$NNODES" --nproc_per_node="$N_GPUS")
if ((NNODES > 1)); then
  # every node runs this same command; torchrun's c10d rendezvous on MASTER_ADDR assigns the node ranks
  [[ -n "$MASTER_ADDR" ]] || _knob_die "NNODES=$NNODES: set MASTER_ADDR to an address of the first node that every node reaches, and run this script on every node"
  knob_reachable_url MASTER_ADDR
  launch+=(--rdzv-backend=c10d "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT" "--rdzv-id=$EXPERIMENT")
fi
cmd=(
  "${launch[@]}" -m verl.trainer.sft_trainer
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
  printf '\n'
  exit 0
fi
exec "${cmd[@]}"
