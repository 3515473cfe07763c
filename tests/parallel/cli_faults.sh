#!/usr/bin/env bash
# Faults under `mpirun -np 2 syslm train`, injected from outside as a user would meet them:
#   hang: rank 1 is stopped (SIGSTOP) -> rank 0's watchdog aborts the job within --dist-timeout,
#         naming itself, the collective and the training step;
#   death: rank 1 is killed (SIGKILL) -> mpirun ends the job, naming rank 1.
# Either way the job exits non-zero well within 60 s.
set -euo pipefail
syslm=$1 mpiexec=$2 vocab=$3 tmp=$4
mkdir -p "$tmp"
common=(train --arch llama --tokenizer "$vocab" --layers 2 --dim 64 --heads 4 --ffn 96 --ctx 64
        --synthetic-data --seq 32 --batch 2 --steps 1000000 --threads 1 --log-every 1)

rank_pid() {  # the PID of rank $1 of the job started last
  for p in $(pgrep -f -- "--synthetic-data --seq 32 --batch 2 --steps 1000000"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"; return 0
    fi
  done
  return 1
}

for fault in hang death; do
  log="$tmp/$fault.log"
  "$mpiexec" -np 2 --oversubscribe "$syslm" "${common[@]}" --dist-timeout 5 >"$log" 2>&1 &
  job=$!
  for _ in $(seq 600); do  # until both ranks train (a step line printed)
    if grep -q "^step 3/" "$log" 2>/dev/null && pid=$(rank_pid 1); then break; fi
    sleep 0.1
  done
  [ -n "${pid:-}" ] || { echo "rank 1 not found"; cat "$log"; kill $job; exit 1; }
  start=$(date +%s%N)
  if [ $fault = hang ]; then kill -STOP "$pid"; else kill -KILL "$pid"; fi
  rc=0
  wait $job || rc=$?
  took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  kill -KILL "$pid" 2>/dev/null || true
  echo "$fault: job exited with $rc after ${took_ms} ms"
  [ $rc -ne 0 ] || { echo "$fault: the job exited 0"; cat "$log"; exit 1; }
  [ $took_ms -lt 60000 ] || { echo "$fault: took ${took_ms} ms"; exit 1; }
  if [ $fault = hang ]; then
    grep -E "rank 0 of 2: all_reduce .* has not completed after [0-9]+ s in training step [0-9]+" "$log" ||
      { echo "hang: no watchdog message"; cat "$log"; exit 1; }
  else
    grep -Ei "rank 1 .*(exited on signal|killed)|rank 1.*signal 9" "$log" ||
      { echo "death: the message does not name rank 1"; cat "$log"; exit 1; }
  fi
  unset pid
done
echo ok
