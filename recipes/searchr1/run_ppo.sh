#!/usr/bin/env bash
# Search-R1 baseline (v0.3 outcome + format reward), PPO-GAE: recipes/searchr1/config/searchr1_ppo.yaml.
#   bash recipes/searchr1/run_ppo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B bash recipes/searchr1/run_ppo.sh
#   DRY_RUN=1 bash recipes/searchr1/run_ppo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/searchr1/run_ppo.sh    # same YAML on this CPU box (tiny model, 2 steps)
# Every knob (env var) but MODEL and the shared body: recipes/searchr1/recipe.sh.
set -euo pipefail
ALGO=ppo
MODEL=${MODEL:-Qwen/Qwen2.5-3B}                              # Search-R1 trains base and instruct 3B / 7B models
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/recipe.sh"
