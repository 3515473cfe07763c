#!/bin/bash
# syslm's perplexity against llama.cpp's llama-perplexity on the same GGUF files: the check that
# llama.cpp loads what syslm writes (architectures, keys, tensors, tokenizer) and computes the
# same model. Each architecture is trained by syslm for 150 steps on the README's KJV data, then
# both tools score the held-out books with the same context (llama-perplexity's method).
#
#   LLAMA_PERPLEXITY=/path/to/llama-perplexity bench/interop/ppl_vs_llamacpp.sh [arch ...]
#
# llama.cpp is built beside the project, never by it. Needs runs/kjv-demo (scripts/quickstart.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
S=$root/build/syslm
L=${LLAMA_PERPLEXITY:?set LLAMA_PERPLEXITY to a llama-perplexity binary}
D=$root/runs/kjv-demo
out=${OUT:-$root/runs/interop}
mkdir -p "$out"
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(llama bloom mpt phi3 gemma2)
printf '| arch | syslm PPL | llama.cpp PPL |\n| --- | ---: | ---: |\n'
for a in "${archs[@]}"; do
  shape="--layers 4 --dim 128 --heads 4 --kv-heads 2"
  # llama.cpp's gemma2 knows only the released depths (26, 42, 46 layers).
  [ "$a" = gemma2 ] && shape="--window 32 --layers 26 --dim 64 --heads 2 --kv-heads 1"
  m=$out/$a.gguf
  [ -f "$m" ] || "$S" train --arch "$a" --tokenizer "$D/tokenizer.gguf" $shape --data "$D/data" \
      --batch 8 --seq 128 --steps 150 -o "$m" > "$out/$a.train.log" 2>&1
  s=$("$S" perplexity -m "$m" -f "$D/heldout-books.txt" -c 128 -t 2 2>&1 |
      grep -o "Final estimate: PPL = [0-9.]*" | grep -o "[0-9.]*$")
  l=$("$L" -m "$m" -f "$D/heldout-books.txt" -c 128 -b 128 -t 2 2>&1 |
      grep -o "Final estimate: PPL = [0-9.]*" | grep -o "[0-9.]*$" || echo "failed to load")
  printf '| %s | %s | %s |\n' "$a" "$s" "$l"
done
