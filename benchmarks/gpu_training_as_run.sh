#!/usr/bin/env bash
# Issue 53, part 6, in one device call (about 10 minutes on one H100/H200): gpt2_small, bf16, batch
# 32, seq 1024, AdamW (fused), the harness against a bare loop with the same compile and
# checkpointing, for eager and compiled, checkpointing off and on (tokens/s, MFU, HFU, peak CUDA
# memory, compile_s), then the GPU tests (fsdp and fsdp_grad_op on CUDA, precision x sharding, MFU).
# Each part has its own time limit, so one slow part leaves the others' results. Results in
# $OUT (the device tool's folder) or /tmp/gpu-as-run. Not yet run on a GPU (written 2026-11-27 on CPU).
#   bash benchmarks/gpu_training_as_run.sh
set -u
out="${OUT:-/tmp/gpu-as-run}"
mkdir -p "$out"
common=(--device cuda --model gpt2_small --dataset synthetic_tokens --seq-len 1024 --vocab-size 50257
        --batch-size 32 --precision bf16 --optimizer adamw --lr 3e-4 --dataset-size 2048 --steps 20)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
for compile in none model; do
    rounds=$([ "$compile" = none ] && echo 2 || echo 1)  # a compiled side compiles in its warm-up: one round
    for ac in none full; do
        echo "== compile $compile, activation_checkpointing $ac" | tee -a "$out/summary.txt"
        timeout 130 python benchmarks/harness_vs_bare_loop.py "${common[@]}" --rounds "$rounds" \
            --compile "$compile" --activation-checkpointing "$ac" > "$out/bench-$compile-$ac.txt" 2>&1
        echo "exit $?" >> "$out/bench-$compile-$ac.txt"
        grep -E "^(round|median)|  (mfu|hfu|compile_s|peak|optimizer_impl)" "$out/bench-$compile-$ac.txt" | tee -a "$out/summary.txt"
    done
done
timeout 60 python -m torch.utils.collect_env > "$out/collect_env.txt" 2>&1
timeout 100 python -m pytest -q -p no:cacheprovider tests/gpu -x > "$out/tests-gpu.txt" 2>&1
tail -3 "$out/tests-gpu.txt" | tee -a "$out/summary.txt"
