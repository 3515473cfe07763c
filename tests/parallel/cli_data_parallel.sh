#!/usr/bin/env bash
# `mpirun -np 2 syslm train` against one process with the doubled batch, through the CLI: the
# same final loss (the weights are checked in data_parallel_test.cpp), one output file written
# by rank 0, --dp that disagrees with the started ranks refused with a clear message, and a
# checkpoint written by 2 ranks resumed by one process reaching the uninterrupted run's loss;
# compressed gradients and ZeRO train with and without tensor parallelism, and a ZeRO-2
# checkpoint of dp 2 x tp 2 resumes on one process.
set -euo pipefail
syslm=$1 mpiexec=$2 vocab=$3 tmp=$4
mkdir -p "$tmp"
check="python3 $(dirname "$0")/loss_checks.py"
V=32000  # the vocabulary's size: its softmax denominator is the longest sum (loss_checks.py)
common=(train --arch llama --tokenizer "$vocab" --layers 2 --dim 64 --heads 4 --ffn 96 --ctx 64
        --synthetic-data --seq 32 --steps 8 --threads 1 --json)
one=$("$syslm" "${common[@]}" --batch 6 --out "$tmp/dp1.gguf" 2>/dev/null | tail -1)
two=$("$mpiexec" -np 2 --oversubscribe "$syslm" "${common[@]}" --batch 3 --dp 2 \
      --out "$tmp/dp2.gguf" 2>/dev/null | tail -1)
$check same 8 $V "$one" "$two" "2 ranks against one process"
test -s "$tmp/dp2.gguf"

# Tensor parallel (2 ranks, whole batch each) and dp 2 x tp 2: the one process's loss again, and
# the gathered model written whole (same tensors as the one process's file).
tp=$("$mpiexec" -np 2 --oversubscribe "$syslm" "${common[@]}" --batch 6 --tp 2 \
     --out "$tmp/tp2.gguf" 2>/dev/null | tail -1)
dptp=$("$mpiexec" -np 4 --oversubscribe "$syslm" "${common[@]}" --batch 3 --tp 2 \
       2>/dev/null | tail -1)
$check same 8 $V "$one" "$tp" "tp 2 against one process"
$check same 8 $V "$one" "$dptp" "dp 2 x tp 2 against one process"
cmp <(stat -c %s "$tmp/dp1.gguf") <(stat -c %s "$tmp/tp2.gguf")

# Pipeline: 2 stages x 2 micro-batches of 3 (both schedules) = one process with --accum 2.
acc=$("$syslm" "${common[@]}" --batch 3 --accum 2 --out "$tmp/acc.gguf" 2>/dev/null | tail -1)
for schedule in gpipe 1f1b; do
  pp=$("$mpiexec" -np 2 --oversubscribe "$syslm" "${common[@]}" --batch 3 --pp 2 \
       --micro-batches 2 --schedule "$schedule" --out "$tmp/pp2.gguf" 2>/dev/null | tail -1)
  $check same 8 $V "$acc" "$pp" "pp 2 ($schedule) against one process"
  cmp <(stat -c %s "$tmp/acc.gguf") <(stat -c %s "$tmp/pp2.gguf")
done

# 3D: dp 2 x tp 2 x pp 2 on 8 ranks = one process with the doubled batch, accumulated twice; the
# gathered model is whole.
acc6=$("$syslm" "${common[@]}" --batch 6 --accum 2 --out "$tmp/acc6.gguf" 2>/dev/null | tail -1)
three=$("$mpiexec" -np 8 --oversubscribe "$syslm" "${common[@]}" --batch 3 --dp 2 --tp 2 --pp 2 \
        --micro-batches 2 --out "$tmp/3d.gguf" 2>/dev/null | tail -1)
$check same 8 $V "$acc6" "$three" "dp 2 x tp 2 x pp 2 against one process"
cmp <(stat -c %s "$tmp/acc6.gguf") <(stat -c %s "$tmp/3d.gguf")
# Compressed gradients under ZeRO-2 (the issue's `--dp N --zero 2 --grad-compress int8`): trains
# near the exact run, reports the compression and the sharded optimizer state, writes the model.
# Random tokens teach nothing (the loss stays at ln V), so these runs memorise one fixed batch of
# 6 sequences, where the exact run makes progress that the compressed one must keep.
ids=$(python3 -c "import random; r = random.Random(7); print(','.join(str(r.randrange(3, 32000)) for _ in range(6 * 33)))")
fixed=("${common[@]/--synthetic-data/--ids=$ids}" --lr 3e-3)
exact=$("$mpiexec" -np 2 --oversubscribe "$syslm" "${fixed[@]}" --batch 3 --dp 2 2>/dev/null | tail -1)
zc=$("$mpiexec" -np 2 --oversubscribe "$syslm" "${fixed[@]}" --batch 3 --dp 2 --zero 2 \
     --grad-compress int8 --out "$tmp/zc.gguf" 2>"$tmp/zc.txt" | tail -1)
$check follows "$exact" "$zc" "int8 + ZeRO-2"
grep -q "gradients compressed: int8" "$tmp/zc.txt"
cmp <(stat -c %s "$tmp/dp1.gguf") <(stat -c %s "$tmp/zc.gguf")
# With tensor parallelism (dp 2 x tp 2): ZeRO-2 gives the exact loss, int8 compression one near it.
zt=$("$mpiexec" -np 4 --oversubscribe "$syslm" "${common[@]}" --batch 3 --tp 2 --zero 2 \
     2>/dev/null | tail -1)
exact_tp=$("$mpiexec" -np 4 --oversubscribe "$syslm" "${fixed[@]}" --batch 3 --tp 2 2>/dev/null | tail -1)
ct=$("$mpiexec" -np 4 --oversubscribe "$syslm" "${fixed[@]}" --batch 3 --tp 2 \
     --grad-compress int8 2>"$tmp/ct.txt" | tail -1)
$check same 8 $V "$dptp" "$zt" "dp 2 x tp 2: ZeRO-2 against plain"
$check follows "$exact_tp" "$ct" "dp 2 x tp 2: int8"
grep -q "gradients compressed: int8" "$tmp/ct.txt"
if "$mpiexec" -np 2 --oversubscribe "$syslm" "${common[@]}" --batch 3 --dp 3 2>"$tmp/err.txt"; then
  echo "--dp 3 on 2 ranks was accepted"; exit 1
fi
grep -q -- "--dp 3 x --tp 1 x --pp 1 but 2 ranks were started" "$tmp/err.txt"

# Resume at another world size (constant learning rate: the schedule does not depend on --steps).
model=(--arch llama --tokenizer "$vocab" --layers 2 --dim 64 --heads 4 --ffn 96 --ctx 64)
run=(--synthetic-data --seq 32 --threads 1 --json --schedule constant --lr 2e-3 --warmup 0)
ref=$("$syslm" train "${model[@]}" "${run[@]}" --batch 6 --steps 8 2>/dev/null | tail -1)
rm -rf "$tmp/ck"
"$mpiexec" -np 2 --oversubscribe "$syslm" train "${model[@]}" "${run[@]}" --batch 3 --steps 4 \
  --checkpoint "$tmp/ck" --checkpoint-every 4 >/dev/null 2>&1
resumed=$("$syslm" train --resume "$tmp/ck" "${run[@]}" --batch 6 --steps 8 2>/dev/null | tail -1)
$check same 8 $V "$ref" "$resumed" "resumed on 1 rank after 2, against uninterrupted"

# dp 2 x tp 2 under ZeRO-2 writes a checkpoint after 4 steps; one process resumes it.
rm -rf "$tmp/ck4"
"$mpiexec" -np 4 --oversubscribe "$syslm" train "${model[@]}" "${run[@]}" --batch 3 --steps 4 \
  --tp 2 --zero 2 --checkpoint "$tmp/ck4" --checkpoint-every 4 >/dev/null 2>&1
res=$("$syslm" train --resume "$tmp/ck4" "${run[@]}" --batch 6 --steps 8 2>/dev/null | tail -1)
$check same 8 $V "$ref" "$res" "resumed dp 2 x tp 2 ZeRO-2 -> 1 process, against uninterrupted"

# A checkpoint written by tp 2 x pp 2 (4 ranks) resumed by pp 2 alone, and one written by
# pp 2 resumed by tp 2: both reach the uninterrupted one-process loss.
for pair in "--tp 2 --pp 2|--pp 2" "--pp 2|--tp 2"; do
  first=${pair%%|*} second=${pair##*|}
  n1=1 n2=1  # ranks: the product of the degrees
  for x in $first; do [[ $x =~ ^[0-9]+$ ]] && n1=$((n1 * x)); done
  for x in $second; do [[ $x =~ ^[0-9]+$ ]] && n2=$((n2 * x)); done
  rm -rf "$tmp/ck3"
  "$mpiexec" -np $n1 --oversubscribe "$syslm" train "${model[@]}" "${run[@]}" --batch 6 --steps 4 \
    $first --checkpoint "$tmp/ck3" --checkpoint-every 4 >/dev/null 2>&1
  res=$("$mpiexec" -np $n2 --oversubscribe "$syslm" train --resume "$tmp/ck3" "${run[@]}" \
        --batch 6 --steps 8 $second 2>/dev/null | tail -1)
  $check same 8 $V "$ref" "$res" "resumed $first -> $second, against uninterrupted"
done
echo "ok"
