#!/usr/bin/env bash
# The main job on an embedded default: install, build, then exercise the engine end to end on a
# small model. Until the trainer lands there is no trained model to ship, so the model here is
# RANDOM-INITIALISED (llama architecture, the real 32000-token Llama SentencePiece vocabulary
# from ../shared/data/vocab): its text is gibberish and its perplexity is near the vocabulary
# size. What it shows is the machinery: init -> info -> tokenize -> generate -> perplexity ->
# quantize -> perplexity again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --no-python
scripts/build.sh

OUT=runs/quickstart
VOCAB=../shared/data/vocab/ggml-vocab-llama-spm.gguf
mkdir -p "$OUT"
bible -f "Genesis1:1-Exodus40:38" > "$OUT/kjv-genesis-exodus.txt"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step "syslm init: random-initialised llama model, 4 layers, dim 256, GQA 8/4 heads (F32)"
build/syslm init --vocab "$VOCAB" --arch llama --layers 4 --dim 256 --heads 8 --kv-heads 4 \
  --ctx 1024 --seed 1 --name "syslm quickstart (random init)" -o "$OUT/random-llama-f32.gguf"
step "syslm info"
build/syslm info -m "$OUT/random-llama-f32.gguf" --no-tensors
step "syslm tokenize (llama SentencePiece vocabulary)"
build/syslm tokenize -m "$OUT/random-llama-f32.gguf" -p "In the beginning God created the heaven and the earth."
step "syslm generate (random weights: expect gibberish)"
build/syslm generate -m "$OUT/random-llama-f32.gguf" -p "In the beginning" -n 32 --seed 7
step "syslm perplexity on KJV Genesis-Exodus, 8 chunks of 256 tokens (F32)"
build/syslm perplexity -m "$OUT/random-llama-f32.gguf" -f "$OUT/kjv-genesis-exodus.txt" -c 256 --chunks 8
step "syslm quantize to Q4_0, then perplexity again"
build/syslm quantize "$OUT/random-llama-f32.gguf" "$OUT/random-llama-q4_0.gguf" Q4_0
build/syslm perplexity -m "$OUT/random-llama-q4_0.gguf" -f "$OUT/kjv-genesis-exodus.txt" -c 256 --chunks 8
step "done: files in $OUT"
ls -l "$OUT"
