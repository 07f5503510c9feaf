#!/usr/bin/env bash
# Runs the built `strata config` on good and bad configs; checks exit codes and output.
# Usage: cli_test.sh path/to/strata tests/runtime/config/data
set -u
strata="$1"
data="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run NAME ARGS...: runs strata with ARGS, keeps stdout/stderr in $work/NAME.{out,err}, sets rc.
run() {
  local name="$1"
  shift
  "$strata" "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
}
expect_rc() {  # NAME WANT(0|nonzero)
  if [[ "$2" == 0 && $rc -ne 0 ]] || [[ "$2" != 0 && $rc -eq 0 ]]; then
    fail "$1: exit code $rc, wanted $2"
    sed 's/^/  | /' "$work/$1.err" >&2
  fi
}
expect_in() {  # NAME out|err TEXT
  if ! grep -qF -- "$3" "$work/$1.$2"; then
    fail "$1: std$2 lacks: $3"
    sed 's/^/  | /' "$work/$1.$2" >&2
  fi
}

# A good file: exit 0, every section printed, batch sizes resolved for 2 ranks.
run good config "$data/ds_zero_offload_cpu.json" --world-size 2
expect_rc good 0
expect_in good out '"train_batch_size": 64'
expect_in good out '"gradient_accumulation_steps": 4'
expect_in good out '"stage3_prefetch_bucket_size": 50000000'
expect_in good out '"device_memory": 1073741824'
expect_in good out '"intra_op_parallelism": 1'
expect_in good err "'steps_per_print' is a DeepSpeed setting that strata does not use"

# Overrides apply before validation.
run overridden config "$data/ds_zero_offload_cpu.json" --set zero_optimization.stage=3 \
  --set strata.device_memory=0 --set zero_optimization.offload_param.device=cpu
expect_rc overridden 0
expect_in overridden out '"stage": 3'
expect_in overridden out '"device_memory": 536870912'

# "auto" values resolve as strata train resolves them, HF Trainer's defaults where no flag gives
# them; the table on stderr says where each came from; what needs the run stays "auto" and is
# listed.
run auto config "$data/hf_zero3_auto.json" --set train_micro_batch_size_per_gpu=2 --hidden-size 1024
expect_rc auto 0
expect_in auto out '"reduce_bucket_size": 1048576'
expect_in auto out '"lr": 5e-05'
expect_in auto out '"total_num_steps": "auto"'
expect_in auto err '"auto" values resolved:'
expect_in auto err 'zero_optimization.reduce_bucket_size                  1048576       model hidden size 1024'
expect_in auto err 'optimizer.params.lr                                   5e-05         default (HF Trainer)'
expect_in auto err 'still "auto" (resolved at run time, or give --hidden-size / --steps): scheduler.params.total_num_steps'

# Both batch sizes "auto": no "neither ... is given", HF's micro-batch 8 (x 2 ranks), in the table.
run both_auto config "$data/hf_zero3_auto.json" --world-size 2 --steps 100 --hidden-size 768
expect_rc both_auto 0
expect_in both_auto out '"train_batch_size": 16'
expect_in both_auto out '"train_micro_batch_size_per_gpu": 8'
expect_in both_auto out '"total_num_steps": 100'
expect_in both_auto err 'train_batch_size                                      16            micro 8 x accumulation 1 x world 2'
expect_in both_auto err 'train_micro_batch_size_per_gpu                        8             default (HF Trainer)'
expect_in both_auto err 'scheduler.params.total_num_steps                      100           --steps'
if grep -qF 'neither' "$work/both_auto.err" || grep -qF 'still "auto"' "$work/both_auto.err"; then
  fail "both_auto: stderr says a batch size is missing or a key is still auto"
fi

# The flags resolve their "auto"s, and a flag over a number of the file wins with a line.
run flags config "$data/hf_zero3_auto.json" --lr 3e-4 --micro-batch 4 --grad-accum 2 --clip 0.5 \
  --warmup-steps 10 --steps 50 --hidden-size 64
expect_rc flags 0
expect_in flags out '"lr": 0.0003'
expect_in flags out '"warmup_max_lr": 0.0003'
expect_in flags out '"train_batch_size": 8'
expect_in flags out '"gradient_clipping": 0.5'
expect_in flags out '"warmup_num_steps": 10'
expect_in flags err 'optimizer.params.lr                                   0.0003        flag --lr'
expect_in flags err 'gradient_accumulation_steps                           2             flag --grad-accum'
run replaces config "$data/ds_zero_offload_cpu.json" --lr 3e-4 --set strata.device=host
expect_rc replaces 0
expect_in replaces out '"lr": 0.0003'
expect_in replaces err '--lr 0.0003 replaces optimizer.params.lr = 0.00015 of the config'
expect_in replaces err '--lr 0.0003 replaces scheduler.params.warmup_max_lr = 0.00015 of the config'
run conflict config "$data/ds_zero_offload_cpu.json" --grad-accum 3
expect_rc conflict nonzero
expect_in conflict err 'train_batch_size (64) != train_micro_batch_size_per_gpu (8) * gradient_accumulation_steps (3)'
expect_in conflict err 'give the other flag too'

# data_types.grad_accum_dtype: fp32 and bf16 are read (printed); fp16 without fp16 training is
# refused saying why.
run fp32_accum config "$data/ds_zero_offload_cpu.json" --set data_types.grad_accum_dtype=fp32
expect_rc fp32_accum 0
expect_in fp32_accum out '"grad_accum_dtype": "fp32"'
run bf16_accum config "$data/ds_zero_offload_cpu.json" --set data_types.grad_accum_dtype=bf16
expect_rc bf16_accum 0
expect_in bf16_accum out '"grad_accum_dtype": "bf16"'
run fp16_accum config "$data/ds_zero_offload_cpu.json" --set fp16.enabled=false --set data_types.grad_accum_dtype=fp16
expect_rc fp16_accum nonzero
expect_in fp16_accum err 'needs fp16 training'
expect_in fp16_accum err 'data_types.grad_accum_dtype'

# A bad value: non-zero, the message names the key path.
run bad config "$data/bad_ratio.json"
expect_rc bad nonzero
expect_in bad err 'strata: error:'
expect_in bad err 'zero_optimization.offload_optimizer.ratio'
expect_in bad err 'expected a number in [0, 1], got 1.5'

run bad_override config "$data/ds_zero_offload_cpu.json" --set zero_optimization.stge=3
expect_rc bad_override nonzero
expect_in bad_override err "override 'zero_optimization.stge=3' sets unknown config key"

run malformed config "$data/malformed.json"
expect_rc malformed nonzero
expect_in malformed err 'malformed JSON'
expect_in malformed err 'line 3'

run missing config "$data/does_not_exist.json"
expect_rc missing nonzero
expect_in missing err 'No such file or directory'
expect_in missing err "$data/does_not_exist.json"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "strata config: all checks passed"
