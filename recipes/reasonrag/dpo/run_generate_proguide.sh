#!/usr/bin/env bash
# RAG-ProGuide generation (ReasonRAG §2.2): MCTS + SPRE over training questions with a policy behind any
# OpenAI-compatible endpoint (the paper: GPT-4o) and our BGE top-3 retriever. Resumable: run it again after a stop.
#   bash recipes/reasonrag/dpo/run_generate_proguide.sh [extra generate flags]
#   DRY_RUN=1 bash recipes/reasonrag/dpo/run_generate_proguide.sh        # print the command, run nothing
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------------------------
# Paper §2.2.3: 3,000 sampled training questions each from PopQA, HotpotQA and 2WikiMultihopQA (FlashRAG layout).
DATA=${DATA:-"data/flashrag/popqa/train.jsonl data/flashrag/hotpotqa/train.jsonl data/flashrag/2wikimultihopqa/train.jsonl"}
SOURCES=${SOURCES:-"popqa hotpotqa 2wikimultihopqa"}         # one name per DATA file (Table 1 rows)
OUT=${OUT:-outputs/reasonrag/proguide}
POLICY_URL=${POLICY_URL:-https://api.openai.com/v1}          # vLLM: http://HOST:8000/v1
POLICY_MODEL=${POLICY_MODEL:-gpt-4o-2024-05-13}              # authors' data_generation.py
POLICY_API_KEY_ENV=${POLICY_API_KEY_ENV:-OPENAI_API_KEY}     # NAME of the env var with the key; none = no key
RETRIEVER_URL=${RETRIEVER_URL:-http://127.0.0.1:8000/retrieve}   # python -m retriever_server serve (BGE index)
VALUE=${VALUE:-spre}                                         # spre (Eq. 1) | process_eval (Eq. 6, needs a judge)
JUDGE_URL=${JUDGE_URL:-}                                     # process_eval only
JUDGE_MODEL=${JUDGE_MODEL:-}
CONCURRENCY=${CONCURRENCY:-16}                               # questions at once
AGENTRAG=${AGENTRAG:-agentrag-verl}
# DRY_RUN=1|true|yes prints the command and runs nothing
# --------------------------------------------------------------------------------------------------------------------

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../common/knobs.sh"
knob_dry_run
knob_choice VALUE spre process_eval
knob_positive_int CONCURRENCY
if [[ "$VALUE" == process_eval && ( -z "$JUDGE_URL" || -z "$JUDGE_MODEL" ) ]]; then
  _knob_die "VALUE=process_eval scores steps with a judge: set JUDGE_URL and JUDGE_MODEL"
fi

read -r -a DATA_ARR <<<"$DATA"
read -r -a SOURCE_ARR <<<"$SOURCES"
CMD=("$AGENTRAG" reasonrag generate --data "${DATA_ARR[@]}" --source "${SOURCE_ARR[@]}" --out "$OUT"
  --policy-url "$POLICY_URL" --policy-model "$POLICY_MODEL" --policy-api-key-env "$POLICY_API_KEY_ENV"
  --retriever-url "$RETRIEVER_URL" --topk 3 --value "$VALUE" --concurrency "$CONCURRENCY")
if [[ -n "$JUDGE_URL" ]]; then
  CMD+=(--judge-url "$JUDGE_URL" --judge-model "$JUDGE_MODEL" --judge-api-key-env "$POLICY_API_KEY_ENV")
fi
CMD+=("$@")

if [[ "$DRY_RUN" == 1 ]]; then
  printf '%q ' "${CMD[@]}"
  echo
  exit 0
fi
exec "${CMD[@]}"
