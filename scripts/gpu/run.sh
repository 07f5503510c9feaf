#!/usr/bin/env bash
# The one call of a GPU lease: runs on the lent machine, in the repo root with .gpu/ carried
# (scripts/gpu/package.sh made it here). A lease is short (15 minutes of device time in all, the
# machine's start included; one call at most 10 minutes) and brings back at most 8 files, so
# this script runs stages in the order given, starts one only when at least its minimum is left
# of BUDGET_S, stops it at its cap or at the budget (a stopped bench still prints what it
# finished), and keeps everything in three files under $OUT, refreshed after every stage (a call
# killed mid-stage still returns the stages before it):
#   summary.txt    first an ldd check of every carried binary (each library found: the binaries'
#                  rpath is $ORIGIN/../lib, then the CUDA toolkit's lib64), the machine, then one
#                  line per stage: ok / failed / timed out / skipped, seconds
#   results.jsonl  every JSON line the benches printed
#   logs.tar.gz    every stage's full output (test logs, bench tables, the XL trace, metrics)
#
#   OUT=... BUDGET_S=540 STAGES="cuda_tests sanitizer gpt xl_trace" bash scripts/gpu/run.sh
#
# BUDGET_S: seconds the whole script may take (default 540: a device call of timeout_s 600).
# STRATA_GPU_DIR: the package (default .gpu): a folder with bin/, lib/, cuda_tests.txt (and
# deepspeed/), or one holding package.sh's pkg.tar.gz of them, unpacked to /tmp/strata-gpu-pkg.
# tests/tools/check_gpu_run.py runs this script on stand-in binaries.
# STAGES: which stages, in this order (default: issue 27's order, "cuda_tests sanitizer gpt
# xl_trace xl_step small_step infer machine moe": what does not fit the budget is skipped and said so;
# a later lease names the stages still open). Each stage's (minimum, cap) in seconds is in
# `stage_limits` below. Nothing a stage starts sees $PKG/lib on LD_LIBRARY_PATH (python3 would
# load Debian's libstdc++ from it): strata's binaries find their libraries by their rpath.
#   cuda_tests   the tests labelled cuda (they must pass: a skipped test fails the stage), each
#                under TEST_TIMEOUT_S (default 90: one hang does not hide the rest); the count of
#                cuBLASLt epilogues that test_fused_cuda saw declined is its last line
#   xl_trace     GPT-2 XL, B 4 x T 1024, bf16, checkpointing, stage 3 cpu, clipping 1.0, 6 steps
#                under --trace: the `ready in` line, the step metrics, scripts/update_occupancy.py
#   xl_step      bench step on that shape: the resident reference, cpu stage 3 and the peers
#                torch_resident, deepspeed_zero2_cpu, deepspeed_zero3_cpu (vs_offload_bound,
#                tokens/s ratios; the cell's step vs xl_trace's is the trace's cost)
#   small_step   bench step, GPT-2 124M, B 8 x T 1024, bf16: the reference, cpu and nvme stage 3
#                (vs_disk), and torch_resident, deepspeed_zero2_cpu
#   checksum     bench checksum on this machine's disk (issue 19)
#   machine      bench machine --device cuda and compare --device cuda against it (issue 18)
#   infer        bench infer, LLaMA-7B shape, resident and streamed from pinned memory (issue 17)
#   moe          bench infer, Qwen3-30B-A3B shape, bf16, 16 GiB of device memory, experts in pinned
#                memory, batch 1: only the routed experts fetched (no expert cache; beside it
#                transformers + Accelerate offload, --peers) against every expert fetched
#                (--moe-fetch all: the dense-streaming baseline), then routed with the default
#                cache at batch 1 and 16 (issue 32)
#   gpt          bench gpt --profile, GPT-2 124M at B 8 x T 1024 bf16, and bench attention
#                (training shape, and decoding at B 8 x past 1024 and B 1 x past 4096)
#   sanitizer    the flash attention tests and the decoding attention test on their reduced case
#                sets (STRATA_ATTENTION_REDUCED=1) under compute-sanitizer memcheck and racecheck
#   other_tests  every test binary not labelled cuda (reported)
# A stage whose JSON lines hold a loss or gradient norm that is not finite (null, NaN, inf) fails,
# with the losses printed: a kernel that is wrong at real shapes must not report "ok".
# Exit 1 when a stage failed or timed out (a skipped stage is reported, not a failure).
# shellcheck disable=SC2317  # the stages are called through `bash -c "stage_NAME"`
set -uo pipefail
out=$(realpath -m "${OUT:-/tmp/strata-gpu}")          # relative to the caller's folder
pkg_arg=${STRATA_GPU_DIR:+$(realpath -m "$STRATA_GPU_DIR")}
cd "$(dirname "$0")/../.." || exit 1
PKG=$(realpath -m "${pkg_arg:-.gpu}")
if [[ -f $PKG/pkg.tar.gz ]]; then  # scripts/gpu/package.sh's archive
  unpacked=/tmp/strata-gpu-pkg
  rm -rf "$unpacked" && mkdir -p "$unpacked" && tar xzf "$PKG/pkg.tar.gz" -C "$unpacked" || exit 1
  PKG=$unpacked
fi
export PKG
export STRATA=$PKG/bin/strata
budget=${BUDGET_S:-540}
stages=${STAGES:-cuda_tests sanitizer gpt xl_trace xl_step small_step infer machine moe}
reserve=15  # kept for the last packing of the logs
mkdir -p "$out"
LOGS=$(mktemp -d /tmp/strata-gpu-logs.XXXXXX)
export LOGS
start=$SECONDS
summary=$out/summary.txt
note() { echo "$*" | tee -a "$summary"; }
: >"$summary"
: >"$out/results.jsonl"
if [[ ! -x $STRATA || ! -f $PKG/cuda_tests.txt ]]; then
  note "no strata package at $PKG (bin/strata, cuda_tests.txt): run scripts/gpu/package.sh on the dev machine and carry .gpu"
  exit 1
fi

# Seconds a stage may still use.
left() { echo $((budget - (SECONDS - start) - reserve)); }

# logs.tar.gz, written aside and moved in (never half a file under $OUT); without the traces
# (gzipped by their stage) when it would pass 15 MiB (a file comes back only under 16 MiB).
pack() {
  local tmp=/tmp/strata-gpu-logs.tar.gz
  tar czf "$tmp" -C "$LOGS" . 2>/dev/null
  if (($(stat -c %s "$tmp") > 15 * 1024 * 1024)); then
    tar czf "$tmp" -C "$LOGS" --exclude='*.trace.json.gz' . 2>/dev/null
    [[ -n ${trace_note:-} ]] || note "logs.tar.gz: the trace left out (over 15 MiB with it)"
    trace_note=1
  fi
  mv -f "$tmp" "$out/logs.tar.gz"
}

# "MIN CAP" of each stage, in seconds; LIMITS="NAME=MIN:CAP ..." overrides them (tests).
stage_limits() {
  local over
  for over in ${LIMITS:-}; do
    if [[ ${over%%=*} == "$1" ]]; then
      echo "${over#*=}" | tr : ' '
      return
    fi
  done
  case $1 in
    cuda_tests) echo "30 180" ;;
    xl_trace) echo "60 150" ;;
    xl_step) echo "120 330" ;;
    small_step) echo "60 200" ;;
    checksum) echo "60 120" ;;
    machine) echo "60 200" ;;
    infer) echo "120 300" ;;
    moe) echo "200 420" ;;
    gpt) echo "60 150" ;;
    sanitizer) echo "30 120" ;;
    other_tests) echo "30 200" ;;
    *) return 1 ;;
  esac
}

# The stages. Each runs in its own bash under `timeout` (so it sees only exported names), writes
# its output under $LOGS and its JSON lines to $LOGS/NAME.jsonl, and returns non-zero on failure.
stage_cuda_tests() {
  local t bad=() declined
  while read -r t; do
    timeout --kill-after=5 "${TEST_TIMEOUT_S:-90}" "$PKG/bin/$t" >"$LOGS/$t.log" 2>&1
    local rc=$?
    if ((rc == 124 || rc == 137)); then
      echo "$t: timed out after ${TEST_TIMEOUT_S:-90} s"
      bad+=("$t")
      continue
    fi
    # A test that skips here (no usable GPU, a missing file) has not passed.
    grep -q '^\[  SKIPPED \]' "$LOGS/$t.log" && rc=77
    echo "$t: rc=$rc"
    ((rc == 0)) || bad+=("$t")
  done <"$PKG/cuda_tests.txt"
  # test_fused_cuda prints a line per GPT-shape epilogue cuBLASLt declined (a slower path, the
  # same results): counted here, not failed.
  declined=$(cat "$LOGS"/*.log 2>/dev/null | grep -c '^declined epilogue:')
  ((${#bad[@]} == 0)) || echo "failed: ${bad[*]}"
  echo "cuBLASLt declined epilogues: $declined"
  ((${#bad[@]} == 0))
}

xl_config() {
  cat >"$LOGS/xl_cpu.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": true},
                       "offload_optimizer": {"device": "cpu", "pin_memory": true}}}
JSON
}

stage_xl_trace() {
  xl_config
  "$STRATA" train --device cuda --config "$LOGS/xl_cpu.json" --preset gpt2-xl --seq-len 1024 \
    --activation-checkpointing --steps 6 --text README.md --trace "$LOGS/xl.trace.json" \
    --metrics "$LOGS/xl_metrics.jsonl" --report none >"$LOGS/xl_train.txt" 2>&1 || return 1
  grep -h "ready in" "$LOGS/xl_train.txt"
  python3 - "$LOGS/xl_metrics.jsonl" <<'PY' || return 1
import json, math, sys
bad = False
for line in open(sys.argv[1]):
    m = json.loads(line)
    busy = m["busy_ms"].get("cpu optimizer", 0)
    loss, norm = m.get("loss"), m.get("grad_norm")
    finite = lambda v: isinstance(v, (int, float)) and math.isfinite(v)
    bad = bad or not finite(loss) or not finite(norm)
    print("step {}: {:.0f} ms, loss {}, grad_norm {}, speculative {}, cpu optimizer busy {:.0f} ms".format(
        m["step"], m["step_ms"], loss, norm, m["speculative"], busy))
if bad:
    print("a loss or gradient norm is not finite (above): the step's numbers mean nothing")
    sys.exit(1)
PY
  python3 scripts/update_occupancy.py "$LOGS/xl.trace.json" | tee "$LOGS/xl_occupancy.txt"
  gzip -f "$LOGS/xl.trace.json"
}

bench_step() {  # NAME ARGS...: bench step on cuda, JSON to $LOGS/NAME.jsonl, tables to NAME.txt
  local name=$1
  shift
  "$STRATA" bench step --device cuda --dtype bf16 --steps 6 --rounds 1 --python "$(command -v python3)" \
    --json "$@" >"$LOGS/$name.jsonl" 2>"$LOGS/$name.txt"
  local rc=$?
  grep -E '^\[(round|peer|disk)' "$LOGS/$name.txt"
  return "$rc"
}

stage_xl_step() {
  bench_step xl_step --preset gpt2-xl --batch 4 --seq-len 1024 --checkpointing --placements cpu --stages 3 \
    --peers torch_resident,deepspeed_zero2_cpu,deepspeed_zero3_cpu
}

stage_small_step() {
  bench_step small_step --preset gpt2 --batch 8 --seq-len 1024 --placements cpu,nvme --stages 3 \
    --peers torch_resident,deepspeed_zero2_cpu
}

stage_checksum() {
  "$STRATA" bench checksum --rounds 4 --json >"$LOGS/checksum.jsonl" 2>"$LOGS/checksum.txt"
}

stage_machine() {
  "$STRATA" bench machine --device cuda --out "$LOGS/machine_profile.json" >"$LOGS/machine.txt" 2>&1 || return 1
  "$STRATA" compare --device cuda --preset gpt2 --batch 8 --seq-len 1024 --dtype bf16 --steps 6 \
    --profile "$LOGS/machine_profile.json" --json >"$LOGS/machine.jsonl" 2>>"$LOGS/machine.txt"
}

stage_infer() {
  local j=$LOGS/infer.jsonl t=$LOGS/infer.txt
  "$STRATA" bench infer --device cuda --preset llama-2-7b --dtype bf16 --placements none \
    --batches 1,16 --prompt-len 128 --steps 8 --json >>"$j" 2>>"$t" || return 1
  "$STRATA" bench infer --device cuda --device-memory 4GiB --preset llama-2-7b --dtype bf16 \
    --placements cpu --batches 1,16 --prompt-len 128 --steps 8 --slots 4 --peers \
    --python "$(command -v python3)" --json >>"$j" 2>>"$t"
}

stage_moe() {
  local j=$LOGS/moe.jsonl t=$LOGS/moe.txt fetch peers
  local model=(--device cuda --device-memory 16GiB --preset qwen3-30b-a3b --dtype bf16 --placements cpu
    --prompt-len 64 --steps 6)
  for fetch in routed all; do
    # transformers + Accelerate's offload of the same model, budget and batch beside the routed
    # cell (tools/bench/infer_peers.py; it starts once strata's cell has given its memory back).
    peers=()
    [[ $fetch == routed ]] && peers=(--peers --python "$(command -v python3)")
    "$STRATA" bench infer "${model[@]}" --batches 1 --moe-expert-cache-mb 0 --moe-fetch "$fetch" \
      "${peers[@]}" --json >>"$j" 2>>"$t" || return 1
  done
  "$STRATA" bench infer "${model[@]}" --batches 1,16 --json >>"$j" 2>>"$t"
}

stage_gpt() {
  "$STRATA" bench gpt --preset gpt2 --batch 8 --seq-len 1024 --dtype bf16 --device cuda \
    --python "$(command -v python3)" --profile --json >"$LOGS/gpt.jsonl" 2>"$LOGS/gpt.txt" || return 1
  {
    "$STRATA" bench attention --device cuda --json
    # Decoding (split-KV kernel), GQA 32/8 x 128 bf16: K/V GB/s vs a device-to-device copy.
    "$STRATA" bench attention --device cuda --batch 8 --decode-past 1024 --heads 32 --kv-heads 8 \
      --head-size 128 --json
    "$STRATA" bench attention --device cuda --batch 1 --decode-past 4096 --heads 32 --kv-heads 8 \
      --head-size 128 --json
  } >>"$LOGS/gpt.jsonl" 2>>"$LOGS/gpt.txt"
}

stage_sanitizer() {
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [[ -n $sanitizer ]] || { echo "no compute-sanitizer"; return 1; }
  local tool tool_failed=0
  for tool in memcheck racecheck; do
    STRATA_ATTENTION_REDUCED=1 "$sanitizer" --tool "$tool" --error-exitcode 9 "$PKG/bin/test_attention_cuda" \
      --gtest_filter='AttentionCuda.HeadSize64*:AttentionCuda.HeadSize128*' >"$LOGS/sanitizer_$tool.log" 2>&1
    local rc=$?
    echo "compute-sanitizer $tool: rc=$rc"
    ((rc == 0)) || tool_failed=1
    STRATA_ATTENTION_REDUCED=1 "$sanitizer" --tool "$tool" --error-exitcode 9 \
      "$PKG/bin/test_attention_decode_cuda" >"$LOGS/sanitizer_decode_$tool.log" 2>&1
    rc=$?
    echo "compute-sanitizer $tool (decode): rc=$rc"
    ((rc == 0)) || tool_failed=1
  done
  return "$tool_failed"
}

stage_other_tests() {
  local bin t
  for bin in "$PKG"/bin/test_*; do
    t=$(basename "$bin")
    grep -qx "$t" "$PKG/cuda_tests.txt" && continue
    "$bin" >"$LOGS/$t.log" 2>&1
    echo "$t: rc=$?"
  done
}

# Non-finite losses or gradient norms in a stage's JSON lines (a bench that printed them without
# failing): each named with its line, and the stage fails.
not_finite() {
  python3 - "$1" <<'PY'
import json, math, sys
bad = []
def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
for n, line in enumerate(open(sys.argv[1]), 1):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    for key in ("loss", "losses", "grad_norm"):
        if key not in j:
            continue
        values = j[key] if isinstance(j[key], list) else [j[key]]
        if key == "grad_norm" and j[key] == -1:
            continue  # not computed (no clipping)
        if not all(finite(v) for v in values):
            bad.append("line {}: {} {}".format(n, key, json.dumps(j[key])))
for b in bad:
    print("not finite:", b)
sys.exit(1 if bad else 0)
PY
}

export -f stage_cuda_tests xl_config stage_xl_trace bench_step stage_xl_step stage_small_step stage_checksum \
  stage_machine stage_infer stage_moe stage_gpt stage_sanitizer stage_other_tests

# NCCL (the toolkit's or PyTorch's wheels'): its folder on the loader's path when the loader
# does not find it by itself. The carried libraries are found by the binaries' rpath
# ($ORIGIN/../lib, scripts/gpu/package.sh), never through LD_LIBRARY_PATH, so python3 and
# DeepSpeed's JIT build load the machine's own libstdc++ and libgomp.
nccl=$(find /usr /opt -name 'libnccl.so.2' 2>/dev/null | head -1)
if [[ -n $nccl ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  export LD_LIBRARY_PATH="$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# First line of the summary: every carried binary finds every library it loads.
missing=$(for bin in "$PKG"/bin/*; do
  ldd "$bin" 2>/dev/null | awk -v b="$(basename "$bin")" '/not found/ {print b ": " $1}'
done)
if [[ -z $missing ]]; then
  note "ldd: $(find "$PKG/bin" -type f | wc -l) binaries, every library found"
else
  note "ldd: libraries not found: $(echo "$missing" | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
fi
[[ -f $PKG/text/GPL-3 ]] && export STRATA_TEST_TEXT=$PKG/text/GPL-3  # the tests' training text
note "$(nvidia-smi -L 2>&1 | head -2)"
note "nccl: ${nccl:-not found}; budget ${budget} s; stages: ${stages}"
if [[ -d $PKG/deepspeed/wheels ]]; then
  # shellcheck source=scripts/gpu/deepspeed_env.sh
  source scripts/gpu/deepspeed_env.sh "$PKG/deepspeed" >"$LOGS/deepspeed_env.txt" 2>&1
  note "deepspeed_env.sh: rc=$? ($(tail -1 "$LOGS/deepspeed_env.txt"))"
fi
"$STRATA" info >"$LOGS/info.txt" 2>&1

failed=0
for stage in $stages; do
  if ! limits=$(stage_limits "$stage"); then
    note "$stage: unknown stage (see the list at the top of scripts/gpu/run.sh)"
    failed=1
    continue
  fi
  read -r min cap <<<"$limits"
  have=$(left)
  if ((have < min)); then
    note "$stage: skipped: ${have} s left, it needs ${min}"
    continue
  fi
  ((cap > have)) && cap=$have
  t0=$SECONDS
  # timeout signals the whole process group: the stage's bash waits for its running command
  # (a bench prints what it finished on SIGTERM) and then ends, skipping the rest of the stage.
  timeout --kill-after=10 "$cap" bash -c "trap 'exit 143' TERM; stage_$stage" >"$LOGS/$stage.out" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  nonfinite=0
  [[ -f $LOGS/$stage.jsonl ]] && ! not_finite "$LOGS/$stage.jsonl" >>"$LOGS/$stage.out" 2>&1 && nonfinite=1
  if ((nonfinite)); then
    note "$stage: failed: a loss or gradient norm is not finite (rc ${rc}), in ${took} s"
    failed=1
  elif ((rc == 0)); then
    note "$stage: ok in ${took} s"
  elif ((rc == 124 || rc == 137)); then
    note "$stage: timed out after ${took} s (cap ${cap} s)"
    failed=1
  else
    note "$stage: failed (rc ${rc}) in ${took} s"
    failed=1
  fi
  sed 's/^/    /' "$LOGS/$stage.out" | tail -30 | tee -a "$summary"
  [[ -f $LOGS/$stage.jsonl ]] && cat "$LOGS/$stage.jsonl" >>"$out/results.jsonl"
  pack
done
note "done in $((SECONDS - start)) s"
pack
rm -rf "$LOGS"
exit $failed
