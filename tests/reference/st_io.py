"""A small safetensors reader / writer on numpy, for the PyTorch comparisons.

Debian's python3 has numpy and torch but not the `safetensors` package, so this implements the
format (https://huggingface.co/docs/safetensors) directly:

    u64 (little-endian) N | N bytes of JSON header | data
    header: {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
             "__metadata__": {"str": "str"}}  (optional)
    offsets are relative to the start of the data; tensors are little-endian, C order, and
    together cover the data exactly (no gaps, no overlap).

numpy has no bfloat16, so BF16 travels as uint16 bit patterns: save() writes a `Bf16` wrapper
as BF16, and load() returns BF16 tensors widened to float32 (exact) or, with raw_bf16=True, as
uint16 bits. f32_to_bf16_bits() rounds to nearest even, as torch's .to(torch.bfloat16) does.
"""
import json
import struct

import numpy as np

# safetensors dtype name -> little-endian numpy dtype (BF16 handled apart)
_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}
_NAMES = {np.dtype(v).newbyteorder("<") if np.dtype(v).itemsize > 1 else np.dtype(v): k
          for k, v in _DTYPES.items()}
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the reference implementation's limit


class Bf16:
    """A tensor to be written as BF16: `bits` holds the uint16 patterns."""

    def __init__(self, bits):
        bits = np.asarray(bits)
        if bits.dtype != np.uint16:
            raise TypeError(f"Bf16 wants uint16 bit patterns, got {bits.dtype}")
        self.bits = bits

    @classmethod
    def from_float(cls, x):
        return cls(f32_to_bf16_bits(x))

    @property
    def shape(self):
        return self.bits.shape


def f32_to_bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out = rounded.astype(np.uint16)
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # keep sign, force a quiet NaN
    return out


def bf16_bits_to_f32(bits):
    """bf16 bit patterns (uint16) -> float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def save(path, tensors, metadata=None):
    """Write {name: ndarray | Bf16} to `path`. Arrays keep their dtype (must be one safetensors
    knows); names are written sorted, as the reference implementation does."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("'__metadata__' is not a tensor name")
        t = tensors[name]
        if isinstance(t, Bf16):
            dtype_name, data = "BF16", np.asarray(t.bits, dtype="<u2")
        else:
            a = np.asarray(t)
            key = a.dtype.newbyteorder("<") if a.dtype.itemsize > 1 else a.dtype
            if key not in _NAMES:
                raise TypeError(f"{name}: dtype {a.dtype} has no safetensors name")
            dtype_name = _NAMES[key]
            data = np.asarray(a, dtype=_DTYPES[dtype_name])
        raw = data.tobytes(order="C")  # (ascontiguousarray would turn a 0-d array into 1-d)
        header[name] = {"dtype": dtype_name, "shape": [int(s) for s in data.shape],
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load(path, raw_bf16=False, with_metadata=False):
    """Read `path` into {name: ndarray}. Raises ValueError naming the file on any malformed
    header (bad JSON, unknown dtype, size not matching the shape, gaps, overlaps, data past the
    end of the file, trailing bytes)."""
    with open(path, "rb") as f:
        data = f.read()

    def bad(what):
        return ValueError(f"{path}: not a valid safetensors file: {what}")

    if len(data) < 8:
        raise bad(f"{len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > _MAX_HEADER_BYTES or 8 + n > len(data):
        raise bad(f"header length {n} does not fit in a file of {len(data)} bytes")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise bad("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    body = memoryview(data)[8 + n:]
    spans, out = [], {}
    for name, info in header.items():
        try:
            dtype_name, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise bad(f"{name}: entry needs dtype, shape and two data_offsets: {info!r}") from None
        if dtype_name != "BF16" and dtype_name not in _DTYPES:
            raise bad(f"{name}: unknown dtype {dtype_name!r}")
        if not all(isinstance(s, int) and s >= 0 for s in shape):
            raise bad(f"{name}: bad shape {shape!r}")
        itemsize = 2 if dtype_name == "BF16" else np.dtype(_DTYPES[dtype_name]).itemsize
        numel = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= len(body)) or end - begin != numel * itemsize:
            raise bad(f"{name}: data_offsets [{begin}, {end}] do not hold {dtype_name} "
                      f"{list(shape)} within {len(body)} data bytes")
        spans.append((begin, end, name))
        a = np.frombuffer(body[begin:end], dtype="<u2" if dtype_name == "BF16"
                          else _DTYPES[dtype_name]).reshape(shape)
        if dtype_name == "BF16" and not raw_bf16:
            a = bf16_bits_to_f32(a)
        out[name] = a.copy()  # own the memory; native byte order
    expected = 0
    for begin, end, name in sorted(spans):
        if begin != expected:
            raise bad(f"{name}: data starts at {begin}, expected {expected} (gap or overlap)")
        expected = end
    if expected != len(body):
        raise bad(f"{len(body) - expected} bytes after the last tensor")
    return (out, metadata) if with_metadata else out
