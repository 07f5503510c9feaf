"""Where OffloadOptimizer keeps each parameter's fp32 master weights and Adam moments: in
strata's pinned pool ("cpu") or in its NVMe swap space ("nvme": one checksummed extent per
state, streamed through two sets of pinned staging buffers so that the next parameter's
states are read while the current one is updated). Both hand the optimizer the same three
fp32 host tensors per parameter, so the Adam step, and its bits, are the same."""
import os

import torch

from strata import _strata
from strata._util import error
from strata.io import pinned_empty

KINDS = ("master", "exp_avg", "exp_avg_sq")


class CpuStore:
    """States resident in pinned host memory."""

    def __init__(self, sizes):
        self.tensors = [{k: pinned_empty(n, torch.float32) for k in KINDS} for n in sizes]

    def describe(self):
        return "pinned host memory"

    def init(self, i, master):
        self.tensors[i]["master"][:master.numel()].copy_(master)

    def update(self, order, fn):
        """fn(i, states) for i in order, each states a dict of fp32 host tensors."""
        for i in order:
            fn(i, self.tensors[i])

    def read(self, i):
        return {k: t.clone() for k, t in self.tensors[i].items()}

    def write(self, i, states):
        for k in KINDS:
            self.tensors[i][k][:states[k].numel()].copy_(states[k].reshape(-1))

    def close(self):
        self.tensors = []


class NvmeStore:
    """States in strata's swap space under nvme_path (io_uring, O_DIRECT where the file system
    allows it, xxh3 checksums on every block when checksum=True)."""

    def __init__(self, sizes, nvme_path, block_size, queue_depth, checksum):
        if nvme_path is None:
            raise error("states='nvme' needs nvme_path", "OffloadOptimizer",
                        "pass nvme_path='/path/on/nvme' (a folder that exists)")
        paths = [nvme_path] if isinstance(nvme_path, (str, os.PathLike)) else list(nvme_path)
        paths = [os.fspath(p) for p in paths]
        for p in paths:
            if not os.path.isdir(p):
                raise error("nvme_path is not an existing folder", p,
                            "create the folder first, or pass another nvme_path")
        total = sum(3 * 4 * n for n in sizes)
        # Reserved up front: a disk too small is found now, not in the middle of a step.
        self.swap = _strata.SwapSpace(paths, int(block_size), int(queue_depth), bool(checksum),
                                      int(total))
        self.extents = [{k: self.swap.allocate(f"p{i}/{k}", max(4 * n, 4)) for k in KINDS}
                        for i, n in enumerate(sizes)]
        self.sizes = list(sizes)
        top = max(sizes, default=1)
        # Two staging sets: parameter j's reads land in one while j-1 is updated in the other.
        self.stage = [{k: pinned_empty(max(top, 1), torch.float32) for k in KINDS}
                      for _ in range(2)]
        self.pending_writes = [[], []]
        self.checksum = checksum

    def describe(self):
        s = self.swap.stats()
        return (f"NVMe swap {', '.join(s['run_dirs'])} (O_DIRECT {'on' if s['direct'] else 'off'}, "
                f"checksums {'on' if self.checksum else 'off'})")

    def _views(self, slot, i):
        n = max(self.sizes[i], 1)
        return {k: self.stage[slot][k][:n] for k in KINDS}

    def _wait_writes(self, slot):
        for h in self.pending_writes[slot]:
            h.wait()
        self.pending_writes[slot] = []

    def _start_reads(self, slot, i):
        self._wait_writes(slot)  # the staging set is free only when its last writes are done
        views = self._views(slot, i)
        return views, [self.swap.read(self.extents[i][k], views[k].view(torch.uint8))
                       for k in KINDS]

    def _start_writes(self, slot, i, views):
        self.pending_writes[slot] += [self.swap.write(self.extents[i][k],
                                                      views[k].view(torch.uint8))
                                      for k in KINDS]

    def init(self, i, master):
        views = self._views(0, i)
        self._wait_writes(0)
        views["master"].zero_()
        views["master"][:master.numel()].copy_(master)
        views["exp_avg"].zero_()
        views["exp_avg_sq"].zero_()
        self._start_writes(0, i, views)
        self._wait_writes(0)

    def update(self, order, fn):
        order = list(order)
        if not order:
            return
        nxt = self._start_reads(0, order[0])
        for j, i in enumerate(order):
            slot = j % 2
            views, reads = nxt
            if j + 1 < len(order):
                nxt = self._start_reads(1 - slot, order[j + 1])
            for h in reads:
                h.wait()
            fn(i, {k: v[:self.sizes[i]] for k, v in views.items()})
            self._start_writes(slot, i, views)
        self._wait_writes(0)
        self._wait_writes(1)

    def read(self, i):
        views, reads = self._start_reads(0, i)
        for h in reads:
            h.wait()
        return {k: v[:self.sizes[i]].clone() for k, v in views.items()}

    def write(self, i, states):
        views = self._views(0, i)
        self._wait_writes(0)
        for k in KINDS:
            views[k][:states[k].numel()].copy_(states[k].reshape(-1))
        self._start_writes(0, i, views)
        self._wait_writes(0)

    def close(self):
        for slot in (0, 1):
            self._wait_writes(slot)
        self.swap = None  # removes its files and folders


def make_store(states, sizes, nvme_path, block_size, queue_depth, checksum):
    if states == "cpu":
        return CpuStore(sizes)
    if states == "nvme":
        return NvmeStore(sizes, nvme_path, block_size, queue_depth, checksum)
    raise error(f"states={states!r} is not 'cpu' or 'nvme'", "OffloadOptimizer",
                "pass states='cpu' (pinned memory) or states='nvme' with nvme_path")
