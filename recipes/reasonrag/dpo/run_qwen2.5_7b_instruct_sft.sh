#!/usr/bin/env bash
# ReasonRAG (SFT) baseline of Table 3: SFT of Qwen2.5-7B-Instruct on the chosen steps of RAG-ProGuide (sft.yaml).
# Same knobs as run_qwen2.5_7b_instruct_dpo.sh (MODEL_PATH, PAIRS, OUTPUT_DIR, NUM_GPUS, ACCELERATE_CONFIG, DRY_RUN).
set -euo pipefail
MODE=sft exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/run_qwen2.5_7b_instruct_dpo.sh" "$@"
