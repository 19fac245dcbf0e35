"""Minimal safetensors reader/writer (the format: u64 LE header length, JSON header with
dtype/shape/data_offsets per tensor, then the raw little-endian payload)."""
import json
import struct

import numpy as np
import torch

_DT = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2),
       "I32": (torch.int32, 4), "I64": (torch.int64, 8)}
_NAME = {v[0]: k for k, v in _DT.items()}


def load_file(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    hdr = json.loads(buf[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        dt, size = _DT[info["dtype"]]
        a, b = info["data_offsets"]
        raw = bytearray(buf[base + a:base + b])
        t = torch.frombuffer(raw, dtype=torch.uint8) if b > a else torch.zeros(0, dtype=torch.uint8)
        out[name] = t.view(dt).reshape(info["shape"]).clone()
    return out


def save_file(tensors, path, metadata=None):
    hdr, chunks, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        hdr[name] = {"dtype": _NAME[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata:
        hdr["__metadata__"] = metadata
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
