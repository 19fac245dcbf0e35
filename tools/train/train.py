#!/usr/bin/python3
"""Train a small Inkling (backbone + MTP depths) on the KJV corpus.

  train.py --out DIR [--steps N] [--seed S] ...

DIR gets tokenizer.json (trained first if absent), config.json, tokens.npy (the encoded
corpus), ckpt.pt (model + optimizer + step, rewritten every --ckpt-every steps; a rerun with
the same DIR resumes from it) and loss.csv. Depth m is trained on token t+m+2 (mtp.md 1):
depth m at row p consumes depth m-1's output at p (the final-normed backbone hidden for m=0)
and the embedding of x_{p+m+1}. The loss is CE(backbone) + mtp_weight * mean_m CE(depth m).
Batches are a pure function of (seed, step), so a resumed run sees the same data.
"""
import argparse
import csv
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
from model import Cfg, Inkling, MoE, rms  # noqa: E402


def make_config(a, n_vocab, eos):
    V = n_vocab + a.vocab_pad
    L = a.layers
    glob = [int(x) for x in a.global_layers.split(",")]
    text = {
        "hidden_size": a.hidden, "num_hidden_layers": L, "vocab_size": V, "unpadded_vocab_size": n_vocab,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
        "swa_num_attention_heads": a.heads, "swa_num_key_value_heads": a.swa_kv_heads,
        "swa_head_dim": a.head_dim, "sliding_window_size": a.window,
        "local_layer_ids": [i for i in range(L) if i not in glob], "d_rel": a.d_rel,
        "rel_extent": a.rel_extent, "log_scaling_n_floor": a.n_floor, "log_scaling_alpha": 0.1,
        "sconv_kernel_size": 4, "rms_norm_eps": 1e-6, "dense_mlp_idx": a.dense_layers,
        "dense_intermediate_size": a.dense_width, "intermediate_size": a.expert_width,
        "n_routed_experts": a.experts, "num_experts_per_tok": a.topk, "n_shared_experts": a.shared,
        "route_scale": 8.0, "logits_mup_width_multiplier": a.mu, "hidden_act": "silu",
        "use_embed_norm": True, "use_sconv": True, "use_gate_bias": True, "use_global_scale": True,
        "norm_after_topk": True, "gate_activation": "sigmoid", "shared_expert_sink": True,
        "q_bias": False, "o_bias": False, "final_logit_softcapping": None,
        "inference_moe_w13_interleaved": True, "tie_word_embeddings": False,
        "model_max_length": a.max_len, "torch_dtype": "bfloat16",
    }
    mtp_glob = [int(x) for x in a.mtp_global.split(",")] if a.mtp_global else []
    return {
        "architectures": ["InklingForConditionalGeneration"], "model_type": "inkling_mm_model",
        "eos_token_id": eos, "text_config": text,
        "mtp_config": {"num_nextn_predict_layers": a.mtp_depths, "chain_hidden_post_norm": False,
                       "local_layer_ids": [m for m in range(a.mtp_depths) if m not in mtp_glob]},
    }


def init_weights(model, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    std = 0.02
    out_std = std / math.sqrt(2 * (cfg.L + 1))
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight") and p.dim() == 1:
                if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                    # scores are q.k / d with unit-RMS q, k: start at the usual 1/sqrt(d) sharpness
                    p.fill_(p.shape[0] ** 0.25)
                else:
                    p.fill_(1.0)
            elif name.endswith("global_scale"):
                p.fill_(1.0 / cfg.route_scale if ".gate." in name else 1.0)
            elif "sconv" in name:
                p.normal_(0.0, 0.05, generator=g)
            elif name.endswith("rel_logits_proj.proj"):
                p.normal_(0.0, 0.1, generator=g)
            elif any(name.endswith(s) for s in ("wo_ud.weight", "w2_md.weight", "w2_weight", "shared_w2_weight")):
                p.normal_(0.0, out_std, generator=g)
            else:
                p.normal_(0.0, std, generator=g)


def param_groups(model, wd):
    dec, nodec = [], []
    for name, p in model.named_parameters():
        (dec if p.dim() >= 2 and "sconv" not in name and "rel_logits" not in name else nodec).append(p)
    return [{"params": dec, "weight_decay": wd}, {"params": nodec, "weight_decay": 0.0}]


def lr_at(step, a):
    """Warmup, constant, then linear decay to min_lr_frac from step decay_start to steps (WSD)."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.decay_start is None or step < a.decay_start:
        return a.lr
    t = min(1.0, (step - a.decay_start) / max(1, a.steps - a.decay_start))
    return a.lr * (1.0 - (1.0 - a.min_lr_frac) * t)


def batch(tokens, n_train, step, a, span):
    g = np.random.default_rng([a.seed, step])
    offs = g.integers(0, n_train - span, size=a.batch)
    return torch.from_numpy(np.stack([tokens[o:o + span] for o in offs]).astype(np.int64))


def losses(model, x, T, ndepth, stride=1, phase=0):
    """Backbone CE on all rows; depth-m CE on rows phase, phase+stride, ... (the depth layers run
    on all rows, only the LM-head work is subsampled)."""
    cfg = model.cfg
    h = model.backbone(x[:, :T])
    post = rms(h, model.llm.norm.weight, cfg.eps)
    main = F.cross_entropy(model.head(post).reshape(-1, cfg.Vu), x[:, 1:T + 1].reshape(-1))
    outs = model.mtp_chain(post, x, ndepth)
    rows = torch.arange(phase % stride, T, stride)
    dl = [F.cross_entropy(model.head(u[:, rows]).reshape(-1, cfg.Vu), x[:, m + 2 + rows].reshape(-1))
          for m, u in enumerate(outs)]
    return main, dl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=192)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.5)
    ap.add_argument("--mtp-stride", type=int, default=4, help="depth losses on every N-th row")
    ap.add_argument("--bias-rate", type=float, default=1e-3, help="aux-loss-free router bias step")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--vocab-pad", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--global-layers", default="2")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--swa-kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--rel-extent", type=int, default=128)
    ap.add_argument("--d-rel", type=int, default=16)
    ap.add_argument("--n-floor", type=int, default=96)
    ap.add_argument("--dense-layers", type=int, default=1)
    ap.add_argument("--dense-width", type=int, default=384)
    ap.add_argument("--expert-width", type=int, default=192)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--shared", type=int, default=1)
    ap.add_argument("--mu", type=float, default=2.0)
    ap.add_argument("--mtp-depths", type=int, default=4)
    ap.add_argument("--mtp-global", default="1,3")
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--decay-start", type=int, default=None, help="first step of the linear LR decay")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="training seconds: when 80%% are spent, fix decay_start = now and steps = now * 1.25 "
                         "(both recorded; rerun with --steps/--decay-start to reproduce)")
    ap.add_argument("--time-limit", type=float, default=0, help="stop (after a checkpoint) after this many seconds")
    ap.add_argument("--bench", type=int, default=0, help="time this many steps and exit")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    tokp = os.path.join(a.out, "tokenizer.json")
    if not os.path.exists(tokp):
        toks, merges = bpe.train(corpus.books(), a.vocab)
        bpe.write_tokenizer_json(tokp, toks, merges)
    tok = bpe.Tokenizer(tokp)
    eos = tok.special["<|endoftext|>"]
    datap = os.path.join(a.out, "tokens.npy")
    if not os.path.exists(datap):
        ids = []
        for b in corpus.books():
            ids.extend(tok.encode(b))
            ids.append(eos)
        np.save(datap, np.array(ids, dtype=np.int16))
    tokens = np.load(datap).astype(np.int64)
    n_val = len(tokens) // 50
    n_train = len(tokens) - n_val
    raw = make_config(a, tok.n_vocab, eos)
    raw["training"] = {"corpus": "bible-kjv-text " + corpus.package_version(), "seed": a.seed,
                       "command": " ".join(sys.argv), "tokens": int(len(tokens)), "val_tokens": n_val}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    cfg = Cfg(raw)
    torch.manual_seed(a.seed)
    model = Inkling(cfg)
    init_weights(model, cfg, a.seed)
    opt = torch.optim.AdamW(param_groups(model, a.wd), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed = 0, 0.0
    ck = os.path.join(a.out, "ckpt.pt")
    if os.path.exists(ck) and not a.bench:
        st = torch.load(ck)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, elapsed = st["step"], st["elapsed"]
        if st.get("decay_start") is not None:
            a.decay_start, a.steps = st["decay_start"], st["steps"]
        print(f"resumed at step {step} ({elapsed:.0f}s trained)", flush=True)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"params {nparam / 1e6:.2f}M, tokens {len(tokens)} (val {n_val})", flush=True)
    logp = os.path.join(a.out, "loss.csv")
    fields = ["step", "tokens", "seconds", "lr", "loss", "main"] + [f"mtp{m}" for m in range(cfg.D)] + \
             ["val_main"] + [f"val_mtp{m}" for m in range(cfg.D)]
    if not os.path.exists(logp):
        with open(logp, "w", newline="") as f:
            csv.writer(f).writerow(fields)
    span = a.seq + cfg.D + 1
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    t_run = time.time()

    def save():
        tmp = ck + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed": elapsed, "decay_start": a.decay_start, "steps": a.steps}, tmp)
        os.replace(tmp, ck)

    while step < a.steps:
        t0 = time.time()
        for g_ in opt.param_groups:
            g_["lr"] = lr_at(step, a)
        x = batch(tokens, n_train, step, a, span)
        main_l, dl = losses(model, x, a.seq, cfg.D, a.mtp_stride, step)
        loss = main_l + a.mtp_weight * sum(dl) / len(dl)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # aux-loss-free balancing of the selection bias
            for m in moes:
                ld = m.last_load
                m.gate.bias += a.bias_rate * torch.sign(ld.mean() - ld)
        step += 1
        dt = time.time() - t0
        if a.time_budget and a.decay_start is None and elapsed + dt >= 0.8 * a.time_budget:
            a.decay_start, a.steps = step, int(round(step * 1.25))
            with open(os.path.join(a.out, "schedule.json"), "w") as f:
                json.dump({"decay_start": a.decay_start, "steps": a.steps}, f)
            print(f"decay from step {a.decay_start} to {a.steps}", flush=True)
        elapsed += dt
        row = {"step": step, "tokens": step * a.batch * a.seq, "seconds": round(elapsed, 1),
               "lr": f"{lr_at(step - 1, a):.3e}", "loss": f"{loss.item():.4f}", "main": f"{main_l.item():.4f}"}
        for m, l in enumerate(dl):
            row[f"mtp{m}"] = f"{l.item():.4f}"
        if a.bench:
            print(f"step {step} {dt:.2f}s  {a.batch * a.seq / dt:.0f} tok/s loss {loss.item():.3f}", flush=True)
            if step >= a.bench:
                return
            continue
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                vb = torch.from_numpy(np.stack([tokens[n_train + o:n_train + o + span]
                                                for o in range(0, n_val - span, n_val // 8)][:8]).astype(np.int64))
                vm, vd = losses(model, vb, a.seq, cfg.D)
            model.train()
            row["val_main"] = f"{vm.item():.4f}"
            for m, l in enumerate(vd):
                row[f"val_mtp{m}"] = f"{l.item():.4f}"
        with open(logp, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=fields).writerow(row)
        if step % 10 == 0:
            print(f"step {step}/{a.steps} {elapsed:.0f}s loss {loss.item():.3f} main {main_l.item():.3f} "
                  f"mtp {' '.join(f'{l.item():.2f}' for l in dl)} {a.batch * a.seq / dt:.0f} tok/s"
                  + (f" val {row['val_main']}" if "val_main" in row else ""), flush=True)
        if step % a.ckpt_every == 0 or step == a.steps:
            save()
        if a.time_limit and time.time() - t_run > a.time_limit:
            save()
            print("time limit reached", flush=True)
            break


if __name__ == "__main__":
    main()
