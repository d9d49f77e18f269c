#!/usr/bin/env bash
# ReasonRAG step-level DPO (Eq. 3) of Qwen2.5-7B-Instruct on RAG-ProGuide with TRL's DPOTrainer (dpo.yaml).
#   bash recipes/reasonrag/dpo/run_qwen2.5_7b_instruct_dpo.sh [--key value ...]   # DPOConfig overrides
#   DRY_RUN=1 bash recipes/reasonrag/dpo/run_qwen2.5_7b_instruct_dpo.sh           # print the command, run nothing
#   MODE=sft bash recipes/reasonrag/dpo/run_qwen2.5_7b_instruct_dpo.sh            # the SFT-on-chosen baseline
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------------------------
MODE=${MODE:-dpo}                                            # dpo | sft (Table 3 "ReasonRAG (SFT)")
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}           # ReasonRAG §3.1: Qwen2.5-7B-Instruct backbone
PAIRS=${PAIRS:-outputs/reasonrag/proguide/pairs.jsonl}       # agentrag-verl reasonrag generate --out outputs/reasonrag/proguide
OUTPUT_DIR=${OUTPUT_DIR:-outputs/reasonrag/$MODE}
NUM_GPUS=${NUM_GPUS:-8}                                      # 1 = plain python, no accelerate
# Multi-GPU: TRL's shipped accelerate configs (fsdp2 needs nothing else; zero3 = the authors' DeepSpeed ZeRO-3,
# pip install deepspeed). A path to your own accelerate config works too.
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-fsdp2}
PYTHON=${PYTHON:-python3}
# DRY_RUN=1|true|yes prints the command and runs nothing
# --------------------------------------------------------------------------------------------------------------------

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$RECIPE_DIR/../../common/knobs.sh"
knob_dry_run
knob_choice MODE dpo sft
knob_positive_int NUM_GPUS
ARGS=(-m agentrag_verl.methods.reasonrag.train "$MODE" --config "$RECIPE_DIR/$MODE.yaml"
  --model_name_or_path "$MODEL_PATH" --pairs "$PAIRS" --output_dir "$OUTPUT_DIR" "$@")

if [[ "$NUM_GPUS" -gt 1 ]]; then
  if [[ "$ACCELERATE_CONFIG" != */* && "$ACCELERATE_CONFIG" != *.yaml ]]; then
    TRL_DIR=$("$PYTHON" -c 'import os, trl; print(os.path.dirname(trl.__file__))' 2>/dev/null) \
      || { echo "trl is not installed: pip install \"agentrag-verl[dpo]\"" >&2; exit 2; }
    ACCELERATE_CONFIG="$TRL_DIR/accelerate_configs/$ACCELERATE_CONFIG.yaml"
  fi
  CMD=(accelerate launch --config_file "$ACCELERATE_CONFIG" --num_processes "$NUM_GPUS" "${ARGS[@]}")
else
  CMD=("$PYTHON" "${ARGS[@]}")
fi

if [[ "$DRY_RUN" == 1 ]]; then
  printf '%q ' "${CMD[@]}"
  echo
  exit 0
fi
exec "${CMD[@]}"
