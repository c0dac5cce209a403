#!/usr/bin/env bash
# Issue 53, part 6, in one device call (under 10 minutes on one H100/H200): gpt2_small, bf16, batch
# 32, seq 1024, AdamW (fused), the harness against a bare loop with the same compile and
# checkpointing, compiled and eager, checkpointing off and on (tokens/s, MFU, HFU, peak CUDA memory,
# compile_s; the compiled loop's top kernels under torch.profiler), at GPT-2's vocabulary (50,257)
# and at nanoGPT's padded 50,304 (a multiple of 64, so the head's matmul gets aligned kernels); and
# the GPU tests (every strategy on CUDA, fsdp and fsdp_grad_op included, precision x sharding, MFU,
# auto batch). docs/gpu.md has the figures.
#   bash benchmarks/gpu_training_as_run.sh                  # every part, in the order below
#   bash benchmarks/gpu_training_as_run.sh compiled tests   # some parts
# Each part has its own time limit and all share one deadline (DEADLINE_S, default 570 s), so a
# slow part leaves the others' results. Results in $OUT (the device tool's folder) or /tmp/gpu-as-run.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/gpu-as-run}"
mkdir -p "$out"
end=$(( $(date +%s) + ${DEADLINE_S:-570} ))
common=(--device cuda --model gpt2_small --dataset synthetic_tokens --seq-len 1024 --batch-size 32
        --precision bf16 --optimizer adamw --lr 3e-4 --dataset-size 2048 --steps 20 --rounds 1)

limited() {  # limited SECONDS LOG COMMAND...: at most SECONDS, and never past the deadline
    local want=$1 log=$2; shift 2
    local left=$(( end - $(date +%s) ))
    (( left < want )) && want=$left
    if (( want < 10 )); then echo "skipped: deadline" > "$log"; return; fi
    local t0=$(date +%s)
    timeout "$want" "$@" > "$log" 2>&1
    echo "exit $? after $(( $(date +%s) - t0 )) s (limit $want s)" >> "$log"
}

bench() {  # bench COMPILE AC VOCAB SECONDS [more flags]
    local compile=$1 ac=$2 vocab=$3 limit=$4; shift 4
    local log="$out/bench-$compile-$ac-$vocab.txt"
    limited "$limit" "$log" python benchmarks/harness_vs_bare_loop.py "${common[@]}" --compile "$compile" \
        --activation-checkpointing "$ac" --vocab-size "$vocab" "$@"
    { echo "== compile $compile, activation_checkpointing $ac, vocab $vocab"
      grep -E "^(round|median|exit|skipped)|  (compile|peak|mfu|hfu|optimizer_impl|train_flops|hardware_flops|power|energy)" "$log"; } \
        | tee -a "$out/summary.txt"
}

tests_run() {  # tests_run NAME SECONDS [pytest arguments]
    local name=$1 limit=$2; shift 2
    limited "$limit" "$out/tests-$name.txt" python -m pytest -q -rs -p no:cacheprovider "$@"
    { echo "== tests $name"; tail -4 "$out/tests-$name.txt"; } | tee -a "$out/summary.txt"
}

# compiled: three ABBA rounds for the harness/bare ratio's interval (issue 71, item 2)
compiled() { bench model none 50257 170 --profile 5 --rounds 3; }
compiled_padded() { bench model none 50304 100 --profile 5; }
eager() { bench none none 50257 60; }
eager_padded() { bench none none 50304 60; }
checkpointed_padded() { bench model full 50304 90; bench none full 50304 50; }
# Many small launches at once (the module's usual one-worker unit split per test); the OOM search
# and the peak ranking run alone afterwards, since other processes on the GPU would move them.
tests() { tests_run parallel 120 -n 6 -p no:ddpbench-test-scheduling tests/gpu -k "not auto_batch and not measured_peak"
          tests_run alone 60 tests/gpu -k "auto_batch or measured_peak"; }
tests_fsdp() { tests_run fsdp 100 -n 6 -p no:ddpbench-test-scheduling tests/gpu -k "fsdp or exact"; }

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"; } \
    > "$out/gpu.txt" 2>&1
tee -a "$out/summary.txt" < "$out/gpu.txt"
for part in "${@:-compiled compiled_padded tests eager eager_padded checkpointed_padded}"; do
    for p in $part; do "$p"; done
done
