"""strata.io: tensors to and from files through strata's I/O engine (io_uring, every completion
checked; a pread/pwrite thread pool where io_uring is unavailable), and pinned host tensors.

    aio = strata.io.AsyncIO(block_size=1 << 20, queue_depth=32)
    buf = strata.io.pinned_empty((1024, 1024), torch.float32)   # 4 KiB-aligned, pinned
    aio.pwrite(buf, "/nvme/x.bin")                              # blocking
    h = aio.async_pread(buf, "/nvme/x.bin", offset=0)           # returns at once
    ... compute ...
    h.wait()                                                    # raises StrataError on failure

O_DIRECT is used where the file system allows it and the request is 4 KiB-aligned (tensor
address, offset and length: pinned_empty's tensors are); anything else goes through the page
cache, so no caller pads. Errors are strata.StrataError naming the file, the offset and the
errno. Tensors must be contiguous host tensors; any dtype.
"""
import math

import torch

from strata import _strata
from strata._util import error

_ALIGN = 4096


def _install_pin_functions():
    # Pinned for the device's DMA when this torch has CUDA and a device: cudaHostRegister on
    # every buffer of strata's pool, as the runtime's pin hook does. Without, plain memory.
    if not torch.cuda.is_available():
        return
    cudart = torch.cuda.cudart()

    def pin(ptr, nbytes):
        rc = cudart.cudaHostRegister(ptr, nbytes, 0)
        if int(rc) != 0:
            raise RuntimeError(f"cudaHostRegister returned {rc}")

    def unpin(ptr):
        cudart.cudaHostUnregister(ptr)

    _strata.set_pin_functions(pin, unpin)


_install_pin_functions()


def pinned_empty(shape, dtype=torch.float32):
    """A contiguous host tensor of `shape` and `dtype` in strata's pinned pool (zeroed,
    4 KiB-aligned; pinned with cudaHostRegister when torch sees a CUDA device). The pool's
    budget is STRATA_PINNED_MEMORY (e.g. "16GiB"), else half the machine's memory; past it,
    StrataError says what is in use."""
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise error(f"shape {shape} has a negative size", "pinned_empty", "pass sizes >= 0")
    if not isinstance(dtype, torch.dtype):
        raise error(f"dtype {dtype!r} is not a torch.dtype", "pinned_empty",
                    "pass e.g. torch.float32")
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = math.prod(shape) * itemsize
    raw = _strata.pinned_bytes(max(nbytes, 1))  # a zero-size tensor still gets an address
    return raw[:nbytes].view(dtype).view(shape)


def pinned_stats():
    """The pool's budget, bytes in use, peak and live buffers."""
    return _strata.pinned_stats()


class IoHandle:
    """A request in flight: wait() blocks until done and raises StrataError if it failed;
    done() polls. Holds the tensor until it is finished."""

    def __init__(self, request, tensor):
        self._request, self._tensor = request, tensor

    def wait(self):
        try:
            self._request.wait()
        finally:
            self._tensor = None

    def done(self):
        return self._request.done()


class AsyncIO:
    """strata's I/O engine for tensors. block_size: bytes per piece (a multiple of 4096);
    queue_depth: pieces in flight per engine thread; parallelism: engine threads (rings);
    backend: "auto" | "io_uring" | "threads"; direct: "auto" (O_DIRECT where possible) |
    "on" (O_DIRECT or an error) | "off". Faults for tests come from STRATA_FAULT_INJECTION
    (as for `strata train`) or `fault` ("read:2:EIO", offload/fault_injection.h)."""

    def __init__(self, block_size=1 << 20, queue_depth=32, parallelism=1, backend="auto",
                 direct="auto", fault=None):
        self._io = _strata.AsyncIO(int(block_size), int(queue_depth), int(parallelism),
                                   backend, direct, fault)

    def describe(self):
        return self._io.describe()

    def stats(self):
        s = self._io.stats()
        return {k: getattr(s, k) for k in ("bytes_read", "bytes_written", "requests", "pieces",
                                           "short_transfers", "retries")}

    @staticmethod
    def _check(tensor, what):
        if not isinstance(tensor, torch.Tensor):
            raise error(f"{what} needs a torch.Tensor, got {type(tensor).__name__}", what,
                        "pass a host tensor")
        if tensor.device.type != "cpu":
            raise error(f"{what}'s tensor is on {tensor.device}", what,
                        "pass a host tensor (strata.io.pinned_empty)")
        if not tensor.is_contiguous():
            raise error(f"{what}'s tensor is not contiguous", what, "pass tensor.contiguous()")
        return tensor.detach()

    @staticmethod
    def _offset(offset, what):
        if not isinstance(offset, int) or offset < 0:
            raise error(f"offset {offset!r} is not a byte offset >= 0", what,
                        "pass an integer offset")
        return offset

    def async_pread(self, tensor, path, offset=0):
        t = self._check(tensor, "pread")
        req = self._io.submit_read(t.view(-1).view(torch.uint8) if t.numel() else t, str(path),
                                   self._offset(offset, "pread"))
        return IoHandle(req, t)

    def async_pwrite(self, tensor, path, offset=0):
        t = self._check(tensor, "pwrite")
        req = self._io.submit_write(t.view(-1).view(torch.uint8) if t.numel() else t, str(path),
                                    self._offset(offset, "pwrite"))
        return IoHandle(req, t)

    def pread(self, tensor, path, offset=0):
        self.async_pread(tensor, path, offset).wait()
        return tensor

    def pwrite(self, tensor, path, offset=0):
        self.async_pwrite(tensor, path, offset).wait()
        return tensor


__all__ = ["AsyncIO", "IoHandle", "pinned_empty", "pinned_stats"]
