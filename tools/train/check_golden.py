#!/usr/bin/python3
"""Reproduce shared/golden prefill logits (and hidden states, MTP outputs where present) with
model.py. Usage: check_golden.py [GOLDEN_DIR]  (default ../shared/golden relative to the repo)."""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_release, rms  # noqa: E402


def relerr(a, ref):
    return float(np.max(np.abs(a - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def check_case(d):
    torch.set_grad_enabled(False)
    model, cfg, missing, extra = load_release(d, torch.float32)
    miss = [m for m in missing if not m.startswith("model.mtp.")] if cfg.D == 0 else missing
    assert not miss, f"missing tensors {miss[:5]}"
    ids = np.load(os.path.join(d, "prompt_ids.npy")).astype(np.int64)
    x = torch.tensor(ids)[None]
    res = {}
    lo = []
    h = model.backbone(x, lo)
    post = rms(h, model.llm.norm.weight, cfg.eps)
    logits = model.head(post)[0].numpy()
    res["prefill_logits"] = relerr(logits, np.load(os.path.join(d, "prefill_logits.npy")))
    res["prefill_embeddings"] = relerr(model.embed(x)[0].numpy(), np.load(os.path.join(d, "prefill_embeddings.npy")))
    res["prefill_layer_outputs"] = relerr(torch.stack([t[0] for t in lo]).numpy(),
                                          np.load(os.path.join(d, "prefill_layer_outputs.npy")))
    res["prefill_hidden_postnorm"] = relerr(post[0].numpy(), np.load(os.path.join(d, "prefill_hidden_postnorm.npy")))
    # decode logits: uncached recompute over prompt + generated
    gen = np.load(os.path.join(d, "generated_ids.npy")).astype(np.int64)
    full = torch.tensor(np.concatenate([ids, gen]))[None]
    lg = model(full)[0, len(ids):].numpy()
    res["decode_logits"] = relerr(lg, np.load(os.path.join(d, "decode_logits.npy")))
    ours = model.greedy(list(ids), len(gen))
    res["greedy_ids_equal"] = ours == list(gen)
    # MTP golden files use the transformers generic MtpModel position convention (queries of
    # depth m at position i + m + 1); reproduce them with that convention here.
    if cfg.D and os.path.exists(os.path.join(d, "mtp_postnorm_logits.npy")):
        for var, hin in (("postnorm", post), ("prenorm", h)):
            tok = np.load(os.path.join(d, f"mtp_{var}_input_ids.npy")).astype(np.int64)
            ref_h = np.load(os.path.join(d, f"mtp_{var}_output_hidden.npy"))
            ref_l = np.load(os.path.join(d, f"mtp_{var}_logits.npy"))
            n = tok.shape[1]
            hh = hin[:, :n]
            eh, el = 0.0, 0.0
            for m, depth in enumerate(model.mtp.layers):
                e = model.embed(torch.tensor(tok[m])[None])
                pos = torch.arange(n) + m + 1
                z = depth.input_proj(torch.cat([rms(hh, depth.hidden_norm.weight, cfg.eps),
                                                rms(e, depth.embed_norm.weight, cfg.eps)], -1))
                blk = depth.transformer_block
                u = blk.attn(rms(z, blk.attn_norm.weight, cfg.eps), pos)
                z = z + __import__("model").sconv(u, blk.attn_sconv.weight)
                mm = blk.mlp(rms(z, blk.mlp_norm.weight, cfg.eps))
                hh = z + __import__("model").sconv(mm, blk.mlp_sconv.weight)
                eh = max(eh, relerr(hh[0].numpy(), ref_h[m]))
                el = max(el, relerr(model.head(hh)[0].numpy(), ref_l[m]))
            res[f"mtp_{var}_output_hidden"] = eh
            res[f"mtp_{var}_logits"] = el
    return res


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "golden")
    ok = True
    out = {}
    for case in ("tiny-dense", "tiny-moe"):
        r = check_case(os.path.join(root, case))
        out[case] = r
        for k, v in r.items():
            bad = (v is False) or (isinstance(v, float) and v > 1e-4)
            ok &= not bad
            print(f"{case:10s} {k:28s} {v if isinstance(v, bool) else f'{v:.3e}'}{'  FAIL' if bad else ''}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
