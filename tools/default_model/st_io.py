"""Minimal safetensors reader/writer (stdlib + numpy). BF16 is read into float32 exactly."""
import json
import struct

import numpy as np

_NP = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U16": np.uint16}


def bf16_bits(a):
    """float32 array (already holding bf16 values, or any float32) -> uint16 bf16 bits, RNE."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r


def bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def write(path, tensors, metadata=None):
    """tensors: name -> (dtype, numpy array); dtype 'BF16' takes float32 values."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        if dt == "BF16":
            data = bf16_bits(arr).tobytes()
        else:
            data = np.ascontiguousarray(arr, dtype=_NP[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(np.shape(arr)), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read(path):
    """-> (name -> numpy array (BF16 as float32), metadata)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        raw = buf[base + a:base + b]
        if info["dtype"] == "BF16":
            arr = bits_to_f32(np.frombuffer(raw, dtype=np.uint16))
        else:
            arr = np.frombuffer(raw, dtype=_NP[info["dtype"]]).copy()
        out[name] = arr.reshape(info["shape"])
    return out, meta
