#!/usr/bin/env bash
# AutoSearch, GRPO on the summed step rewards: recipes/autosearch/config/autosearch_grpo.yaml.
#   bash recipes/autosearch/run_grpo.sh [hydra overrides...]
#   MODEL=Qwen/Qwen2.5-7B bash recipes/autosearch/run_grpo.sh
#   DRY_RUN=1 bash recipes/autosearch/run_grpo.sh        # print the exact command, start nothing
#   PROFILE=local bash recipes/autosearch/run_grpo.sh    # same YAML on this CPU box (tiny model, 2 steps)
# Every knob (env var) but MODEL and the shared body: recipes/autosearch/recipe.sh.
set -euo pipefail
ALGO=grpo
MODEL=${MODEL:-Qwen/Qwen2.5-3B}                              # AutoSearch §4: Qwen2.5-3B-Base and 7B-Base
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/recipe.sh"
