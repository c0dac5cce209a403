#!/usr/bin/env bash
# Issue 71 in one device call (under 10 minutes on one H100/H200): gpt2_small, bf16, batch 32, seq
# 1024 at nanoGPT's padded vocabulary 50,304, AdamW (fused), the harness against a bare loop with the
# same compile (the blocks and the loss) and checkpointing: compiled over three ABBA rounds (the
# ratio's interval; the compiled loop's top kernels under torch.profiler), eager, and checkpointing
# on (tokens/s, MFU, HFU, peak CUDA memory, compile_s, energy per token); and the GPU tests (every
# strategy on CUDA, fsdp and fsdp_grad_op included, the exact strategies against single, precision
# x sharding, MFU, auto batch, NVML's energy counter). docs/gpu.md has the figures.
#   bash benchmarks/gpu_training_as_run.sh                  # every part, in the order below
#   bash benchmarks/gpu_training_as_run.sh compiled tests   # some parts
# Each part has its own time limit and all share one deadline (DEADLINE_S, default 540 s), so a
# slow part leaves the others' results. Results in $OUT (the device tool's folder) or /tmp/gpu-as-run:
# at most 8 files come back from a device call, so the logs are few and the summary holds the rest.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/gpu-as-run}"
mkdir -p "$out"
end=$(( $(date +%s) + ${DEADLINE_S:-540} ))
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
compiled() { bench model none 50304 200 --profile 3 --rounds 3; }
compiled_unpadded() { bench model none 50257 90; }
eager() { bench none none 50304 45; }
checkpointed() { bench model full 50304 60; bench none full 50304 45; }
# Many small launches at once (the module's usual one-worker unit split per test); the OOM search
# and the peak ranking run alone afterwards, since other processes on the GPU would move them.
tests() { tests_run parallel 130 -n 12 -p no:ddpbench-test-scheduling tests/gpu -k "not auto_batch and not measured_peak"
          tests_run alone 50 tests/gpu -k "auto_batch or measured_peak"; }

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"; } \
    2>&1 | tee -a "$out/summary.txt"
for part in "${@:-compiled tests eager checkpointed compiled_unpadded}"; do
    for p in $part; do "$p"; done
done
