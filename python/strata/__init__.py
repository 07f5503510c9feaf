"""strata for PyTorch users.

    strata.optim.CPUAdam             drop-in for deepspeed.ops.adam.DeepSpeedCPUAdam
    strata.offload.OffloadOptimizer  fp32 master weights and Adam states in pinned memory or on
                                     NVMe (io_uring, checksummed), gradients taken off the
                                     device by hooks as backward produces them
    strata.io.AsyncIO                tensors to and from files through strata's io_uring engine
    strata.io.pinned_empty           pinned host tensors from strata's pool
    strata.StrataError               every error of strata: what happened, where, what to do
    python -m strata.bench adam|aio|offload [--json]

Tensors cross into C++ by DLPack; the extension does not link libtorch, so one build works
with any PyTorch.
"""
from strata._strata import StrataError, cpu_count, simd_level
from strata import io, offload, optim  # noqa: E402  (after the extension: they use it)

__version__ = "0.1.0"

__all__ = ["StrataError", "cpu_count", "simd_level", "io", "offload", "optim", "__version__"]
