#!/usr/bin/env bash
# HiPRAG GRPO setting: GRPO (group 5), hierarchical process reward (recipes/hiprag/config/hiprag_grpo.yaml).
#   bash recipes/hiprag/run_grpo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-3B-Instruct bash recipes/hiprag/run_grpo.sh
#   DRY_RUN=1 bash recipes/hiprag/run_grpo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/hiprag/run_grpo.sh    # same YAML on this CPU box (tiny model, 2 steps)
# Every knob (env var) but MODEL and the shared body: recipes/hiprag/recipe.sh.
set -euo pipefail
ALGO=grpo
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}                     # HiPRAG §4.3: Qwen2.5-3B/7B-Instruct (also Llama-3.2-3B)
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/recipe.sh"
