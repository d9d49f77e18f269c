#!/usr/bin/env bash
# ReasonRAG (SFT) baseline of Table 3: SFT on the chosen steps of RAG-ProGuide (sft.yaml).
# Same knobs as run_dpo.sh (MODEL, PAIRS, OUTPUT_DIR, N_GPUS, ACCELERATE_CONFIG, DRY_RUN).
set -euo pipefail
MODE=sft exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/run_dpo.sh" "$@"
