#!/usr/bin/env python3
"""twin.py — write a memory-bound twin of a trained Inkling checkpoint (issue 16).

A twin is a function-identical, larger copy of a model: the same residual stream, logits, greedy
tokens and MTP acceptance as its source, while one decode step streams a chosen number of weight
bytes. It is made of two edits, both exact:

  * extra decoder layers, inserted after the source's leading dense layers, whose two writers into
    the residual stream are zero: attention `wo_ud` (o_proj) and dense `w2_md` (down_proj). A layer
    adds x += SConv(u) and x += SConv(m) (inkling-text.md §3.4); SConv has an identity residual and
    no bias, so SConv(0) = 0 and the conv states stay 0: the layer adds exactly 0. Everything else
    in the layer (norms, q/k/v/r, the convs, gate/up, global_scale) is a copy of a source layer
    (sliding extras copy a sliding layer's attention, every 6th extra is global and copies a global
    layer's), so every matmul does real work on real-looking values;
  * a wider dense MLP (`--dense-width`): gate/up rows for the extra units are copies of existing
    units' rows, the down-projection columns for them are zero. config.json has one dense width for
    the backbone and the MTP depths (mtp.md §3), so the MTP head's dense MLPs are widened the same
    way: the drafts stay identical, a draft costs more bytes too (as on a real model).

A 0 times a finite activation is +-0, and x + (+-0) = x, so the result is exact up to the float
summation order of the kernels (the extra terms are zeros appended to existing sums).

--dtype mlx4 / mlx8 writes an MLX affine (group 64) checkpoint: every linear weight of the layers
(attention, dense MLP, experts, shared experts) is quantized, router / norms / convs / rel banks /
embed / unembed / the MTP head stay as they are. Quantization changes logits, so "equal" then means
equal to the MLX copy of the source, which `--bytes-per-token 0` writes (no extra bytes): the twin
of Q(X) equals Q(X). Rows are quantized independently (groups run along the input axis), so a
copied row quantizes to the copied codes and a zero column group to codes 0 / bias 0.

Usage:
  twin.py SRC DST --bytes-per-token N[K|M|G] [--dtype bf16|mlx4|mlx8] [--dense-width I|keep]
                  [--extra-layers N] [--force]
  N is the total weight bytes one decode step reads (layers' attention + dense MLP + the k routed and
  the shared experts of each MoE layer + router + the unembedding rows); 0 adds nothing. K/M/G are
  powers of 1024. --dense-width defaults to 16 x hidden (kept when the budget is too small for it);
  --extra-layers overrides the layer count computed from the budget. Prints a JSON summary and
  writes it to DST/twin.json. Python 3 standard library only.
"""
import argparse
import json
import os
import shutil
import struct
import sys

ES = {"BF16": 2, "F16": 2, "F32": 4, "U32": 4, "U8": 1, "I64": 8, "I32": 4}
GROUP = 64
LP = "model.llm.layers."


class TwinError(Exception):
    pass


# ---- safetensors ---------------------------------------------------------------------------------

class STFile:
    """Header of one safetensors file; tensor bytes read on demand."""

    def __init__(self, path):
        self.path = path
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    raise TwinError(f"{path}: shorter than a safetensors header")
                n = struct.unpack("<Q", head)[0]
                if n > size - 8 or n > 100 << 20:
                    raise TwinError(f"{path}: header length {n} does not fit a file of {size} bytes")
                hdr = json.loads(f.read(n))
        except (OSError, ValueError) as e:
            raise TwinError(f"{path}: cannot read safetensors header: {e}")
        self.base = 8 + n
        self.meta = hdr.pop("__metadata__", None)
        self.t = {}
        for name, v in hdr.items():
            try:
                a, b = v["data_offsets"]
                dt, shape = v["dtype"], [int(x) for x in v["shape"]]
            except (KeyError, TypeError, ValueError):
                raise TwinError(f"{path}: tensor {name}: malformed header entry")
            if dt not in ES:
                raise TwinError(f"{path}: tensor {name}: dtype {dt} is not supported by twin.py")
            cnt = 1
            for s in shape:
                cnt *= s
            if b - a != cnt * ES[dt] or self.base + b > size:
                raise TwinError(f"{path}: tensor {name}: data_offsets [{a}, {b}] do not match {dt} {shape}")
            self.t[name] = (dt, shape, a)

    def read(self, name):
        dt, shape, a = self.t[name]
        n = nbytes(dt, shape)
        with open(self.path, "rb") as f:
            f.seek(self.base + a)
            return f.read(n)


def nbytes(dt, shape):
    n = ES[dt]
    for s in shape:
        n *= s
    return n


class Tensors:
    """All tensors of a directory's backbone (model.safetensors or an index of shards)."""

    def __init__(self, d):
        self.files = {}
        self.where = {}
        idx = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(idx):
            try:
                wm = json.load(open(idx))["weight_map"]
            except (OSError, ValueError, KeyError) as e:
                raise TwinError(f"{idx}: cannot read weight_map: {e}")
            for fn in sorted(set(wm.values())):
                self.files[fn] = STFile(os.path.join(d, fn))
        elif os.path.exists(os.path.join(d, "model.safetensors")):
            self.files["model.safetensors"] = STFile(os.path.join(d, "model.safetensors"))
        else:
            raise TwinError(f"{d}: no model.safetensors or model.safetensors.index.json")
        for fn, f in self.files.items():
            for name in f.t:
                if not name.startswith("model.mtp."):
                    self.where[name] = f

    def info(self, name):
        dt, shape, _ = self.where[name].t[name]
        return dt, shape

    def read(self, name):
        return self.where[name].read(name)


def write_st(path, items, metadata=None):
    """items: list of (name, dtype, shape, producer) where producer() yields the bytes (in pieces)."""
    hdr, off = {}, 0
    for name, dt, shape, _ in items:
        n = nbytes(dt, shape)
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    if metadata:
        hdr["__metadata__"] = metadata
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, dt, shape, prod in items:
            want, got = nbytes(dt, shape), 0
            for piece in prod():
                f.write(piece)
                got += len(piece)
            if got != want:
                raise TwinError(f"internal: {name} produced {got} bytes, expected {want}")
    return off


# ---- numbers -------------------------------------------------------------------------------------

def bf16_to_floats(raw):
    n = len(raw) // 2
    w = bytearray(4 * n)
    w[2::4] = raw[0::2]
    w[3::4] = raw[1::2]
    return struct.unpack("<%df" % n, w)


def f32_to_floats(raw):
    return struct.unpack("<%df" % (len(raw) // 4), raw)


def to_bf16_bits(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_bits_to_float(b):
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def quant_row(v, bits, gs):
    """MLX affine quantization of one row (formats.md §4.4): (codes bytes, scales bf16, biases bf16)."""
    nmax = (1 << bits) - 1
    codes, sc, bi = [], [], []
    for g in range(0, len(v), gs):
        grp = v[g:g + gs]
        lo, hi = min(grp), max(grp)
        s = max((hi - lo) / nmax, 1e-7)
        edge = lo
        if not abs(lo) > abs(hi):
            s, edge = -s, hi
        bias = 0.0
        q0 = round(edge / s)
        if q0 != 0:
            s, bias = edge / q0, edge
        sc.append(to_bf16_bits(s))
        bi.append(to_bf16_bits(bias))
        inv = 1.0 / s
        for x in grp:
            q = round((x - bias) * inv)
            codes.append(0 if q < 0 else nmax if q > nmax else q)
    if bits == 4:
        cb = bytes(codes[i] | (codes[i + 1] << 4) for i in range(0, len(codes), 2))
    elif bits == 8:
        cb = bytes(codes)
    else:
        raise TwinError(f"internal: {bits}-bit packing")
    return cb, struct.pack("<%dH" % len(sc), *sc), struct.pack("<%dH" % len(bi), *bi)


# ---- matrices as row maps ------------------------------------------------------------------------

class Mat:
    """An output matrix [rows, cols] (or a stack [n, r, cols], flattened to rows) built from a source
    tensor: row i is source row rowmap[i] (None: all zero) followed by zero columns up to cols."""

    def __init__(self, src, lead, rows, cols, rowmap=None, src_cols=None):
        self.src, self.lead, self.rows, self.cols = src, lead, rows, cols
        self.rowmap = rowmap if rowmap is not None else list(range(rows))
        self.src_cols = src_cols if src_cols is not None else cols


def prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


class Source:
    """Row access to source tensors: raw rows for bf16 output, quantized rows (cached) for MLX."""

    def __init__(self, tensors, bits):
        self.T, self.bits = tensors, bits
        self.raw = {}
        self.q = {}

    def raw_rows(self, name):
        if name not in self.raw:
            dt, shape = self.T.info(name)
            data = self.T.read(name)
            rb = ES[dt] * shape[-1]
            self.raw[name] = (dt, rb, data)
        return self.raw[name]

    def q_rows(self, name):
        if name not in self.q:
            dt, shape = self.T.info(name)
            if shape[-1] % GROUP:
                raise TwinError(f"tensor {name}: input width {shape[-1]} is not a multiple of the MLX group {GROUP}")
            data = self.T.read(name)
            fl = bf16_to_floats(data) if dt == "BF16" else f32_to_floats(data) if dt == "F32" else None
            if fl is None:
                raise TwinError(f"tensor {name}: cannot quantize dtype {dt}")
            c = shape[-1]
            rows = [quant_row(fl[r * c:(r + 1) * c], self.bits, GROUP) for r in range(len(fl) // c)]
            self.q[name] = rows
            self.raw.pop(name, None)
        return self.q[name]


def zero_qgroup(bits):
    return quant_row([0.0] * GROUP, bits, GROUP)


def mat_items(src, name, m, out_dt, bits):
    """safetensors items for Mat m under output name `name` (+ .scales / .biases when quantized)."""
    lead_rows = m.rows // max(1, prod(m.lead))
    if bits == 0:
        dt = out_dt
        es = ES[dt]
        pad = bytes(es * (m.cols - m.src_cols))
        zrow = bytes(es * m.cols)

        def prod_raw():
            if m.src is not None:
                sdt, rb, data = src.raw_rows(m.src)
                if sdt != dt:
                    raise TwinError(f"internal: {m.src} is {sdt}, output {dt}")
            buf = []
            for r in m.rowmap:
                buf.append(zrow if r is None else data[r * rb:(r + 1) * rb] + pad)
                if len(buf) >= 4096:
                    yield b"".join(buf)
                    buf = []
            if buf:
                yield b"".join(buf)
        return [(name, dt, m.lead + [lead_rows, m.cols], prod_raw)]
    zc, zs, zb = zero_qgroup(bits)
    G, G0 = m.cols // GROUP, m.src_cols // GROUP
    if m.cols % GROUP or m.src_cols % GROUP:
        raise TwinError(f"tensor {name}: widths {m.src_cols} -> {m.cols} must be multiples of the MLX group {GROUP}")
    pfx = name[:-7] if name.endswith(".weight") else name

    def part(k):
        def gen():
            rows = src.q_rows(m.src) if m.src is not None else None
            zpad = (zc, zs, zb)[k] * (G - G0)
            zfull = (zc, zs, zb)[k] * G
            buf = []
            for r in m.rowmap:
                buf.append(zfull if r is None else rows[r][k] + zpad)
                if len(buf) >= 4096:
                    yield b"".join(buf)
                    buf = []
            if buf:
                yield b"".join(buf)
        return gen
    return [(name, "U32", m.lead + [lead_rows, m.cols * bits // 32], part(0)),
            (pfx + ".scales", "BF16", m.lead + [lead_rows, G], part(1)),
            (pfx + ".biases", "BF16", m.lead + [lead_rows, G], part(2))]


def raw_item(src_tensors, name_in, name_out):
    dt, shape = src_tensors.info(name_in)
    return (name_out, dt, shape, lambda: iter([src_tensors.read(name_in)]))


# ---- the model -----------------------------------------------------------------------------------

def parse_bytes(s):
    s0 = s.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if s0 and s0[-1].upper() in mult:
            v = float(s0[:-1]) * mult[s0[-1].upper()]
        else:
            v = float(s0)
    except ValueError:
        raise TwinError(f"--bytes-per-token: expected a byte count like 256M, 1.5G or 0, found '{s}'")
    if not v >= 0 or v > 1 << 50:
        raise TwinError(f"--bytes-per-token: must be >= 0, found '{s}'")
    return int(v)


def quantizable(suffix):
    """MLX recipe of the twin: the layers' linear weights (formats.md §4.6)."""
    if "sconv" in suffix or "rel_logits_proj" in suffix or suffix.startswith("mlp.gate.") or suffix.endswith("_norm.weight"):
        return False
    return suffix.startswith("attn.w") or suffix in ("mlp.w13_dn.weight", "mlp.w2_md.weight") or \
        suffix.startswith("mlp.experts.w") or suffix.startswith("mlp.shared_experts.shared_w")


def layer_lists(tc, L):
    if isinstance(tc.get("layer_types"), list):
        sliding = [t == "hybrid_sliding" for t in tc["layer_types"]]
    elif isinstance(tc.get("local_layer_ids"), list):
        ids = set(tc["local_layer_ids"])
        sliding = [i in ids for i in range(L)]
    else:
        sliding = [(i + 1) % 6 != 0 for i in range(L)]
    if isinstance(tc.get("mlp_layer_types"), list):
        dense = [t == "dense" for t in tc["mlp_layer_types"]]
    else:
        d = int(tc.get("dense_mlp_idx", tc.get("first_k_dense_replace", 0)) or 0)
        dense = [i < d for i in range(L)]
    if len(sliding) != L or len(dense) != L:
        raise TwinError(f"config.json: layer_types / mlp_layer_types do not have num_hidden_layers = {L} entries")
    return sliding, dense


def per_token_bytes(layers, tc, E, k, unembed_bytes, V, Vu):
    """Weight bytes one decode step reads: attention + dense MLP, or router + k/E of the routed
    experts + the shared experts, of every layer, plus the Vu used unembedding rows."""
    total = 0
    for lay in layers:
        for suf, b in lay["bytes"].items():
            if ".experts." in suf and "shared" not in suf:
                total += b * k // E
            else:
                total += b
    return total + unembed_bytes * Vu // V


def build(args):
    src_dir, dst = args.src, args.dst
    if not os.path.isdir(src_dir):
        raise TwinError(f"{src_dir}: not a directory")
    try:
        cfg = json.load(open(os.path.join(src_dir, "config.json")))
    except (OSError, ValueError) as e:
        raise TwinError(f"{src_dir}/config.json: {e}")
    if "quantization" in cfg or "quantization_config" in cfg or os.path.exists(os.path.join(src_dir, "hf_quant_config.json")):
        raise TwinError(f"{src_dir}: already quantized; twin.py needs a float (bf16/f32) source (use --dtype to quantize)")
    tc = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if not isinstance(tc.get(key), int):
            raise TwinError(f"{src_dir}/config.json: text_config.{key} is missing or not an integer")
    H, L, V = tc["hidden_size"], tc["num_hidden_layers"], tc["vocab_size"]
    Vu = tc.get("unpadded_vocab_size") or V
    hf_widths = "moe_intermediate_size" in tc
    wkey = "intermediate_size" if hf_widths else "dense_intermediate_size"
    E = int(tc.get("n_routed_experts", tc.get("num_local_experts", 0)) or 0)
    k = int(tc.get("num_experts_per_tok", 0) or 0)
    sliding, dense = layer_lists(tc, L)
    nd = 0
    while nd < L and dense[nd]:
        nd += 1
    if nd == 0:
        raise TwinError(f"{src_dir}: no leading dense layer to copy (dense_mlp_idx = 0); twin.py needs one")
    if any(dense[nd:]):
        raise TwinError(f"{src_dir}: dense layers are not all leading (mlp_layer_types); not supported")
    Id = tc.get(wkey)
    if not isinstance(Id, int):
        raise TwinError(f"{src_dir}/config.json: text_config.{wkey} (dense width) is missing")

    T = Tensors(src_dir)
    for name in ("model.llm.embed.weight", "model.llm.unembed.weight", LP + "0.attn.wq_du.weight"):
        if name not in T.where:
            raise TwinError(f"{src_dir}: tensor {name} not found (twin.py reads the release tensor names only)")
    for name in T.where:
        if name.endswith(".scales") or T.info(name)[0] == "U8":
            raise TwinError(f"{src_dir}: tensor {name} is quantized; twin.py needs a float source")
    w13 = T.info(LP + "0.mlp.w13_dn.weight")[1]
    if w13 != [2 * Id, H]:
        raise TwinError(f"{src_dir}: {LP}0.mlp.w13_dn.weight is {w13}, expected [{2 * Id}, {H}] from {wkey}")

    bits = {"bf16": 0, "mlx4": 4, "mlx8": 8}[args.dtype]
    budget = parse_bytes(args.bytes_per_token)

    def qbytes(rows, cols):
        return rows * cols * bits // 8 + rows * (cols // GROUP) * 4

    def mbytes(name_suffix, dt, shape):
        if bits and quantizable(name_suffix):
            return qbytes(prod(shape[:-1]), shape[-1])
        return nbytes(dt, shape)

    # source layers: suffix -> (dtype, shape)
    src_layers = []
    for i in range(L):
        p = f"{LP}{i}."
        src_layers.append({n[len(p):]: T.info(n) for n in T.where if n.startswith(p)})
        if not src_layers[-1]:
            raise TwinError(f"{src_dir}: no tensors for layer {i} ({p}*)")
    first_sliding = next((i for i in range(L) if sliding[i]), None)
    first_global = next((i for i in range(L) if not sliding[i]), None)

    def attn_part(s):
        return not s.startswith("mlp")

    def layer_bytes(suffixes, width):
        out = {}
        for s, (dt, shape) in suffixes.items():
            if s == "mlp.w13_dn.weight":
                shape = [2 * width, H]
            elif s == "mlp.w2_md.weight":
                shape = [H, width]
            out[s] = mbytes(s, dt, shape)
        return out

    def template(glob):
        a = first_global if glob else first_sliding
        suf = {s: v for s, v in src_layers[a].items() if attn_part(s)}
        suf.update({s: v for s, v in src_layers[0].items() if not attn_part(s)})
        return a, suf

    unembed_dt, unembed_shape = T.info("model.llm.unembed.weight")
    unembed_b = nbytes(unembed_dt, unembed_shape)

    def plan(width, n_extra):
        layers = []
        for i in range(nd):
            layers.append({"src": i, "kind": "orig", "bytes": layer_bytes(src_layers[i], width)})
        for e in range(n_extra):
            glob = (e % 6 == 5 and first_global is not None) or first_sliding is None
            a, suf = template(glob)
            layers.append({"src": a, "kind": "extra", "global": glob, "bytes": layer_bytes(suf, width)})
        for i in range(nd, L):
            layers.append({"src": i, "kind": "orig", "bytes": layer_bytes(src_layers[i], Id)})
        return layers

    base = per_token_bytes(plan(Id, 0), tc, E, k, unembed_b, V, Vu)
    if args.dense_width == "keep":
        width = Id
    elif args.dense_width is None:
        width = max(Id, ((16 * H + GROUP - 1) // GROUP) * GROUP)
    else:
        try:
            width = int(args.dense_width)
        except ValueError:
            raise TwinError(f"--dense-width: expected an integer or 'keep', found '{args.dense_width}'")
        if width < Id:
            raise TwinError(f"--dense-width {width}: must be >= the source's dense width {Id}")
    if bits and width % GROUP:
        raise TwinError(f"--dense-width {width}: must be a multiple of {GROUP} for --dtype {args.dtype}")
    if budget == 0:
        width = Id
    wide0 = per_token_bytes(plan(width, 0), tc, E, k, unembed_b, V, Vu)
    one = per_token_bytes(plan(width, 1), tc, E, k, unembed_b, V, Vu) - wide0
    if args.dense_width is None and width != Id and budget and wide0 + 4 * one > budget:
        width = Id  # too small a budget for wide layers: keep the width, add layers only
        wide0 = per_token_bytes(plan(width, 0), tc, E, k, unembed_b, V, Vu)
        one = per_token_bytes(plan(width, 1), tc, E, k, unembed_b, V, Vu) - wide0
    if args.extra_layers is not None:
        if args.extra_layers < 0 or args.extra_layers > 1024:
            raise TwinError(f"--extra-layers {args.extra_layers}: must be 0..1024")
        n_extra = args.extra_layers
    elif budget == 0:
        n_extra = 0
    else:
        if budget < wide0:
            raise TwinError(f"--bytes-per-token {budget}: below what the source reads per token at dense width "
                            f"{width} ({wide0} bytes); ask for more, or a smaller --dense-width / 'keep'")
        n_extra = (budget - wide0 + one // 2) // one
    if L + n_extra > 1024:
        raise TwinError(f"{L + n_extra} layers: more than the engine's layer limit; raise --dense-width")
    layers = plan(width, n_extra)
    achieved = per_token_bytes(layers, tc, E, k, unembed_b, V, Vu)

    # ---- write ----
    if os.path.exists(dst):
        if not args.force:
            raise TwinError(f"{dst}: exists (use --force to replace it)")
        if os.path.abspath(dst) == os.path.abspath(src_dir):
            raise TwinError(f"{dst}: is the source directory")
        shutil.rmtree(dst)
    os.makedirs(dst)
    S = Source(T, bits)
    items = []
    for name in ("model.llm.embed.weight", "model.llm.embed_norm.weight", "model.llm.norm.weight",
                 "model.llm.unembed.weight"):
        if name in T.where:
            items.append(raw_item(T, name, name))
    known = set(items[i][0] for i in range(len(items)))
    for name in T.where:
        if not name.startswith(LP) and name not in known:
            items.append(raw_item(T, name, name))  # anything else global (none in the release)

    def add_matrix(out_name, src_name, suffix, rowmap, rows, cols, src_cols, lead=()):
        dt = T.info(src_name)[0] if src_name else "BF16"
        m = Mat(src_name, list(lead), rows, cols, rowmap, src_cols)
        items.extend(mat_items(S, out_name, m, dt, bits if quantizable(suffix) else 0))

    def w13_map(I0):
        return [r if r < 2 * I0 else 2 * ((r // 2) % I0) + (r % 2) for r in range(2 * width)]

    for new_i, lay in enumerate(layers):
        si = lay["src"]
        p_out = f"{LP}{new_i}."
        if lay["kind"] == "orig":
            suffixes = {s: f"{LP}{si}.{s}" for s in src_layers[si]}
        else:
            a, suf = template(lay["global"])
            suffixes = {s: (f"{LP}{a}.{s}" if attn_part(s) else f"{LP}0.{s}") for s in suf}
        for s in sorted(suffixes):
            nm = suffixes[s]
            dt, shape = T.info(nm)
            extra = lay["kind"] == "extra"
            if s == "mlp.w13_dn.weight":
                add_matrix(p_out + s, nm, s, w13_map(Id), 2 * width, H, H)
            elif s == "mlp.w2_md.weight":
                rm = [None] * H if extra else list(range(H))
                add_matrix(p_out + s, nm, s, rm, H, width, Id)
            elif s == "attn.wo_ud.weight" and extra:
                add_matrix(p_out + s, nm, s, [None] * shape[0], shape[0], shape[1], shape[1])
            elif len(shape) >= 2 and quantizable(s) and bits:
                lead = shape[:-2]
                rows = prod(shape[:-1])
                add_matrix(p_out + s, nm, s, list(range(rows)), rows, shape[-1], shape[-1], lead)
            else:
                items.append(raw_item(T, nm, p_out + s))
    for name in T.where:
        if name.startswith(LP) and int(name[len(LP):].split(".")[0]) >= L:
            raise TwinError(f"{src_dir}: tensor {name} belongs to no layer of num_hidden_layers = {L}")
    n_params = 0
    for name, dt, shape, _ in items:
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        n_params += prod(shape) * (32 // bits if dt == "U32" and bits else 1)
    src_params = sum(prod(T.info(n)[1]) for n in T.where)
    meta = {"format": "pt", "inkling_twin": "tools/twin.py"}
    model_bytes = write_st(os.path.join(dst, "model.safetensors"), items, meta)

    # ---- MTP head (same dense width) ----
    mtp_src = os.path.join(src_dir, "mtp.safetensors")
    mtp_note = "absent"
    if os.path.exists(mtp_src):
        if width == Id:
            shutil.copyfile(mtp_src, os.path.join(dst, "mtp.safetensors"))
            mtp_note = "copied unchanged"
        else:
            M = STFile(mtp_src)

            class MT:
                def info(self, n):
                    return M.t[n][0], M.t[n][1]

                def read(self, n):
                    return M.read(n)
            mt, MS, mitems = MT(), None, []
            MS = Source(mt, 0)
            for name in sorted(M.t):
                dt, shape = M.t[name][0], M.t[name][1]
                if name.endswith(".scales"):
                    raise TwinError(f"{mtp_src}: {name}: a quantized MTP head cannot be widened")
                if name.endswith("mlp.w13_dn.weight"):
                    mitems.extend(mat_items(MS, name, Mat(name, [], 2 * width, H, w13_map(Id), H), dt, 0))
                elif name.endswith("mlp.w2_md.weight"):
                    mitems.extend(mat_items(MS, name, Mat(name, [], H, width, list(range(H)), Id), dt, 0))
                else:
                    mitems.append((name, dt, shape, (lambda n=name: iter([M.read(n)]))))
            write_st(os.path.join(dst, "mtp.safetensors"), mitems, M.meta)
            mtp_note = f"dense MLPs widened to {width} (zero down columns), else unchanged"

    # ---- config and the other files ----
    nL = len(layers)
    tc2 = tc
    tc2["num_hidden_layers"] = nL
    new_sliding = []
    for lay in layers:
        new_sliding.append(sliding[lay["src"]] if lay["kind"] == "orig" else not lay["global"])
    if "local_layer_ids" in tc2 or "layer_types" not in tc2:
        tc2["local_layer_ids"] = [i for i in range(nL) if new_sliding[i]]
    if "layer_types" in tc2:
        tc2["layer_types"] = ["hybrid_sliding" if s else "hybrid" for s in new_sliding]
    if "mlp_layer_types" in tc2:
        tc2["mlp_layer_types"] = ["dense" if i < nd + n_extra else "sparse" for i in range(nL)]
    if "dense_mlp_idx" in tc2 or "mlp_layer_types" not in tc2:
        tc2["dense_mlp_idx"] = nd + n_extra
    if "first_k_dense_replace" in tc2:
        tc2["first_k_dense_replace"] = nd + n_extra
    tc2[wkey] = width
    if bits:
        q = {"group_size": GROUP, "bits": bits, "mode": "affine"}
        cfg["quantization"] = dict(q)
        cfg["quantization_config"] = dict(q)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    skip = {"config.json", "model.safetensors", "model.safetensors.index.json", "mtp.safetensors", "twin.json"}
    for fn in sorted(os.listdir(src_dir)):
        if fn in skip or fn.endswith(".safetensors") or not os.path.isfile(os.path.join(src_dir, fn)):
            continue
        shutil.copyfile(os.path.join(src_dir, fn), os.path.join(dst, fn))

    summary = {
        "source": os.path.abspath(src_dir), "dtype": args.dtype, "group_size": GROUP if bits else None,
        "layers": nL, "source_layers": L, "extra_layers": n_extra,
        "extra_layer_positions": [nd, nd + n_extra - 1] if n_extra else [],
        "extra_global_layers": sum(1 for x in layers if x["kind"] == "extra" and x["global"]),
        "dense_width": width, "source_dense_width": Id,
        "bytes_per_token_requested": budget, "bytes_per_token": achieved, "source_bytes_per_token": base,
        "bytes_per_extra_layer": one if n_extra else 0, "parameters": n_params, "source_parameters": src_params, "model_file_bytes": model_bytes, "mtp": mtp_note,
        "equals": ("the source (" + os.path.basename(os.path.abspath(src_dir)) + ")") if not bits else
                  (f"the {args.dtype} copy of the source: tools/twin.py SRC Q --dtype {args.dtype} --bytes-per-token 0"),
    }
    with open(os.path.join(dst, "twin.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    return summary


def main(argv):
    ap = argparse.ArgumentParser(prog="twin.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--bytes-per-token", required=True, help="weight bytes per decode step (e.g. 256M; 0: none added)")
    ap.add_argument("--dtype", choices=["bf16", "mlx4", "mlx8"], default="bf16")
    ap.add_argument("--dense-width", default=None, help="dense MLP width of the twin (integer or 'keep')")
    ap.add_argument("--extra-layers", type=int, default=None)
    ap.add_argument("--force", action="store_true", help="replace DST if it exists")
    args = ap.parse_args(argv)
    try:
        s = build(args)
    except TwinError as e:
        print(f"twin.py: {e}", file=sys.stderr)
        return 1
    print(json.dumps(s, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
