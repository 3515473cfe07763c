#!/usr/bin/env bash
# The main job on an embedded default: install, build, then train a small llama-family model on
# the King James Bible (Debian's bible-kjv) and generate from it. Every step is syslm:
#   tokenizer train (byte-level BPE) -> data prepare (token shards, 2% held out) ->
#   train (live progress: step, loss, tokens/s, MFU, ETA; held-out loss) -> perplexity on three
#   whole books kept out of training -> generate -> quantize (Q8_0) -> generate again.
# About 5-9 minutes of training on 2 cores (5 on a Xeon with AMX). Everything lands in runs/kjv-demo/; the model is
# runs/kjv-demo/model.gguf (F32 GGUF: llama.cpp loads it too).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --no-python
scripts/build.sh

OUT=runs/kjv-demo
STEPS=${STEPS:-2000}
mkdir -p "$OUT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Whole books held out of training (narrative, wisdom, epistle), for perplexity on text the model
# never saw any verse of.
HELD_OUT='^(Ruth|Eccl|Jas)[0-9]'
step "the King James Bible (bible-kjv) without Ruth, Ecclesiastes and James: one verse per line"
bible -f "Genesis1:1-Revelation22:21" > "$OUT/kjv-refs.txt"
grep -vE "$HELD_OUT" "$OUT/kjv-refs.txt" | sed -E 's/^[^ ]+ //' > "$OUT/kjv.txt"
grep -E "$HELD_OUT" "$OUT/kjv-refs.txt" | sed -E 's/^[^ ]+ //' > "$OUT/heldout-books.txt"
rm "$OUT/kjv-refs.txt"
wc -c "$OUT/kjv.txt" "$OUT/heldout-books.txt"

step "syslm tokenizer train: byte-level BPE, 4096 tokens"
build/syslm tokenizer train -f "$OUT/kjv.txt" --vocab 4096 -o "$OUT/tokenizer.gguf"

step "syslm data prepare: token shards, 2% of the text held out for validation"
build/syslm data prepare -f "$OUT/kjv.txt" --tokenizer "$OUT/tokenizer.gguf" -o "$OUT/data" \
  --val 0.02 --docs line

step "syslm train: llama (4 layers, dim 256, 8 heads), $STEPS steps of 8 x 128 tokens, AdamW"
# --precision auto: bf16 where this CPU's bf16 training GEMM measures clearly faster (AMX).
rm -rf "$OUT/checkpoint" "$OUT/metrics.jsonl"
build/syslm train --arch llama --tokenizer "$OUT/tokenizer.gguf" --layers 4 --dim 256 --heads 8 \
  --ctx 256 --data "$OUT/data" --batch 8 --seq 128 --steps "$STEPS" --lr 2e-3 --min-lr 2e-4 \
  --warmup 50 --eval-every $((STEPS / 4)) --eval-batches 20 --checkpoint "$OUT/checkpoint" \
  --checkpoint-every 500 --metrics "$OUT/metrics.jsonl" --log-every 100 --precision auto \
  -o "$OUT/model.gguf"

step "syslm perplexity on the held-out books (Ruth, Ecclesiastes, James), 128-token chunks"
build/syslm perplexity -m "$OUT/model.gguf" -f "$OUT/heldout-books.txt" -c 128

step "syslm generate from the trained model"
build/syslm generate -m "$OUT/model.gguf" -p "In the beginning" -n 80 --seed 1 --temp 0.7

step "syslm quantize to Q8_0, generate again"
build/syslm quantize "$OUT/model.gguf" "$OUT/model-q8_0.gguf" Q8_0
build/syslm generate -m "$OUT/model-q8_0.gguf" -p "And the LORD said" -n 60 --seed 2 --temp 0.7

step "done: files in $OUT"
ls -l "$OUT"
