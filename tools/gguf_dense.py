#!/usr/bin/env python3
"""gguf_dense.py — writes a random dense llama-architecture GGUF (v3) for scripts/bench-llamacpp.

The shapes default to those of tools/mkdense.c (hidden 1024, 5 layers, FFN 4096, 8 query / 2 KV
heads of 128, vocab 32000, untied output matrix), so llama.cpp reads per decoded token the same
matrices the Inkling engine reads. Weights are random, uniform in [-scale, scale] (0.03, as
mkdense); norms are 1.

  --type bf16|f16   each weight one of 256 evenly spaced levels in [-scale, scale]
  --type q8_0|q4_0  ggml block formats (fp16 scale + 32 codes): with numpy, uniform floats quantized
                    the way ggml quantizes (Q8_0: d = amax/127; Q4_0: d = max/-8, codes 0..15);
                    without numpy, random codes with d = scale/127 (Q8_0) or scale/8 (Q4_0) are
                    written directly, which is what quantizing uniform weights gives (same sizes,
                    same value range, same kernels).

The tokenizer is a fake 32000-token SentencePiece-style vocabulary (<unk>, <s>, </s>, the 256 byte
tokens, then "\u2581t<i>"); the benchmark feeds token ids, so the text never matters.

Prints one line: "gguf: PATH type T file_bytes N weight_bytes N per_token_bytes N" (weight_bytes:
every tensor; per_token_bytes: what one decode step reads, one embedding row instead of the table).

Usage: gguf_dense.py OUT.gguf --type T [--hidden 1024] [--layers 5] [--ffn 4096] [--heads 8]
                     [--kv-heads 2] [--vocab 32000] [--scale 0.03] [--seed 1] [--no-numpy]
"""
import argparse
import os
import random
import struct
import sys

ALIGN = 32
# ggml tensor types and llama file types (ggml.h / llama.h numbering)
GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}
FTYPE = {"f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}
# GGUF metadata value types
U32, I32, F32, BOOL, STR, ARR, U64 = 4, 5, 6, 7, 8, 9, 10


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gstr(key) + struct.pack("<I", vtype)
    if vtype == U32:
        out += struct.pack("<I", value)
    elif vtype == I32:
        out += struct.pack("<i", value)
    elif vtype == F32:
        out += struct.pack("<f", value)
    elif vtype == BOOL:
        out += struct.pack("<B", 1 if value else 0)
    elif vtype == STR:
        out += gstr(value)
    elif vtype == U64:
        out += struct.pack("<Q", value)
    else:
        raise ValueError(vtype)
    return out


def kv_array(key, etype, values):
    out = gstr(key) + struct.pack("<IIQ", ARR, etype, len(values))
    if etype == STR:
        out += b"".join(gstr(v) for v in values)
    elif etype == F32:
        out += struct.pack("<%df" % len(values), *values)
    elif etype == I32:
        out += struct.pack("<%di" % len(values), *values)
    else:
        raise ValueError(etype)
    return out


def tensor_bytes(gtype, rows, cols):
    n = rows * cols
    if gtype == "f32":
        return 4 * n
    if gtype in ("f16", "bf16"):
        return 2 * n
    if gtype == "q8_0":
        return n // 32 * 34
    if gtype == "q4_0":
        return n // 32 * 18
    raise ValueError(gtype)


def f32_to_bf16_bits(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


class PureGen:
    """Random tensor data without numpy: byte-level tricks only (translate, strided slices)."""

    def __init__(self, seed, scale):
        self.rng = random.Random(seed)
        self.scale = scale

    def data(self, gtype, rows, cols):
        n = rows * cols
        s = self.scale
        if gtype in ("bf16", "f16"):
            conv = f32_to_bf16_bits if gtype == "bf16" else f16_bits
            lv = [conv(s * (2.0 * (k + 0.5) / 256.0 - 1.0)) for k in range(256)]
            lo = bytes(v & 0xFF for v in lv)
            hi = bytes(v >> 8 for v in lv)
            r = self.rng.randbytes(n)
            out = bytearray(2 * n)
            out[0::2] = r.translate(lo)
            out[1::2] = r.translate(hi)
            return bytes(out)
        if gtype in ("q8_0", "q4_0"):
            bs = 34 if gtype == "q8_0" else 18
            d = f16_bits(s / 127.0 if gtype == "q8_0" else s / 8.0)
            nb = n // 32
            out = bytearray(self.rng.randbytes(nb * bs))
            out[0::bs] = bytes([d & 0xFF]) * nb
            out[1::bs] = bytes([d >> 8]) * nb
            return bytes(out)
        raise ValueError(gtype)


class NumpyGen:
    """Uniform f32 weights, converted / quantized as ggml does (row chunks to bound memory)."""

    def __init__(self, seed, scale, np):
        self.np = np
        self.rng = np.random.default_rng(seed)
        self.scale = scale

    def chunk(self, gtype, w):
        np = self.np
        if gtype == "bf16":
            u = w.view(np.uint32).astype(np.uint64)
            return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
        if gtype == "f16":
            return w.astype("<f2").tobytes()
        b = w.reshape(-1, 32)
        if gtype == "q8_0":
            amax = np.abs(b).max(axis=1)
            d = amax / 127.0
            inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0).astype(np.float32)
            q = np.clip(np.round(b * inv[:, None]), -127, 127).astype(np.int8)
            return np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1).tobytes()
        if gtype == "q4_0":
            idx = np.abs(b).argmax(axis=1)
            mx = b[np.arange(b.shape[0]), idx]
            d = mx / -8.0
            inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1.0), 0.0).astype(np.float32)
            q = np.minimum(15, (b * inv[:, None] + 8.5).astype(np.int8)).astype(np.uint8)
            qs = q[:, :16] | (q[:, 16:] << 4)
            return np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2), qs], axis=1).tobytes()
        raise ValueError(gtype)

    def data(self, gtype, rows, cols):
        parts = []
        step = max(1, (1 << 22) // cols)
        for r0 in range(0, rows, step):
            r = min(step, rows - r0)
            w = self.rng.uniform(-self.scale, self.scale, size=(r, cols)).astype(self.np.float32)
            parts.append(self.chunk(gtype, w))
        return b"".join(parts)


def main():
    ap = argparse.ArgumentParser(description="random dense llama GGUF writer")
    ap.add_argument("out")
    ap.add_argument("--type", required=True, choices=["bf16", "f16", "q8_0", "q4_0"])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--scale", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-numpy", action="store_true")
    a = ap.parse_args()
    H, F, V, L = a.hidden, a.ffn, a.vocab, a.layers
    hd = H // a.heads
    if H % a.heads or a.heads % a.kv_heads or H % 32 or F % 32 or V < 300:
        sys.exit("gguf_dense: inconsistent shapes")

    np = None
    if not a.no_numpy:
        try:
            import numpy as np  # noqa: F811
        except ImportError:
            np = None
    gen = NumpyGen(a.seed, a.scale, np) if np is not None else PureGen(a.seed, a.scale)

    wt = a.type
    # (name, ggml type, rows (ne1), cols (ne0)); 1-D tensors have rows 1
    tensors = [("token_embd.weight", wt, V, H)]
    for i in range(L):
        p = "blk.%d." % i
        tensors += [
            (p + "attn_norm.weight", "f32", 1, H),
            (p + "attn_q.weight", wt, a.heads * hd, H),
            (p + "attn_k.weight", wt, a.kv_heads * hd, H),
            (p + "attn_v.weight", wt, a.kv_heads * hd, H),
            (p + "attn_output.weight", wt, H, a.heads * hd),
            (p + "ffn_norm.weight", "f32", 1, H),
            (p + "ffn_gate.weight", wt, F, H),
            (p + "ffn_up.weight", wt, F, H),
            (p + "ffn_down.weight", wt, H, F),
        ]
    tensors += [("output_norm.weight", "f32", 1, H), ("output.weight", wt, V, H)]

    meta = [
        kv("general.architecture", STR, "llama"),
        kv("general.name", STR, "inkling-dense-twin"),
        kv("general.alignment", U32, ALIGN),
        kv("general.file_type", U32, FTYPE[wt]),
        kv("llama.context_length", U32, a.ctx),
        kv("llama.embedding_length", U32, H),
        kv("llama.block_count", U32, L),
        kv("llama.feed_forward_length", U32, F),
        kv("llama.attention.head_count", U32, a.heads),
        kv("llama.attention.head_count_kv", U32, a.kv_heads),
        kv("llama.rope.dimension_count", U32, hd),
        kv("llama.rope.freq_base", F32, 10000.0),
        kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-6),
        kv("llama.vocab_size", U32, V),
        kv("tokenizer.ggml.model", STR, "llama"),
    ]
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    toks += ["\u2581t%d" % i for i in range(len(toks), V)]
    types += [1] * (V - len(types))
    scores = [0.0] * 259 + [-float(i) for i in range(V - 259)]
    meta += [
        kv_array("tokenizer.ggml.tokens", STR, toks),
        kv_array("tokenizer.ggml.scores", F32, scores),
        kv_array("tokenizer.ggml.token_type", I32, types),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
        kv("tokenizer.ggml.unknown_token_id", U32, 0),
        kv("tokenizer.ggml.add_bos_token", BOOL, False),
        kv("tokenizer.ggml.add_eos_token", BOOL, False),
    ]

    infos, off = [], 0
    for name, gt, rows, cols in tensors:
        dims = [cols] if rows == 1 else [cols, rows]
        infos.append(gstr(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
                     + struct.pack("<IQ", GGML[gt], off))
        off += tensor_bytes(gt, rows, cols)
        off = (off + ALIGN - 1) // ALIGN * ALIGN

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * (-len(head) % ALIGN)
    tmp = a.out + ".tmp"
    weight_bytes = per_token = 0
    with open(tmp, "wb") as f:
        f.write(head)
        pos = 0
        for name, gt, rows, cols in tensors:
            nbytes = tensor_bytes(gt, rows, cols)
            if gt == "f32":
                f.write(struct.pack("<f", 1.0) * (rows * cols))
            else:
                blob = gen.data(gt, rows, cols)
                assert len(blob) == nbytes, (name, len(blob), nbytes)
                f.write(blob)
            pos += nbytes
            pad = -pos % ALIGN
            f.write(b"\0" * pad)
            pos += pad
            weight_bytes += nbytes
            per_token += nbytes // rows if name == "token_embd.weight" else nbytes
    os.replace(tmp, a.out)
    print("gguf: %s type %s file_bytes %d weight_bytes %d per_token_bytes %d numpy %s"
          % (a.out, wt, os.path.getsize(a.out), weight_bytes, per_token, "yes" if np is not None else "no"))


if __name__ == "__main__":
    main()
