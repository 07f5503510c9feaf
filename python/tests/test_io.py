"""strata.io: AsyncIO round trips (random sizes and offsets, aligned and not, every dtype),
concurrent handles, a file too short, faults injected through the engine's completion hook,
and pinned_empty."""
import os
import random
import threading

import pytest

torch = pytest.importorskip("torch")
import strata  # noqa: E402
from strata.io import AsyncIO, pinned_empty, pinned_stats  # noqa: E402


@pytest.fixture
def scratch(tmp_path_factory):
    # Under the build folder when there is one: a real disk file system (O_DIRECT), not tmpfs.
    base = os.environ.get("STRATA_BUILD_DIR")
    if base:
        d = os.path.join(base, "python", "scratch", f"io-{os.getpid()}-{random.getrandbits(32):x}")
        os.makedirs(d)
        yield d
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)
    else:
        yield str(tmp_path_factory.mktemp("io"))


@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_random_round_trips(scratch, backend):
    rng = random.Random(30)
    aio = AsyncIO(block_size=64 << 10, queue_depth=8, backend=backend)
    path = os.path.join(scratch, "rt.bin")
    for i in range(40):
        aligned = i % 2 == 0
        dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16, torch.uint8, torch.int64])
        itemsize = torch.empty((), dtype=dtype).element_size()
        if aligned:
            nbytes = rng.randrange(1, 64) * 4096
            offset = rng.randrange(0, 256) * 4096
            n = nbytes // itemsize
            src = pinned_empty(n, dtype)
        else:
            n = rng.randrange(1, 300_000)
            offset = rng.randrange(0, 1 << 20)
            src = torch.empty(n + 1, dtype=dtype)[1:]  # an address off 4 KiB
        src.copy_((torch.rand(n) * 100).to(dtype))
        aio.pwrite(src, path, offset)
        dst = torch.zeros(n, dtype=dtype) if not aligned else pinned_empty(n, dtype)
        aio.pread(dst, path, offset)
        assert torch.equal(src, dst), (i, dtype, n, offset)
        with open(path, "rb") as f:  # the bytes are where they should be
            f.seek(offset)
            assert f.read(16) == src.view(-1).view(torch.uint8)[:16].numpy().tobytes()


def test_concurrent_handles(scratch):
    aio = AsyncIO(block_size=32 << 10, queue_depth=16, parallelism=2)
    path = os.path.join(scratch, "conc.bin")
    chunks = [torch.arange(i * 10_000, (i + 1) * 10_000, dtype=torch.int32) for i in range(16)]
    handles = [aio.async_pwrite(c, path, i * 40_000) for i, c in enumerate(chunks)]
    for h in handles:
        h.wait()
    outs = [torch.empty(10_000, dtype=torch.int32) for _ in chunks]
    handles = [aio.async_pread(o, path, i * 40_000) for i, o in enumerate(outs)]
    assert all(isinstance(h.done(), bool) for h in handles)
    for h in reversed(handles):
        h.wait()
    assert all(torch.equal(a, b) for a, b in zip(chunks, outs))

    # Several Python threads on one AsyncIO, each with its own file.
    errors = []

    def worker(k):
        try:
            t = torch.full((50_000,), float(k))
            p = os.path.join(scratch, f"t{k}.bin")
            for _ in range(5):
                aio.pwrite(t, p)
                back = torch.empty_like(t)
                aio.pread(back, p)
                assert torch.equal(back, t)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_short_file_and_bad_input(scratch):
    aio = AsyncIO()
    path = os.path.join(scratch, "short.bin")
    aio.pwrite(torch.ones(100), path)
    with pytest.raises(strata.StrataError) as e:
        aio.pread(torch.empty(200), path, offset=8)
    msg = str(e.value)
    assert "too short" in msg and path in msg and "offset 8" in msg and "400" in msg
    with pytest.raises(strata.StrataError, match="No such file"):
        aio.pread(torch.empty(4), os.path.join(scratch, "missing", "x.bin"))
    with pytest.raises(strata.StrataError, match="not contiguous"):
        aio.pwrite(torch.ones(4, 4).t(), path)
    with pytest.raises(strata.StrataError, match="offset"):
        aio.pwrite(torch.ones(4), path, offset=-1)
    with pytest.raises(strata.StrataError, match="block_size"):
        AsyncIO(block_size=1000)
    with pytest.raises(strata.StrataError, match="not aligned"):
        AsyncIO(direct="on").pwrite(torch.ones(3), path, offset=1)
    aio.pwrite(torch.empty(0), path)  # nothing to do is fine


@pytest.mark.parametrize("fault,permanent", [("read:2:EIO", True), ("write:1:ENOSPC", True),
                                             ("read:1:EAGAIN", False), ("read:1:short", False),
                                             ("write:2:EINTR", False)])
def test_injected_faults(scratch, fault, permanent):
    # Through the engine's completion hook (offload/fault_injection.h), as `strata train`'s
    # STRATA_FAULT_INJECTION does: a permanent error names the file, the offset and the errno;
    # a transient one is retried and the data are intact.
    aio = AsyncIO(block_size=64 << 10, queue_depth=4, fault=fault)
    path = os.path.join(scratch, "fault.bin")
    src = pinned_empty(64 << 10, torch.float32)  # 4 pieces of 64 KiB
    src.copy_(torch.randn(src.numel()))
    dst = pinned_empty(src.numel(), torch.float32)
    if not permanent:
        aio.pwrite(src, path)
        aio.pread(dst, path)
        assert torch.equal(src, dst)
        assert aio.stats()["retries"] + aio.stats()["short_transfers"] >= 1
        return
    errno_name = fault.split(":")[2]
    with pytest.raises(strata.StrataError) as e:
        aio.pwrite(src, path)
        aio.pread(dst, path)
    msg = str(e.value)
    assert errno_name in msg and path in msg and "offset" in msg


def test_fault_from_environment(scratch, monkeypatch):
    monkeypatch.setenv("STRATA_FAULT_INJECTION", "read:1:EIO:env.bin")
    aio = AsyncIO()
    path = os.path.join(scratch, "env.bin")
    aio.pwrite(torch.ones(1024), path)
    with pytest.raises(strata.StrataError, match="EIO"):
        aio.pread(torch.empty(1024), path)
    monkeypatch.setenv("STRATA_FAULT_INJECTION", "read:x:EIO")
    with pytest.raises(strata.StrataError, match="STRATA_FAULT_INJECTION"):
        AsyncIO()


def test_pinned_empty():
    before = pinned_stats()["current_bytes"]
    t = pinned_empty((3, 1000), torch.bfloat16)
    assert t.shape == (3, 1000) and t.dtype == torch.bfloat16 and t.is_contiguous()
    assert t.data_ptr() % 4096 == 0 and torch.count_nonzero(t) == 0
    assert pinned_stats()["current_bytes"] >= before + 6000
    del t
    assert pinned_stats()["current_bytes"] == before
    assert pinned_empty(0).numel() == 0
    with pytest.raises(strata.StrataError, match="negative"):
        pinned_empty((-1, 2))


def test_pinned_budget_error(monkeypatch):
    # The budget is read once per process, so a child process checks it.
    import subprocess
    import sys
    code = ("import torch, strata.io as s\n"
            "try:\n    s.pinned_empty(1 << 22, torch.float32)\n"
            "except strata.StrataError as e:\n    print('ERR', e)\n")
    env = dict(os.environ, STRATA_PINNED_MEMORY="1MiB")
    out = subprocess.run([sys.executable, "-c", "import strata\n" + code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "ERR" in out.stdout and "STRATA_PINNED_MEMORY" in out.stdout, out.stdout + out.stderr
