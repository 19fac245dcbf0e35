#!/usr/bin/env python3
"""standin.py — sparse, real-size stand-ins for Inkling release directories (issue 20).

Writes config.json, model-XXXXX-of-YYYYY.safetensors shards, model.safetensors.index.json and
mtp.safetensors with every tensor of the release at its real shape and dtype (values from
shared/spec/inkling-text.md §1.4 / §2, formats.md), but no payload: each shard is the header
followed by a hole (ftruncate), so a ~500 GB directory takes a few MB of disk. Reading a hole
gives zeros.

Formats (--format):
  bf16   the original release: BF16 everywhere, F32 router gate.bias / gate.global_scale.
  nvfp4  the ModelOpt NVFP4 release: routed experts w13_weight / w2_weight as U8 codes
         [E, out, in/2], F8_E4M3 .scale [E, out, in/16], F32 .scale2 [E] (+ BF16 .input_amax),
         hf_quant_config.json; everything else BF16.
  mlx4   mlx-community 4-bit ("experts-only 4-bit, attention bf16"): native names, routed
         experts pre-split and stacked (mlp.experts.{gate,up,down}_proj.{weight,scales,biases},
         U32 codes + BF16 scales / biases, group 64), conv weights in MLX layout [C, K, 1],
         a `quantization` block in config.json.

--misalign makes every header 8k + 1 bytes long, so all tensor data start at odd file offsets.

--canary writes a few non-zero blocks (everything else stays a hole = 0):
  embed_norm.weight = norm.weight = 1 (all H), embed rows CANARY_TOKENS = 1 (all H), unembed row
  v = CANARY_ROWS[v] (all H). With every layer weight zero, each layer adds exactly 0 to the
  residual stream (attn_norm = mlp_norm = 0 -> branch inputs 0; SConv(0) = 0; MoE / dense global
  scales 0), so for a prompt of canary tokens every position's logits are
      logits[v] = c_v * H * z / mu,  z = x0 / sqrt(x0^2 + eps),  x0 = 1 / sqrt(1 + eps)
  (c_v = CANARY_ROWS.get(v, 0)), greedy decoding emits argmax c_v = 200057 forever (its embed row
  is a canary too), and MTP drafting (a zero head) must give the same tokens. The unembed sits at
  the end of the last shard, after layer 41's 8 GiB expert stack, so the canary rows lie past
  12 GiB into that file.

Prints a JSON summary (files, apparent bytes, backbone parameter count, canary facts) on stdout.
Usage: standin.py DIR [--model small|975b] [--format bf16|nvfp4|mlx4] [--misalign] [--canary]
"""
import argparse
import json
import math
import os
import struct
import sys

MODELS = {
    # inkling-text.md §1.4, mtp.md (Small depth blocks; the 975B's MTP layout reuses them, [U])
    "small": dict(H=4096, L=42, V=201024, Vu=200058, nh=32, nkv=8, d=128, swa_nh=32, swa_nkv=8, swa_d=128,
                  W=512, d_rel=16, R=1024, K=4, dense_idx=2, Id=16384, I=2048, E=256, k=6, S=2, mu=16.0,
                  shards={"bf16": 32, "nvfp4": 12, "mlx4": 31}, variant="Inkling-Small"),
    "975b": dict(H=6144, L=66, V=201024, Vu=200058, nh=64, nkv=8, d=128, swa_nh=64, swa_nkv=16, swa_d=128,
                 W=512, d_rel=16, R=1024, K=4, dense_idx=2, Id=24576, I=3072, E=256, k=6, S=2, mu=24.0,
                 shards={"bf16": 109, "nvfp4": 33, "mlx4": 100}, variant="Inkling (975B"),
}
MTP_DEPTH, MTP_LOCAL = 8, [0, 2, 4, 5, 6, 7]
EPS = 1e-6
CANARY_TOKENS = [1, 200057]
CANARY_ROWS = {200057: 1.0, 7: 0.5, 100000: -0.25}
ES = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "U32": 4, "I64": 8}


def local_ids(m):
    return [i for i in range(m["L"]) if (i + 1) % 6 != 0]


def layer_tensors(m, pfx, i, sliding, moe, fmt, mtp=False):
    """(name, dtype, shape) of one decoder layer, release names (§2.2)."""
    H, K = m["H"], m["K"]
    nh, nkv, d = (m["swa_nh"], m["swa_nkv"], m["swa_d"]) if sliding else (m["nh"], m["nkv"], m["d"])
    R = m["W"] if sliding else m["R"]
    conv = (lambda C: [C, K, 1]) if fmt == "mlx4" and not mtp else (lambda C: [C, 1, K])
    t = [
        (pfx + "attn_norm.weight", "BF16", [H]),
        (pfx + "mlp_norm.weight", "BF16", [H]),
        (pfx + "attn_sconv.weight", "BF16", conv(H)),
        (pfx + "mlp_sconv.weight", "BF16", conv(H)),
        (pfx + "attn.wq_du.weight", "BF16", [nh * d, H]),
        (pfx + "attn.wk_dv.weight", "BF16", [nkv * d, H]),
        (pfx + "attn.wv_dv.weight", "BF16", [nkv * d, H]),
        (pfx + "attn.wr_du.weight", "BF16", [nh * m["d_rel"], H]),
        (pfx + "attn.wo_ud.weight", "BF16", [H, nh * d]),
        (pfx + "attn.q_norm.weight", "BF16", [d]),
        (pfx + "attn.k_norm.weight", "BF16", [d]),
        (pfx + "attn.k_sconv.weight", "BF16", conv(nkv * d)),
        (pfx + "attn.v_sconv.weight", "BF16", conv(nkv * d)),
        (pfx + "attn.rel_logits_proj.proj", "BF16", [m["d_rel"], R]),
    ]
    if not moe:
        Id = m["Id"]
        return t + [(pfx + "mlp.w13_dn.weight", "BF16", [2 * Id, H]), (pfx + "mlp.w2_md.weight", "BF16", [H, Id]),
                    (pfx + "mlp.global_scale", "BF16", [1])]
    E, S, I = m["E"], m["S"], m["I"]
    t += [(pfx + "mlp.gate.weight", "BF16", [E + S, H]), (pfx + "mlp.gate.bias", "F32", [E]),
          (pfx + "mlp.gate.global_scale", "F32", [1])]
    ex = pfx + "mlp.experts."
    if fmt == "nvfp4":
        for n, (o, c) in (("w13_weight", (2 * I, H)), ("w2_weight", (H, I))):
            t += [(ex + n, "U8", [E, o, c // 2]), (ex + n + ".scale", "F8_E4M3", [E, o, c // 16]),
                  (ex + n + ".scale2", "F32", [E]), (ex + n + ".input_amax", "BF16", [])]
    elif fmt == "mlx4":
        for n, (o, c) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            t += [(ex + n + ".weight", "U32", [E, o, c * 4 // 32]), (ex + n + ".scales", "BF16", [E, o, c // 64]),
                  (ex + n + ".biases", "BF16", [E, o, c // 64])]
    else:
        t += [(ex + "w13_weight", "BF16", [E, 2 * I, H]), (ex + "w2_weight", "BF16", [E, H, I])]
    t += [(pfx + "mlp.shared_experts.shared_w13_weight", "BF16", [S, 2 * I, H]),
          (pfx + "mlp.shared_experts.shared_w2_weight", "BF16", [S, H, I])]
    return t


def nbytes(dt, shape):
    return ES[dt] * math.prod(shape)


def write_shard(path, tensors, misalign, canary_blocks):
    """Header + hole. canary_blocks: {tensor name: [(byte offset in tensor, bytes)]}."""
    hdr, off, where = {"__metadata__": {"format": "pt"}}, 0, {}
    for name, dt, shape in tensors:
        n = nbytes(dt, shape)
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        where[name] = off
        off += n
    txt = json.dumps(hdr, separators=(",", ":")).encode()
    hl = (len(txt) + 7) // 8 * 8 + (1 if misalign else 0)
    txt += b" " * (hl - len(txt))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", hl) + txt)
        f.truncate(8 + hl + off)
        for name, blocks in canary_blocks.items():
            if name in where:
                for o, b in blocks:
                    os.pwrite(f.fileno(), b, 8 + hl + where[name] + o)
    return 8 + hl + off


def bf16(x):
    return struct.pack("<H", struct.unpack("<I", struct.pack("<f", x))[0] >> 16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--model", choices=sorted(MODELS), default="small")
    ap.add_argument("--format", choices=["bf16", "nvfp4", "mlx4"], default="bf16")
    ap.add_argument("--misalign", action="store_true")
    ap.add_argument("--canary", action="store_true")
    a = ap.parse_args()
    m = MODELS[a.model]
    H, L, V = m["H"], m["L"], m["V"]
    loc = local_ids(m)
    nsh = m["shards"][a.format]
    os.makedirs(a.dir, exist_ok=True)
    order = [("model.llm.embed.weight", "BF16", [V, H]), ("model.llm.embed_norm.weight", "BF16", [H])]
    for i in range(L):
        order += layer_tensors(m, "model.llm.layers.%d." % i, i, i in loc, i >= m["dense_idx"], a.format)
    order += [("model.llm.norm.weight", "BF16", [H]), ("model.llm.unembed.weight", "BF16", [V, H])]
    # shards of about equal size in tensor order (a tensor never spans two files); empty ones dropped
    target = sum(nbytes(dt, sh) for _, dt, sh in order) / nsh
    shards, cum = [[] for _ in range(nsh)], 0
    for t in order:
        shards[min(nsh - 1, int(cum // target))].append(t)
        cum += nbytes(t[1], t[2])
    shards = [x for x in shards if x]
    nsh = len(shards)
    mtp = []
    for j in range(MTP_DEPTH):
        p = "model.mtp.layers.%d." % j
        mtp += [(p + "embed_norm.weight", "BF16", [H]), (p + "hidden_norm.weight", "BF16", [H]),
                (p + "input_proj.weight", "BF16", [H, 2 * H])]
        mtp += layer_tensors(m, p + "transformer_block.", j, j in MTP_LOCAL, False, a.format, mtp=True)

    can = {}
    if a.canary:
        one = bf16(1.0) * H
        can["model.llm.embed_norm.weight"] = [(0, one)]
        can["model.llm.norm.weight"] = [(0, one)]
        can["model.llm.embed.weight"] = [(t * H * 2, one) for t in CANARY_TOKENS]
        can["model.llm.unembed.weight"] = [(v * H * 2, bf16(c) * H) for v, c in CANARY_ROWS.items()]

    wm, total, files, nparams = {}, 0, [], 0
    for s, ts in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (s + 1, nsh)
        total += write_shard(os.path.join(a.dir, fn), ts, a.misalign, can)
        files.append(fn)
        for name, dt, shape in ts:
            wm[name] = fn
            # backbone parameters as `info` counts them: logical weights (packed codes unpacked;
            # quantization scales, biases, scale2 and input_amax not counted)
            if not name.endswith((".scale", ".scale2", ".scales", ".biases", ".input_amax")):
                nparams += math.prod(shape) * {"U8": 2, "U32": 8}.get(dt, 1)
    total += write_shard(os.path.join(a.dir, "mtp.safetensors"), mtp, a.misalign, {})
    with open(os.path.join(a.dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=1)

    tc = dict(model_max_length=1048576, torch_dtype="bfloat16", rms_norm_eps=EPS, use_embed_norm=True, use_sconv=True,
              shared_expert_sink=True, gate_activation="sigmoid", hidden_size=H, num_hidden_layers=L, vocab_size=V,
              unpadded_vocab_size=m["Vu"], num_attention_heads=m["nh"], num_key_value_heads=m["nkv"], head_dim=m["d"],
              swa_num_attention_heads=m["swa_nh"], swa_num_key_value_heads=m["swa_nkv"], swa_head_dim=m["swa_d"],
              sliding_window_size=m["W"], local_layer_ids=loc, d_rel=m["d_rel"], rel_extent=m["R"],
              log_scaling_n_floor=128000, log_scaling_alpha=0.1, sconv_kernel_size=m["K"], dense_mlp_idx=m["dense_idx"],
              dense_intermediate_size=m["Id"], intermediate_size=m["I"], n_routed_experts=m["E"],
              num_experts_per_tok=m["k"], n_shared_experts=m["S"], route_scale=8.0,
              logits_mup_width_multiplier=m["mu"])
    cfg = {"architectures": ["InklingForConditionalGeneration"], "model_type": "inkling_mm_model",
           "eos_token_id": 200006, "text_config": tc,
           "mtp_config": {"num_nextn_predict_layers": MTP_DEPTH, "chain_hidden_post_norm": False,
                          "local_layer_ids": MTP_LOCAL}}
    if a.format == "mlx4":
        cfg["quantization"] = cfg["quantization_config"] = {"group_size": 64, "bits": 4, "mode": "affine"}
    if a.format == "nvfp4":
        cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
        with open(os.path.join(a.dir, "hf_quant_config.json"), "w") as f:
            json.dump({"producer": {"name": "modelopt"},
                       "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": []}}, f, indent=2)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    x0 = 1.0 / math.sqrt(1.0 + EPS)
    z = x0 / math.sqrt(x0 * x0 + EPS)
    json.dump({"dir": a.dir, "model": a.model, "variant": m["variant"], "format": a.format, "misalign": a.misalign,
               "shards": nsh, "apparent_bytes": total, "params": nparams,
               "canary": {"tokens": CANARY_TOKENS, "rows": {str(k): v for k, v in CANARY_ROWS.items()},
                          "logit_per_unit": H * z / m["mu"], "greedy": max(CANARY_ROWS, key=CANARY_ROWS.get)}
               if a.canary else None}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
