#!/usr/bin/env bash
# HiPRAG main setting: PPO-GAE, hierarchical process reward (recipes/hiprag/config/hiprag_ppo.yaml).
#   bash recipes/hiprag/run_ppo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B-Instruct bash recipes/hiprag/run_ppo.sh
#   DRY_RUN=1 bash recipes/hiprag/run_ppo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/hiprag/run_ppo.sh    # same YAML on this CPU box (tiny model, 2 steps)
# Every knob (env var) but MODEL and the shared body: recipes/hiprag/recipe.sh.
set -euo pipefail
ALGO=ppo
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}                     # HiPRAG §4.3: Qwen2.5-3B/7B-Instruct (also Llama-3.2-3B)
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/recipe.sh"
