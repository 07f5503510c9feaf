"""strata train with a DeepSpeed config as the Hugging Face Trainer passes it (full of "auto"),
the training flags (--lr, --micro-batch, --warmup-steps, --clip), --set, and the table of where
each "auto" came from (docs/config.md, "Resolution")."""
import re

from train_util import TINY, Run, check, ds_config, tail

HF_AUTO = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                             "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"},
    "aio": {"block_size": 65536},
    "strata": {"device": "host"},
}


def table_row(stderr, key):
    """(value, source) of `key` in the "auto" table on stderr, or None."""
    m = re.search(r"^  " + re.escape(key) + r" +(\S+) +(.+)$", stderr, re.M)
    return (m.group(1), m.group(2)) if m else None


def expect_row(stderr, key, value, source):
    row = table_row(stderr, key)
    check(row == (value, source), f"table row of {key}: {row}, wanted {(value, source)}\n{tail(stderr, 40)}")


def case_hf_config(strata, root):
    # Every "auto" resolved: from the flags, --steps, the model, else HF's defaults; --set over
    # the file (stage 3 -> 2).
    run = Run(root, "hf-auto")
    run.write_config(HF_AUTO)
    r = run.start(strata, TINY + ["--steps", "3", "--lr", "3e-4", "--micro-batch", "2", "--warmup-steps", "2",
                                  "--set", "zero_optimization.stage=2"])
    run.expect_ok()
    err = r.stderr
    check('"auto" values resolved:' in err, f"no table:\n{tail(err)}")
    expect_row(err, "optimizer.params.lr", "0.0003", "flag --lr")
    expect_row(err, "scheduler.params.warmup_max_lr", "0.0003", "flag --lr")
    expect_row(err, "train_micro_batch_size_per_gpu", "2", "flag --micro-batch")
    expect_row(err, "gradient_accumulation_steps", "1", "default (HF Trainer)")
    expect_row(err, "train_batch_size", "2", "micro 2 x accumulation 1 x world 1")
    expect_row(err, "gradient_clipping", "1", "default (HF Trainer)")
    expect_row(err, "optimizer.params.weight_decay", "0", "default (HF Trainer)")
    expect_row(err, "scheduler.params.warmup_num_steps", "2", "flag --warmup-steps")
    expect_row(err, "scheduler.params.total_num_steps", "3", "--steps")
    row = table_row(err, "zero_optimization.reduce_bucket_size")
    check(row is not None and row[1].startswith("model hidden size "), f"bucket row {row}")
    check(table_row(err, "zero_optimization.stage") is None, "a key that was not auto is listed")
    check("ZeRO stage 2" in err, f"--set zero_optimization.stage=2 did not take:\n{tail(err)}")
    lrs = [m["lr"] for m in run.metric_lines()]
    check(len(lrs) == 3 and abs(max(lrs) - 3e-4) < 1e-9, f"the schedule does not peak at --lr: {lrs}")

    # A flag over a number of the file: the flag wins, a line says so; nothing was "auto".
    flagged = Run(root, "flag-wins")
    flagged.write_config(ds_config(1, lr=1e-3, clip=1.0))
    r = flagged.start(strata, TINY + ["--steps", "2", "--lr", "5e-4", "--clip", "0.5"])
    flagged.expect_ok()
    check("--lr 0.0005 replaces optimizer.params.lr = 0.001 of the config" in r.stderr and
          "--clip 0.5 replaces gradient_clipping = 1 of the config" in r.stderr, f"no line:\n{tail(r.stderr)}")
    check('"auto" values resolved' not in r.stderr, "a table without any auto in the file")
    check(all(abs(m["lr"] - 5e-4) < 1e-12 for m in flagged.metric_lines()), "the run did not use --lr")

    # --set is checked as on strata config: an unknown key is an error; fp16 gradient
    # accumulators without fp16 training are refused saying why.
    bad = Run(root, "bad-set")
    bad.write_config(ds_config(1))
    for override, says in (("zero_optimization.stge=1", "sets unknown config key"),
                           ("data_types.grad_accum_dtype=fp16", "needs fp16 training")):
        r = bad.start(strata, TINY + ["--steps", "1", "--set", override])
        check(r.returncode == 1 and says in r.stderr, f"--set {override}: exit {r.returncode}\n{tail(r.stderr)}")
