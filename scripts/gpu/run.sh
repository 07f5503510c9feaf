#!/usr/bin/env bash
# Runs on the lent GPU machine, in the repo root with .gpu/ carried (scripts/gpu/package.sh).
# Runs the CUDA tests (must pass), then every other test binary (reported), strata info and
# strata bench gpt (GPT-2 124M, fp32 and bf16).
# Writes logs to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/strata-gpu}
mkdir -p "$out"
# NCCL: from the toolkit, or the one PyTorch's wheels bring.
nccl=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.gpu/lib${nccl:+:$(dirname "$nccl")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L | tee "$out/gpu.txt"
echo "nccl: ${nccl:-not found}" | tee -a "$out/gpu.txt"
# DeepSpeed from the carried bundle (scripts/gpu/deepspeed_bundle.sh, packed by package.sh), for
# the peers of strata bench step; without it they report that deepspeed does not import.
if [[ -d .gpu/deepspeed/wheels ]]; then
  # shellcheck source=deepspeed_env.sh
  source scripts/gpu/deepspeed_env.sh .gpu/deepspeed 2>"$out/deepspeed_env.txt"
  echo "deepspeed_env.sh: rc=$?" >>"$out/deepspeed_env.txt"
  cat "$out/deepspeed_env.txt" | tee -a "$out/gpu.txt"
fi

failed=0
while read -r t; do
  echo "=== $t (cuda)"
  if ! ".gpu/bin/$t" 2>&1 | tee "$out/$t.log"; then failed=1; fi
done < .gpu/cuda_tests.txt
for bin in .gpu/bin/test_*; do
  t=$(basename "$bin")
  grep -qx "$t" .gpu/cuda_tests.txt && continue
  ".gpu/bin/$t" >"$out/$t.log" 2>&1
  echo "=== $t: rc=$?"
done
.gpu/bin/strata info 2>&1 | tee "$out/info.txt"
# The flash attention kernels under compute-sanitizer (races on shared memory, barriers,
# out-of-bounds accesses), which the value checks can miss. Reported, with a time limit.
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck synccheck; do
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 .gpu/bin/test_attention_cuda \
      --gtest_filter='AttentionCuda.HeadSize*' >"$out/sanitizer_$tool.log" 2>&1
    echo "=== compute-sanitizer $tool test_attention_cuda: rc=$?"
  done
fi
# GPT-2 124M fwd+bwd on the GPU vs its largest GEMM and vs PyTorch (the machine's python3: HF's
# GPT2LMHeadModel with SDPA where transformers imports), with the per-op profile; the baseline
# shape of ../shared/gpu-baseline.md is B 8 x T 1024 bf16. JSON lines in $out/bench_gpt.jsonl.
for shape in "8 1024 bf16" "4 1024 bf16" "4 1024 fp32"; do
  read -r b t dtype <<<"$shape"
  .gpu/bin/strata bench gpt --preset gpt2 --batch "$b" --seq-len "$t" --dtype "$dtype" \
    --device cuda --python "$(command -v python3)" --profile --json \
    2>"$out/bench_gpt_${b}x${t}_$dtype.txt" | tee -a "$out/bench_gpt.jsonl"
done
# Attention alone (causal, fwd+bwd) vs a GEMM of the same FLOPs: GPT-2's heads, and LLaMA-style
# GQA at head size 128.
.gpu/bin/strata bench attention --device cuda --json 2>"$out/bench_attention.txt" | tee -a "$out/bench_attention.jsonl"
.gpu/bin/strata bench attention --device cuda --heads 32 --kv-heads 8 --head-size 128 --batch 2 \
  --seq-len 4096 --json 2>>"$out/bench_attention.txt" | tee -a "$out/bench_attention.jsonl"
# With BENCH_STEP=1: the ZeRO step per placement and stage, then the peers (PyTorch resident,
# DeepSpeed ZeRO-2/3 on CPU and NVMe, FSDP2 + CPUOffloadPolicy) on the baseline shape: GPT-2
# 124M, micro-batch 8 x 1024, bf16, clipping 1.0 (DeepSpeed compiles its CPU Adam and async_io on
# first use: minutes). BENCH_STEP_ARGS adds flags (e.g. "--preset gpt2-xl --batch 4 --checkpointing").
if [[ ${BENCH_STEP:-0} == 1 ]]; then
  # shellcheck disable=SC2086
  .gpu/bin/strata bench step --device cuda --preset gpt2 --batch 8 --seq-len 1024 --dtype bf16 \
    --steps 6 --rounds 1 --python "$(command -v python3)" --json ${BENCH_STEP_ARGS:-} \
    2>"$out/bench_step.txt" | tee -a "$out/bench_step.jsonl"
fi
# With TRACE_XL=1: one traced GPT-2 XL run at the issue-15 shape (stage 3, parameters and
# optimizer on the CPU, B 4 x T 1024, bf16, checkpointing, clipping 1.0), its per-step metrics,
# and CPU Adam's share of each update phase (scripts/update_occupancy.py; target >= 0.90).
if [[ ${TRACE_XL:-0} == 1 ]]; then
  cat >"$out/xl_cpu.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": true},
                       "offload_optimizer": {"device": "cpu", "pin_memory": true}}}
JSON
  .gpu/bin/strata train --device cuda --config "$out/xl_cpu.json" --preset gpt2-xl --seq-len 1024     --activation-checkpointing --steps 6 --text README.md --trace "$out/xl_trace.json"     --metrics "$out/xl_metrics.jsonl" --report none 2>&1 | tail -12 | tee "$out/xl_train.txt" || failed=1
  python3 scripts/update_occupancy.py "$out/xl_trace.json" | tee "$out/xl_occupancy.txt" || failed=1
fi
# With BENCH_INFER=1: ZeRO-Inference decoding (issue 17) on the LLaMA-7B shape of the baseline
# (llama-2-7b, random bf16 weights, 12.6 GiB): everything resident, then streamed from pinned
# host memory with 4 GiB of device memory (the baseline's Accelerate setup), at batch 1 and 16,
# against the bound of the bytes each step streams (pinned H2D measured in the same run; target
# vs_bound >= 0.85) and against transformers + Accelerate's offload in the same budget (--peers),
# and the same from NVMe when NVME_DIR names a folder on a local NVMe drive.
if [[ ${BENCH_INFER:-0} == 1 ]]; then
  .gpu/bin/strata bench infer --device cuda --preset llama-2-7b --dtype bf16 --placements device \
    --batches 1,16 --prompt-len 128 --steps 8 --json 2>"$out/bench_infer.txt" | tee -a "$out/bench_infer.jsonl"
  .gpu/bin/strata bench infer --device cuda --device-memory 4GiB --preset llama-2-7b --dtype bf16 \
    --placements cpu${NVME_DIR:+,nvme} ${NVME_DIR:+--dir "$NVME_DIR"} --batches 1,16 --prompt-len 128 --steps 8 \
    --slots 4 --peers --python "$(command -v python3)" --json 2>>"$out/bench_infer.txt" | tee -a "$out/bench_infer.jsonl"
  .gpu/bin/strata bench infer --device cuda --device-memory 4GiB --preset llama-2-7b --dtype bf16 \
    --placements cpu --quantize int4 --batches 1,16 --prompt-len 128 --steps 8 --slots 4 --json \
    2>>"$out/bench_infer.txt" | tee -a "$out/bench_infer.jsonl"
fi
exit $failed
