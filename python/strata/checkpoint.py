"""The optimizer's checkpoint folder: optimizer.json (format, hyper-parameters, each
parameter's shape, step and where its tensors are) and states.bin (every tensor at a 4 KiB
boundary, written and read by strata's I/O engine, O_DIRECT where the file system allows).
Written atomically: into a hidden sibling folder, fsynced, then renamed over the target, so a
crash leaves either the old folder or the new one, never half of one."""
import json
import os
import shutil

import torch

from strata._util import error
from strata.io import AsyncIO, pinned_empty

FORMAT = "strata-python-optimizer"
VERSION = 1
_ALIGN = 4096
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _jsonable(value):
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return value


def _fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_folder(folder, state_dict, shapes):
    folder = os.path.abspath(os.fspath(folder))
    parent = os.path.dirname(folder)
    if not os.path.isdir(parent):
        raise error("the checkpoint's parent folder does not exist", parent,
                    "create it first, or pass another folder")
    tmp = os.path.join(parent, f".{os.path.basename(folder)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    aio = AsyncIO()
    data_path = os.path.join(tmp, "states.bin")
    offset, params, handles = 0, [], []
    for index, shape in enumerate(shapes):
        entry = {"shape": list(shape), "tensors": {}}
        st = state_dict["state"].get(index)
        if st is not None:
            entry["step"] = int(float(st["step"]))
            for name in ("exp_avg", "exp_avg_sq", "master_param"):
                if name not in st:
                    continue
                t = st[name].detach().to("cpu").contiguous()
                buf = pinned_empty(t.numel(), t.dtype)
                buf.copy_(t.reshape(-1))
                nbytes = buf.numel() * buf.element_size()
                entry["tensors"][name] = {"offset": offset, "bytes": nbytes,
                                          "dtype": str(t.dtype).replace("torch.", "")}
                handles.append((aio.async_pwrite(buf, data_path, offset), buf))
                offset += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        params.append(entry)
    for h, _ in handles:
        h.wait()
    groups = [{k: _jsonable(v) for k, v in g.items()} for g in state_dict["param_groups"]]
    meta = {"format": FORMAT, "version": VERSION, "param_groups": groups, "params": params,
            "data_bytes": offset}
    if not handles:
        open(data_path, "wb").close()
    with open(os.path.join(tmp, "optimizer.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    _fsync_path(data_path)
    _fsync_path(tmp)
    old = None
    if os.path.exists(folder):
        old = os.path.join(parent, f".{os.path.basename(folder)}.old-{os.getpid()}")
        os.rename(folder, old)
    os.rename(tmp, folder)
    _fsync_path(parent)
    if old:
        shutil.rmtree(old)


def load_folder(folder, shapes):
    folder = os.fspath(folder)
    meta_path = os.path.join(folder, "optimizer.json")
    if not os.path.isfile(meta_path):
        raise error("not an optimizer checkpoint folder (no optimizer.json)", folder,
                    "pass a folder written by OffloadOptimizer.save()")
    with open(meta_path) as f:
        meta = json.load(f)
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise error(f"unknown checkpoint format {meta.get('format')!r} version "
                    f"{meta.get('version')!r}", meta_path, "load a folder written by save()")
    if [tuple(p["shape"]) for p in meta["params"]] != [tuple(s) for s in shapes]:
        raise error("the checkpoint's parameter shapes are not this optimizer's", meta_path,
                    "load it into the same model, with the parameters in the same order")
    data_path = os.path.join(folder, "states.bin")
    aio = AsyncIO()
    state, pending = {}, []
    for index, p in enumerate(meta["params"]):
        if "step" not in p:
            continue
        st = {"step": torch.tensor(float(p["step"]))}
        for name, t in p["tensors"].items():
            dtype = _DTYPES[t["dtype"]]
            buf = pinned_empty(t["bytes"] // torch.empty((), dtype=dtype).element_size(), dtype)
            pending.append(aio.async_pread(buf, data_path, t["offset"]))
            st[name] = buf.view(p["shape"])
        state[index] = st
    for h in pending:
        h.wait()
    groups = meta["param_groups"]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    return {"state": state, "param_groups": groups}
