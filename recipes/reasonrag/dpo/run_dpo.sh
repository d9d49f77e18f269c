#!/usr/bin/env bash
# ReasonRAG step-level DPO (Eq. 3) on RAG-ProGuide with TRL's DPOTrainer (dpo.yaml).
#   bash recipes/reasonrag/dpo/run_dpo.sh [--key value ...]   # DPOConfig overrides
#   MODEL=Qwen/Qwen2.5-3B-Instruct N_GPUS=4 bash recipes/reasonrag/dpo/run_dpo.sh
#   DRY_RUN=1 bash recipes/reasonrag/dpo/run_dpo.sh           # print the command, run nothing
#   MODE=sft bash recipes/reasonrag/dpo/run_dpo.sh            # the SFT-on-chosen baseline (run_sft.sh)
#   SCORE_HELDOUT=0 bash recipes/reasonrag/dpo/run_dpo.sh     # DPO without scoring each held-out pair after it
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------------------------
MODE=${MODE:-dpo}                                            # dpo | sft (Table 3 "ReasonRAG (SFT)")
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}                     # ReasonRAG §3.1: Qwen2.5-7B-Instruct backbone
PAIRS=${PAIRS:-outputs/reasonrag/proguide/pairs.jsonl}       # agentrag-verl reasonrag generate --out outputs/reasonrag/proguide
OUTPUT_DIR=${OUTPUT_DIR:-outputs/reasonrag/$MODE}
N_GPUS=${N_GPUS:-8}                                          # GPUs of this machine; 1 = plain python, no accelerate
# Multi-GPU: TRL's shipped accelerate configs (fsdp2 needs nothing else; zero3 = the authors' DeepSpeed ZeRO-3,
# pip install deepspeed). A path to your own accelerate config works too.
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-fsdp2}
PYTHON=${PYTHON:-python3}
# MODE=dpo, after training: score every held-out pair (agentrag_verl/methods/reasonrag/heldout.py, one process;
# heldout_margins.json in OUTPUT_DIR: each pair's margin, their mean, SE and share ranked right). 0 skips it.
SCORE_HELDOUT=${SCORE_HELDOUT:-1}
# DRY_RUN=1|true|yes prints the command and runs nothing
# --------------------------------------------------------------------------------------------------------------------

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../../common/knobs.sh"
knob_dry_run
knob_renamed MODEL_PATH MODEL NUM_GPUS N_GPUS
knob_choice MODE dpo sft
knob_choice SCORE_HELDOUT 1 0
knob_positive_int N_GPUS
OPTIONS=(--config "$RECIPE_DIR/$MODE.yaml" --model_name_or_path "$MODEL" --pairs "$PAIRS" --output_dir "$OUTPUT_DIR"
  "$@")
ARGS=(-m agentrag_verl.methods.reasonrag.train "$MODE" "${OPTIONS[@]}")
SCORE=()
if [[ "$MODE" == dpo && "$SCORE_HELDOUT" == 1 ]]; then
  SCORE=("$PYTHON" -m agentrag_verl.methods.reasonrag.heldout "${OPTIONS[@]}")
fi

if [[ "$N_GPUS" -gt 1 ]]; then
  if [[ "$ACCELERATE_CONFIG" != */* && "$ACCELERATE_CONFIG" != *.yaml ]]; then
    TRL_DIR=$("$PYTHON" -c 'import os, trl; print(os.path.dirname(trl.__file__))' 2>/dev/null) \
      || { echo "trl is not installed: pip install \"agentrag-verl[dpo]\"" >&2; exit 2; }
    ACCELERATE_CONFIG="$TRL_DIR/accelerate_configs/$ACCELERATE_CONFIG.yaml"
  fi
  CMD=(accelerate launch --config_file "$ACCELERATE_CONFIG" --num_processes "$N_GPUS" "${ARGS[@]}")
else
  CMD=("$PYTHON" "${ARGS[@]}")
fi

if [[ "$DRY_RUN" == 1 ]]; then
  printf '%q ' "${CMD[@]}"
  echo
  if [[ ${#SCORE[@]} -gt 0 ]]; then
    printf '%q ' "${SCORE[@]}"
    echo
  fi
  exit 0
fi
if [[ ${#SCORE[@]} -eq 0 ]]; then
  exec "${CMD[@]}"
fi
"${CMD[@]}"
exec "${SCORE[@]}"
