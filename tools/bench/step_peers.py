#!/usr/bin/env python3
"""The peers of `strata bench step`: one training step of the same GPT-2 in another system, timed.

Launched by `strata bench step` (tools/bench/bench_step.cpp), one child process per peer, so that
one that fails (or cannot be imported) costs only its own row. --peer picks the system:
  torch_resident         PyTorch, everything on the device: fp32 parameters, autocast to --dtype,
                         torch.optim.AdamW (fused on CUDA)
  deepspeed_zero2_cpu    DeepSpeed ZeRO-2, offload_optimizer cpu (ZeRO-Offload; DeepSpeedCPUAdam)
  deepspeed_zero3_cpu    DeepSpeed ZeRO-3, offload_param + offload_optimizer cpu
  deepspeed_zero3_nvme   DeepSpeed ZeRO-3, offload_param + offload_optimizer nvme under
                         --nvme-path (ZeRO-Infinity; its async_io op needs libaio)
  fsdp2_cpu              PyTorch FSDP2 (fully_shard per GPT2Block and the root) with
                         CPUOffloadPolicy: parameters, gradients and AdamW on the CPU
The model: Hugging Face's GPT2LMHeadModel (SDPA attention, gelu_new, dropout off, random init)
from the config given by the flags; with --model auto (the default) and transformers not
importable, torch_resident falls back to tests/reference/gpt2_torch.py under --reference-dir (the
host test's case: Debian's python3-torch has no transformers). Every peer: micro-batch --batch x
--seq-len random token ids (labels = the ids; the model shifts them), bf16 with --dtype bf16,
AdamW (--lr, --betas, --eps, --weight-decay), gradient clipping --gradient-clipping (0: none),
HF's activation checkpointing with --checkpointing. DeepSpeed and FSDP2 run as a single-rank job
(MASTER_ADDR 127.0.0.1, a free MASTER_PORT, RANK 0, WORLD_SIZE 1); they need CUDA.

Prints one JSON line on stdout and exits 0:
  {"peer": P, "ok": true, "torch": V, "model": "...", "step_ms": [...], "tokens_per_step": B*T,
   "loss": [...], ...}         step_ms and loss: one entry per step after --warmup untimed ones
or {"peer": P, "ok": false, "importable": false, "error": "..."} and exits 3 when what the peer
needs cannot be imported (or there is no CUDA device for a peer that needs one), or
{"peer": P, "ok": false, "importable": true, "error": "..."} and exits 4 when it failed.
Bad flags: argparse's message on stderr, exit 2. --peer list prints which peers are importable.
"""
import argparse
import json
import math
import os
import socket
import sys
import time
import traceback

PEERS = ("torch_resident", "deepspeed_zero2_cpu", "deepspeed_zero3_cpu", "deepspeed_zero3_nvme",
         "fsdp2_cpu")


class NotImportable(Exception):
    """What the peer needs is not there: exit 3."""


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", required=True, choices=PEERS + ("list",))
    for key, default in (("vocab-size", 50257), ("n-positions", 1024), ("n-embd", 768),
                         ("n-layer", 12), ("n-head", 12), ("batch", 8), ("seq-len", 1024),
                         ("steps", 5), ("warmup", 2), ("threads", 0)):
        ap.add_argument("--" + key, type=int, default=default)
    ap.add_argument("--layer-norm-epsilon", type=float, default=1e-5)
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.999])
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--gradient-clipping", type=float, default=1.0)
    ap.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    ap.add_argument("--nvme-path", default="", help="folder for deepspeed_zero3_nvme's swap files")
    ap.add_argument("--model", default="auto", choices=["auto", "hf", "reference"])
    ap.add_argument("--reference-dir", default="", help="folder holding gpt2_torch.py")
    a = ap.parse_args(argv)
    for key in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "batch", "seq_len",
                "steps"):
        if getattr(a, key) <= 0:
            ap.error(f"--{key.replace('_', '-')} must be positive")
    if a.warmup < 0 or a.threads < 0:
        ap.error("--warmup and --threads must not be negative")
    if a.seq_len > a.n_positions:
        ap.error(f"--seq-len {a.seq_len} is longer than --n-positions {a.n_positions}")
    if a.n_embd % a.n_head:
        ap.error(f"--n-embd {a.n_embd} does not divide by --n-head {a.n_head}")
    if a.peer == "deepspeed_zero3_nvme" and not a.nvme_path:
        ap.error("deepspeed_zero3_nvme needs --nvme-path")
    if a.peer not in ("torch_resident", "list") and a.device != "cuda":
        ap.error(f"{a.peer} runs on --device cuda only")
    return a


def import_torch():
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        raise NotImportable(f"cannot import torch with {sys.executable}: {e}")
    return torch


def import_transformers(a):
    """transformers, or None where --model auto may fall back to the reference model."""
    if a.model == "reference":
        return None
    try:
        import transformers
        return transformers
    except Exception as e:
        if a.model == "hf" or a.peer != "torch_resident":
            raise NotImportable(f"cannot import transformers with {sys.executable}: {e}")
        return None


def import_deepspeed():
    try:
        import deepspeed
    except Exception as e:
        raise NotImportable(f"cannot import deepspeed with {sys.executable}: {e}")
    return deepspeed


def import_fsdp2(torch):
    try:
        from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,  # torch >= 2.6
                                            fully_shard)
    except Exception:
        try:
            from torch.distributed._composable.fsdp import (CPUOffloadPolicy,  # torch 2.4, 2.5
                                                            MixedPrecisionPolicy, fully_shard)
        except Exception as e:
            raise NotImportable(f"torch {torch.__version__} has no FSDP2 (fully_shard, "
                                f"CPUOffloadPolicy): {e}")
    return fully_shard, CPUOffloadPolicy, MixedPrecisionPolicy


def need_cuda(torch):
    if not torch.cuda.is_available():
        raise NotImportable("torch has no CUDA device here")


def hf_config(transformers, a):
    return transformers.GPT2Config(
        vocab_size=a.vocab_size, n_positions=a.n_positions, n_embd=a.n_embd, n_layer=a.n_layer,
        n_head=a.n_head, layer_norm_epsilon=a.layer_norm_epsilon, activation_function="gelu_new",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
        attn_implementation="sdpa")


def enable_checkpointing(model):
    try:  # transformers >= 4.35: the non-reentrant torch.utils.checkpoint
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    except TypeError:
        model.gradient_checkpointing_enable()


def single_rank_env():
    """A one-process job: what torch.distributed's env:// rendezvous reads."""
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0"),
                       ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)


def timed_steps(torch, a, step, device):
    """Runs --warmup + --steps steps of `step(idx) -> loss`; the timed ones' ms and losses."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(1)
    times, losses = [], []
    for i in range(a.warmup + a.steps):
        idx = torch.randint(0, a.vocab_size, (a.batch, a.seq_len), generator=gen).to(device)
        sync()
        t0 = time.perf_counter()
        loss = step(idx)
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= a.warmup:
            times.append(ms)
            loss = float(loss)
            losses.append(loss if math.isfinite(loss) else None)  # JSON has no NaN
    return times, losses


def run_torch_resident(a, torch, out):
    if a.device == "cuda":
        need_cuda(torch)
    transformers = import_transformers(a)
    low = torch.bfloat16 if a.dtype == "bf16" else None
    if transformers is not None:
        model = transformers.GPT2LMHeadModel(hf_config(transformers, a)).to(a.device)
        if a.checkpointing:
            enable_checkpointing(model)
        out["model"] = f"transformers {transformers.__version__} GPT2LMHeadModel (sdpa)"

        def forward(idx):
            return model(input_ids=idx, labels=idx).loss
    else:
        if a.checkpointing:
            raise RuntimeError("--checkpointing needs transformers (the reference model has none)")
        sys.path.insert(0, a.reference_dir)
        try:
            import gpt2_torch
        except Exception as e:
            raise NotImportable(f"no transformers, and cannot import gpt2_torch from "
                                f"{a.reference_dir or 'the current folder'}: {e}")
        model = gpt2_torch.Gpt2(gpt2_torch.GptConfig(
            vocab_size=a.vocab_size, n_positions=a.n_positions, n_embd=a.n_embd,
            n_layer=a.n_layer, n_head=a.n_head, layer_norm_epsilon=a.layer_norm_epsilon)).to(a.device)
        with torch.no_grad():  # its tensors start empty (it is made to load weights): GPT-2's init
            for name, p in model.named_parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.02)
                elif ".ln_" in name or name.startswith("ln_"):
                    p.fill_(1.0 if name.endswith("weight") else 0.0)
                else:
                    p.zero_()
        out["model"] = "tests/reference gpt2_torch (transformers not importable)"

        def forward(idx):
            return model(idx[:, :-1], idx[:, 1:])[1]  # next-token loss, as HF's labels shift
    model.train()
    kwargs = {}
    if a.device == "cuda" and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames:
        kwargs["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=tuple(a.betas), eps=a.eps,
                            weight_decay=a.weight_decay, **kwargs)
    out["optimizer"] = "torch.optim.AdamW" + (" (fused)" if kwargs else "")
    out["precision"] = f"fp32 parameters, autocast {a.dtype}" if low else "fp32"

    def step(idx):
        opt.zero_grad(set_to_none=True)
        if low is not None:
            with torch.autocast(device_type=a.device, dtype=low):
                loss = forward(idx)
        else:
            loss = forward(idx)
        loss.backward()
        if a.gradient_clipping > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.gradient_clipping)
        opt.step()
        return loss.detach()

    return timed_steps(torch, a, step, a.device)


def deepspeed_config(a, stage, where):
    zero = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    opt = {"device": where, "pin_memory": True}
    if where == "nvme":
        opt["nvme_path"] = a.nvme_path
    zero["offload_optimizer"] = opt
    if stage == 3:
        param = {"device": where, "pin_memory": True}
        if where == "nvme":
            param["nvme_path"] = a.nvme_path
        zero["offload_param"] = param
    config = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": a.gradient_clipping,
        "optimizer": {"type": "AdamW", "params": {"lr": a.lr, "betas": list(a.betas),
                                                  "eps": a.eps, "weight_decay": a.weight_decay}},
        "zero_optimization": zero,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if a.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    return config


def run_deepspeed(a, torch, out, stage, where):
    transformers = import_transformers(a)
    deepspeed = import_deepspeed()
    need_cuda(torch)
    out["deepspeed"] = deepspeed.__version__
    if where == "nvme":
        os.makedirs(a.nvme_path, exist_ok=True)
    single_rank_env()
    torch.cuda.set_device(0)
    deepspeed.init_distributed(dist_backend="nccl", verbose=False)
    config = deepspeed_config(a, stage, where)
    out["ds_config"] = config
    cfg = hf_config(transformers, a)
    if stage == 3:  # built sharded: its parameters go straight to the offload device
        with deepspeed.zero.Init(config_dict_or_path=config):
            model = transformers.GPT2LMHeadModel(cfg)
    else:
        model = transformers.GPT2LMHeadModel(cfg)
    if a.checkpointing:
        enable_checkpointing(model)
    model.train()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    out["model"] = f"transformers {transformers.__version__} GPT2LMHeadModel (sdpa)"
    out["optimizer"] = type(engine.optimizer).__name__
    inner = getattr(engine.optimizer, "optimizer", None)
    if inner is not None:
        out["optimizer"] += f" over {type(inner).__name__}"

    def step(idx):
        loss = engine(input_ids=idx, labels=idx).loss
        engine.backward(loss)
        engine.step()
        return loss.detach()

    return timed_steps(torch, a, step, "cuda")


def run_fsdp2(a, torch, out):
    transformers = import_transformers(a)
    fully_shard, CPUOffloadPolicy, MixedPrecisionPolicy = import_fsdp2(torch)
    need_cuda(torch)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    single_rank_env()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (1,))
    model = transformers.GPT2LMHeadModel(hf_config(transformers, a))  # fp32, on the CPU
    if a.checkpointing:
        enable_checkpointing(model)
    model.train()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if a.dtype == "bf16" else torch.float32,
                              reduce_dtype=torch.float32)
    offload = CPUOffloadPolicy(pin_memory=True)
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh, mp_policy=mp, offload_policy=offload)
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload)  # wte (tied), wpe, ln_f
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=tuple(a.betas), eps=a.eps,
                            weight_decay=a.weight_decay)  # the CPU's foreach AdamW
    out["model"] = f"transformers {transformers.__version__} GPT2LMHeadModel (sdpa)"
    out["optimizer"] = "torch.optim.AdamW on the CPU"
    out["precision"] = f"fp32 sharded parameters on the CPU, {a.dtype} compute"

    def step(idx):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=idx, labels=idx).loss
        loss.backward()
        if a.gradient_clipping > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.gradient_clipping)
        opt.step()
        return loss.detach()

    try:
        return timed_steps(torch, a, step, "cuda")
    finally:
        dist.destroy_process_group()


def list_peers(a):
    """Which peers could run here, and why not."""
    rows = {}
    for peer in PEERS:
        b = argparse.Namespace(**vars(a))
        b.peer = peer
        try:
            torch = import_torch()
            if peer != "torch_resident" or a.model == "hf":
                import_transformers(b)
            if peer.startswith("deepspeed"):
                import_deepspeed()
            if peer == "fsdp2_cpu":
                import_fsdp2(torch)
            if peer != "torch_resident" or a.device == "cuda":
                need_cuda(torch)
            rows[peer] = None
        except NotImportable as e:
            rows[peer] = str(e)
    print(json.dumps({"peer": "list", "ok": True,
                      "importable": [p for p, why in rows.items() if why is None],
                      "not_importable": {p: why for p, why in rows.items() if why is not None}}),
          flush=True)
    return 0


def main(argv=None):
    a = parse_args(argv)
    if a.peer == "list":
        return list_peers(a)
    out = {"peer": a.peer, "ok": False}
    try:
        torch = import_torch()
        out["torch"] = torch.__version__
        torch.manual_seed(0)
        if a.threads > 0:
            torch.set_num_threads(a.threads)
        if a.peer == "torch_resident":
            times, losses = run_torch_resident(a, torch, out)
        elif a.peer == "fsdp2_cpu":
            times, losses = run_fsdp2(a, torch, out)
        else:
            stage = 2 if "zero2" in a.peer else 3
            times, losses = run_deepspeed(a, torch, out, stage, a.peer.rsplit("_", 1)[1])
    except NotImportable as e:
        out.update(importable=False, error=str(e))
        print(json.dumps(out), flush=True)
        return 3
    except Exception as e:  # the peer itself failed: its last words, the trace on stderr
        traceback.print_exc()
        msg = str(e).strip().splitlines()
        out.update(importable=True, error=f"{type(e).__name__}: {msg[0] if msg else ''}"[:400])
        print(json.dumps(out), flush=True)
        return 4
    out.update(ok=True, threads=torch.get_num_threads(), device=a.device, dtype=a.dtype,
               batch=a.batch, seq_len=a.seq_len, checkpointing=a.checkpointing,
               gradient_clipping=a.gradient_clipping, warmup=a.warmup,
               tokens_per_step=a.batch * a.seq_len, step_ms=times, loss=losses)
    if a.device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
        out["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
