#!/usr/bin/env bash
# AutoSearch, PPO-GAE with per-step rewards: recipes/autosearch/config/autosearch_ppo.yaml.
#   bash recipes/autosearch/run_ppo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B bash recipes/autosearch/run_ppo.sh
#   DRY_RUN=1 bash recipes/autosearch/run_ppo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/autosearch/run_ppo.sh    # same YAML on this CPU box (tiny model, 2 steps)
# Every knob (env var) but MODEL and the shared body: recipes/autosearch/recipe.sh.
set -euo pipefail
ALGO=ppo
MODEL=${MODEL:-Qwen/Qwen2.5-3B}                              # AutoSearch §4: Qwen2.5-3B-Base and 7B-Base
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/recipe.sh"
