#!/usr/bin/env bash
# After examples/your_character.sh: preference pairs from the RoCIT adapter, DPO on them, evaluation before and
# after, a chat turn. Every step is one `rolellm` command:
#   the adapter answers the folder's questions twice -> the judge ranks its answers and the references (both orders)
#   -> chosen/rejected pairs in the release folder -> rolellm train --stage dpo -> rolellm evaluate before and after
#   DPO (ROUGE-L, the judge's rubric scores, the judge's win rate of DPO over RoCIT) -> rolellm chat.
# The walk-through is docs/preference.md.
#
#   bash examples/your_character.sh WORK && bash examples/preference_your_character.sh WORK
#
# Offline by default, like your_character.sh: the judge is examples/stand_in_llm.py (it prefers the answer with more
# real words, so the references beat a tiny random model, and scores the rubric by real words too). With
# OPENAI_BASE_URL (and JUDGE_MODEL) the judge is that endpoint. The run takes about a minute on a CPU.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CARD="${CARD:-$HERE/data/your-character/juniper.card.json}"
ROLE="${ROLE:-Juniper}"
WORK="${1:?give the WORK folder of examples/your_character.sh}"
OUT="$WORK/data"          # the release folder your_character.sh wrote; the pairs are added to it
ADAPTER="$WORK/lora"      # the RoCIT adapter it trained
DPO="$WORK/dpo"           # the DPO adapter
mkdir -p "$WORK"

step() { printf '\n=== %s\n' "$*"; }
run() { printf '+ %s\n' "$*"; "$@"; }
nonempty() {
    for path in "$@"; do [ -s "$path" ] || { echo "missing or empty: $path" >&2; exit 1; }; done
}
nonempty "$ADAPTER/adapter_config.json" "$OUT/rolebench-eng/instruction-generalization/general/train.jsonl"

step "0/4 The judge endpoint"
if [ -n "${OPENAI_BASE_URL:-}" ]; then
    BASE_URL="$OPENAI_BASE_URL"
    JUDGE_MODEL="${JUDGE_MODEL:-gpt-4o-mini}"
    echo "using $BASE_URL ($JUDGE_MODEL)"
else
    rm -f "$WORK/judge-url"
    python "$HERE/stand_in_llm.py" --url_file "$WORK/judge-url" >"$WORK/judge.log" 2>&1 &
    STAND_IN=$!
    trap 'kill "$STAND_IN" 2>/dev/null || true' EXIT
    for _ in $(seq 600); do
        [ -s "$WORK/judge-url" ] && break
        kill -0 "$STAND_IN" 2>/dev/null || { cat "$WORK/judge.log" >&2; exit 1; }
        sleep 0.1
    done
    nonempty "$WORK/judge-url"
    BASE_URL="$(cat "$WORK/judge-url")"
    JUDGE_MODEL="stand-in"
    echo "using the offline stand-in judge at $BASE_URL"
fi

step "1/4 Preference pairs: the adapter's answers and the references, ranked by the judge in both orders"
run rolellm generate preferences --model "$ADAPTER" --data_dir "$OUT" --dataset_configs en-instruction \
    --profiles "$CARD" --lang en --num_samples 2 --temperature 1.0 --max_tokens 16 --add_references \
    --judge pairwise --judge_model "$JUDGE_MODEL" --judge_base_url "$BASE_URL" --test_fraction 0.3 \
    --output_dir "$OUT" --progress false
nonempty "$OUT/rolebench-eng/instruction-generalization/preference/train.jsonl"

step "2/4 DPO from the RoCIT adapter on the pairs"
run rolellm train --stage dpo --config "$HERE/recipes/dpo-tiny-cpu.yaml" --model_name_or_path "$ADAPTER" \
    --data_dir "$OUT" --profiles "$CARD" --max_steps 4 --learning_rate 1e-3 --logging_steps 1 --output_dir "$DPO"
nonempty "$DPO/adapter_config.json" "$DPO/adapter_model.safetensors" "$DPO/README.md"

step "3/4 Evaluate before (RoCIT) and after DPO: ROUGE-L, the judge's rubric scores, and DPO's win rate over RoCIT"
# before: the RoCIT adapter's answers (those your_character.sh generated are reused) scored by the judge on the rubric
run rolellm evaluate --model "$ADAPTER" --dataset_name en-instruction --data_dir "$OUT" \
    --profiles "$CARD" --max_new_tokens 16 --output_dir "$WORK/eval" --overwrite_output_dir \
    --judge_model "$JUDGE_MODEL" --judge_base_url "$BASE_URL" --rubric rubric --baseline none
# after: the DPO adapter's answers on the rubric, and judged against the RoCIT adapter's in both orders (--baseline)
run rolellm evaluate --model "$DPO" --dataset_name en-instruction --data_dir "$OUT" \
    --profiles "$CARD" --max_new_tokens 16 --output_dir "$WORK/eval-dpo" --overwrite_output_dir \
    --judge_model "$JUDGE_MODEL" --judge_base_url "$BASE_URL" --rubric rubric --baseline "$WORK/eval"
nonempty "$WORK/eval/results.json" "$WORK/eval-dpo/results.json" "$WORK/eval/scores.json" "$WORK/eval-dpo/scores.json"
python - "$WORK" <<'PY'
import json, sys
def number(value, digits):
    return "n/a" if value is None else f"{value:.{digits}f}"
print(f"{'':16} {'CUS':>7} {'SPE':>7} {'rubric':>7}  rubric per dimension (1 to 5)")
for name, folder in (("before (RoCIT)", "eval"), ("after (DPO)", "eval-dpo")):
    results = json.load(open(f"{sys.argv[1]}/{folder}/results.json"))
    metrics, rubric = results["metrics"], results["rubric"]
    dimensions = ", ".join(f"{d} {number(m, 2)}" for d, m in rubric["per_dimension"].items())
    print(f"{name:16} {number(metrics['CUS'], 4):>7} {number(metrics['SPE'], 4):>7} {number(metrics['rubric'], 2):>7}  "
          f"{dimensions}; {rubric['n']} of {rubric['asked']} answers scored, {rubric['failed']} verdicts failed")
judged = results["win_rate"]
print(f"win rate of DPO over RoCIT: {number(judged['win_rate'], 2)} (wins {judged['wins']}, ties {judged['ties']}, "
      f"losses {judged['losses']}, failed {judged['failed']})")
PY

step "4/4 A chat turn with $ROLE after DPO"
printf 'Who are you?\n' | rolellm chat --model "$DPO" --role "$ROLE" --max_new_tokens 24 --temperature 0 >"$WORK/chat-dpo.txt"
nonempty "$WORK/chat-dpo.txt"
cat "$WORK/chat-dpo.txt"

printf '\nDone. Pairs: %s  DPO adapter: %s  results: %s (before), %s (after)\n' \
    "$OUT/rolebench-eng/instruction-generalization/preference" "$DPO" "$WORK/eval/results.json" "$WORK/eval-dpo/results.json"
