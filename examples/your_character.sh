#!/usr/bin/env bash
# From a Character Card and a screenplay to a model you can chat with, every step one `rolellm` command:
#   profiles (card + screenplay) -> Context-Instruct + RoleGPT data in one release folder -> a LoRA
#   -> rolellm evaluate -> a merged export -> two chat turns.
# The walk-through is docs/your-character.md.
#
#   bash examples/your_character.sh [WORK_DIR]      # WORK_DIR defaults to a new temporary folder
#
# Offline by default: the data are generated against examples/stand_in_llm.py (canned answers, no key) and the
# model is a tiny random Llama built on the spot, so the whole run takes a couple of minutes on a CPU. To generate
# the data with a real LLM and fine-tune a real model (for four CPU steps: a full run is a GPU recipe, see the doc):
#   OPENAI_BASE_URL=http://localhost:8000/v1 LLM_MODEL=Qwen/Qwen2.5-7B-Instruct   # vLLM (or OpenAI + OPENAI_API_KEY)
#   BASE_MODEL=Qwen/Qwen2.5-0.5B-Instruct                                          # the model to fine-tune
# The embedded real model, SmolLM2-135M-Instruct (a GGUF file `make install` brings), in about a minute on a CPU:
#   BASE_MODEL=$(python -c 'from rolellm.clients.gguf import embedded_model_file; print(embedded_model_file())')
# Inputs can be swapped the same way: CARD=my_card.png SCREENPLAY=my_script.txt ROLE="My Role".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="$HERE/data/your-character"
CARD="${CARD:-$DATA/juniper.card.json}"
SCREENPLAY="${SCREENPLAY:-$DATA/the_weather_map.txt}"
INSTRUCTIONS="${INSTRUCTIONS:-$DATA/instructions.jsonl}"
ROLE="${ROLE:-Juniper}"
WORK="${1:-$(mktemp -d "${TMPDIR:-/tmp}/your-character.XXXXXX")}"
OUT="$WORK/data"          # the RoleBench release folder both generators add to
ADAPTER="$WORK/lora"      # the LoRA checkpoint
REPORT="$WORK/eval"       # rolellm evaluate's results
MERGED="$WORK/merged"     # the adapter merged into its base model
mkdir -p "$WORK"

step() { printf '\n=== %s\n' "$*"; }
run() { printf '+ %s\n' "$*"; "$@"; }
nonempty() {  # every path given is a non-empty file, or a folder with at least one file in it
    for path in "$@"; do
        if [ -d "$path" ]; then
            [ -n "$(find "$path" -type f -size +0 -print -quit)" ] || { echo "empty folder: $path" >&2; exit 1; }
        else
            [ -s "$path" ] || { echo "missing or empty: $path" >&2; exit 1; }
        fi
    done
}

step "0/6 The LLM endpoint that writes the data"
if [ -n "${OPENAI_BASE_URL:-}" ]; then
    BASE_URL="$OPENAI_BASE_URL"
    LLM_MODEL="${LLM_MODEL:-gpt-4o-mini}"
    echo "using $BASE_URL ($LLM_MODEL)"
else
    # the offline stand-in: a real chat-completions server on 127.0.0.1 with canned answers
    rm -f "$WORK/llm-url"
    python "$HERE/stand_in_llm.py" --url_file "$WORK/llm-url" >"$WORK/stand-in.log" 2>&1 &
    STAND_IN=$!
    trap 'kill "$STAND_IN" 2>/dev/null || true' EXIT
    for _ in $(seq 600); do  # up to a minute for it to start
        [ -s "$WORK/llm-url" ] && break
        kill -0 "$STAND_IN" 2>/dev/null || { cat "$WORK/stand-in.log" >&2; exit 1; }
        sleep 0.1
    done
    nonempty "$WORK/llm-url"
    BASE_URL="$(cat "$WORK/llm-url")"
    LLM_MODEL="stand-in"
    echo "using the offline stand-in at $BASE_URL"
fi
ENDPOINT=(--base_url "$BASE_URL" --model "$LLM_MODEL" --output_dir "$OUT")

step "1/6 Role-specific data: Context-Instruct questions and answers from the screenplay"
# --profiles is repeatable: the card gives the description, the screenplay (with --roles) the scenes
run rolellm generate context-instruct "${ENDPOINT[@]}" --profiles "$CARD" --profiles "$SCREENPLAY" --roles "$ROLE" \
    --num_questions 6 --test_fraction 0.3
nonempty "$OUT/rolebench-eng/instruction-generalization/role_specific" "$OUT/profiles-eng/desc.json"

step "2/6 General data: RoleGPT answers in the role's voice to general instructions"
# the card's personality, scenario, lorebook and example dialogue shape every prompt
run rolellm generate rolegpt "${ENDPOINT[@]}" --profiles "$CARD" --instructions "$INSTRUCTIONS" \
    --num_samples 2 --test_fraction 0.3
nonempty "$OUT/rolebench-eng/instruction-generalization/general"

step "3/6 A LoRA on the data (RoCIT), the card's profile in every system prompt"
if [ -z "${BASE_MODEL:-}" ]; then
    BASE_MODEL="$WORK/tiny-llama"  # a random two-layer Llama with a locally trained tokenizer: seconds to build
    [ -s "$BASE_MODEL/config.json" ] || run python -c "from rolellm.testing.models import build_tiny_llama; build_tiny_llama('$BASE_MODEL')"
fi
run rolellm train --config "$HERE/recipes/tiny-cpu.yaml" --model_name_or_path "$BASE_MODEL" --data_dir "$OUT" \
    --dataset_configs en-instruction --profiles "$CARD" --use_peft --lora_r 8 --lora_alpha 16 \
    --lora_target_modules q_proj v_proj --learning_rate 1e-3 --max_steps 4 --per_device_train_batch_size 4 \
    --max_length 1024 --logging_steps 1 --output_dir "$ADAPTER"
nonempty "$ADAPTER/adapter_config.json" "$ADAPTER/adapter_model.safetensors"

step "4/6 Evaluate the adapter on the folder's test rows (ROUGE-L: CUS, SPE)"
run rolellm evaluate --model "$ADAPTER" --dataset_name en-instruction --data_dir "$OUT" \
    --profiles "$CARD" --max_new_tokens 16 --output_dir "$REPORT" --overwrite_output_dir
nonempty "$REPORT/results.json"

step "5/6 Merge the adapter into a full model that loads with transformers alone"
rm -rf "$MERGED"
run rolellm export "$ADAPTER" --merge --output_dir "$MERGED"
nonempty "$MERGED/config.json" "$MERGED/model.safetensors"

step "6/6 Two chat turns with $ROLE (one message per stdin line, one answer per stdout line)"
printf '+ printf ... | rolellm chat --model %s --role %s\n' "$MERGED" "$ROLE"
printf 'Who are you?\nWill the storm reach the fair?\n' \
    | rolellm chat --model "$MERGED" --role "$ROLE" --max_new_tokens 24 --temperature 0 >"$WORK/chat.txt"
nonempty "$WORK/chat.txt"
cat "$WORK/chat.txt"

printf '\nDone. Data: %s  adapter: %s  results: %s  merged model: %s\n' "$OUT" "$ADAPTER" "$REPORT/results.json" "$MERGED"
