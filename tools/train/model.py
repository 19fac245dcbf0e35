"""PyTorch implementation of the Inkling text decoder and its MTP head.

Written from shared/spec/inkling-text.md (backbone) and shared/spec/mtp.md (head, mode P
semantics). Parameters are stored under the release tensor names and layouts
(w13 rows interleaved gate/up, convs [C, 1, K], rel proj [d_rel, R]), so export is a
plain state_dict dump and a release checkpoint loads with load_release().

Everything is full-sequence (no KV cache): training runs whole chunks, and the few greedy
continuations the export needs are recomputed from scratch per token (cheap at this size).
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- config

class Cfg:
    """Resolved text config (release spelling, inkling-text.md 1.2/1.3)."""

    def __init__(self, raw):
        t = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
        self.raw = raw
        self.H = t["hidden_size"]
        self.L = t["num_hidden_layers"]
        self.V = t["vocab_size"]
        self.Vu = t.get("unpadded_vocab_size") or self.V
        self.nh = t["num_attention_heads"]
        self.nkv = t["num_key_value_heads"]
        self.hd = t.get("head_dim") or self.H // self.nh
        self.swa_nh = t.get("swa_num_attention_heads", self.nh)
        self.swa_nkv = t.get("swa_num_key_value_heads", self.nkv)
        self.swa_hd = t.get("swa_head_dim", self.hd)
        self.W = t.get("sliding_window_size", t.get("sliding_window", 512))
        if "layer_types" in t:
            self.local = [x == "hybrid_sliding" for x in t["layer_types"]]
        elif "local_layer_ids" in t:
            ids = set(t["local_layer_ids"])
            self.local = [i in ids for i in range(self.L)]
        else:
            self.local = [(i + 1) % 6 != 0 for i in range(self.L)]
        self.d_rel = t.get("d_rel", 16)
        self.rel_extent = t.get("rel_extent", 1024)
        self.n_floor = t.get("log_scaling_n_floor")
        self.alpha = t.get("log_scaling_alpha", 0.1)
        self.K = t.get("sconv_kernel_size", t.get("conv_kernel_size", 4))
        self.eps = t.get("rms_norm_eps", 1e-6)
        self.dense_idx = t.get("dense_mlp_idx", 0)
        if "moe_intermediate_size" in t:
            self.I_d, self.I = t["intermediate_size"], t["moe_intermediate_size"]
        else:
            self.I_d = t.get("dense_intermediate_size", t.get("intermediate_size"))
            self.I = t.get("intermediate_size")
        self.E = t.get("n_routed_experts", 0)
        self.k = t.get("num_experts_per_tok", 1)
        self.S = t.get("n_shared_experts", 0)
        self.route_scale = t.get("route_scale", 1.0)
        self.mu = t.get("logits_mup_width_multiplier") or 1.0
        m = raw.get("mtp_config") or {}
        self.D = m.get("num_nextn_predict_layers", 0)
        ids = set(m.get("local_layer_ids", []))
        self.mtp_local = [i in ids for i in range(self.D)]

    def dense(self, i):
        return i < self.dense_idx


# ----------------------------------------------------------------------------- pieces

def rms(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))


def sconv(u, w):
    """Causal depthwise conv with identity residual. u [B, T, C], w [C, 1, K]:
    y[t] = u[t] + sum_k w[:, 0, k] * u[t - (K-1) + k] (zero before the sequence)."""
    K, T = w.shape[-1], u.shape[1]
    y = u * (1.0 + w[:, 0, K - 1])
    for k in range(K - 1):
        s = K - 1 - k  # shift back
        if s < T:
            y = y + F.pad(u[:, :T - s], (0, 0, s, 0)) * w[:, 0, k]
    return y


class Attn(nn.Module):
    def __init__(self, H, nh, nkv, hd, d_rel, R, W, K, local, cfg):
        super().__init__()
        self.nh, self.nkv, self.hd, self.d_rel, self.R, self.W = nh, nkv, hd, d_rel, R, W
        self.local, self.cfg = local, cfg
        self.wq_du = nn.Linear(H, nh * hd, bias=False)
        self.wk_dv = nn.Linear(H, nkv * hd, bias=False)
        self.wv_dv = nn.Linear(H, nkv * hd, bias=False)
        self.wr_du = nn.Linear(H, nh * d_rel, bias=False)
        self.wo_ud = nn.Linear(nh * hd, H, bias=False)
        self.q_norm = nn.Module()
        self.q_norm.weight = nn.Parameter(torch.ones(hd))
        self.k_norm = nn.Module()
        self.k_norm.weight = nn.Parameter(torch.ones(hd))
        self.k_sconv = nn.Module()
        self.k_sconv.weight = nn.Parameter(torch.zeros(nkv * hd, 1, K))
        self.v_sconv = nn.Module()
        self.v_sconv.weight = nn.Parameter(torch.zeros(nkv * hd, 1, K))
        self.rel_logits_proj = nn.Module()
        self.rel_logits_proj.proj = nn.Parameter(torch.zeros(d_rel, R))

    def forward(self, a, pos):
        """a [B, T, H]; pos [T] absolute positions (consecutive)."""
        B, T, _ = a.shape
        nh, nkv, hd, cfg = self.nh, self.nkv, self.hd, self.cfg
        q = self.wq_du(a).view(B, T, nh, hd)
        k = sconv(self.wk_dv(a), self.k_sconv.weight).view(B, T, nkv, hd)
        v = sconv(self.wv_dv(a), self.v_sconv.weight).view(B, T, nkv, hd)
        r = self.wr_du(a).view(B, T, nh, self.d_rel)
        q = rms(q, self.q_norm.weight, cfg.eps).transpose(1, 2)  # B nh T hd
        k = rms(k, self.k_norm.weight, cfg.eps).transpose(1, 2)  # B nkv T hd
        v = v.transpose(1, 2)
        g = nh // nkv
        if g > 1:
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
        # relative bias: Lrel[b,h,t,e] = r[b,t,h,:] . P[:, e]; bias(t, j) = Lrel[t, t - j]
        lrel = torch.einsum("bthr,re->bhte", r, self.rel_logits_proj.proj)
        lrel = F.pad(lrel, (0, 1))  # column R is the zero bias
        dist = pos.view(T, 1) - pos.view(1, T)
        idx = torch.where((dist >= 0) & (dist < self.R), dist, torch.full_like(dist, self.R))
        bias = torch.gather(lrel, 3, idx.view(1, 1, T, T).expand(B, nh, T, T))
        score = torch.matmul(q, k.transpose(-1, -2)) / hd + bias
        if not self.local and cfg.n_floor is not None:
            tau = 1.0 + cfg.alpha * torch.log(torch.clamp((pos.float() + 1.0) / cfg.n_floor, min=1.0))
            score = score * tau.view(1, 1, T, 1)
        allowed = dist >= 0
        if self.local:
            allowed = allowed & (dist < self.W)
        score = score.masked_fill(~allowed, float("-inf"))
        o = torch.matmul(torch.softmax(score, dim=-1), v)
        return self.wo_ud(o.transpose(1, 2).reshape(B, T, nh * hd))


def swiglu_interleaved(x, w13, w2):
    """w13 rows interleaved (gate 2j, up 2j+1): de-interleave the weight, not the activations."""
    I = w13.shape[0] // 2
    g, u = F.linear(x, w13.view(I, 2, -1).transpose(0, 1).reshape(2 * I, -1)).split(I, dim=-1)
    return F.linear(F.silu(g) * u, w2)


class DenseMLP(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.w13_dn = nn.Linear(H, 2 * I, bias=False)
        self.w2_md = nn.Linear(I, H, bias=False)
        self.global_scale = nn.Parameter(torch.ones(1))

    def forward(self, b):
        return swiglu_interleaved(b, self.w13_dn.weight, self.w2_md.weight) * self.global_scale


class MoE(nn.Module):
    def __init__(self, H, I, E, S, k, route_scale):
        super().__init__()
        self.E, self.S, self.kk, self.route_scale = E, S, k, route_scale
        self.gate = nn.Module()
        self.gate.weight = nn.Parameter(torch.zeros(E + S, H))
        self.gate.register_buffer("bias", torch.zeros(E))  # selection bias: not trained by SGD
        self.gate.global_scale = nn.Parameter(torch.ones(1))
        self.experts = nn.Module()
        self.experts.w13_weight = nn.Parameter(torch.zeros(E, 2 * I, H))
        self.experts.w2_weight = nn.Parameter(torch.zeros(E, H, I))
        self.shared_experts = nn.Module()
        self.shared_experts.shared_w13_weight = nn.Parameter(torch.zeros(S, 2 * I, H))
        self.shared_experts.shared_w2_weight = nn.Parameter(torch.zeros(S, H, I))
        self.last_load = None  # per-expert token counts of the last forward (for bias balancing)

    def forward(self, b):
        shp = b.shape
        x = b.reshape(-1, shp[-1])
        E, S, k = self.E, self.S, self.kk
        logits = F.linear(x.float(), self.gate.weight.float())
        choice = torch.sigmoid(logits[:, :E]) + self.gate.bias
        # top-k, ties to the lower index: stable sort descending
        sel = torch.sort(choice.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
        A = torch.cat([torch.gather(logits, 1, sel), logits[:, E:]], dim=1)
        ls = F.logsigmoid(A)
        wts = torch.exp(ls - torch.logsumexp(ls, dim=1, keepdim=True)) * (self.route_scale * self.gate.global_scale)
        out = torch.zeros_like(x)
        load = torch.zeros(E, device=x.device)
        w13s = self.experts.w13_weight.unbind(0)  # one stacked gradient instead of E full-size ones
        w2s = self.experts.w2_weight.unbind(0)
        sw13 = self.shared_experts.shared_w13_weight.unbind(0)
        sw2 = self.shared_experts.shared_w2_weight.unbind(0)
        for e in range(E):
            hit = sel == e  # [N, k]
            rows = hit.any(1).nonzero(as_tuple=True)[0]
            load[e] = rows.numel()
            if rows.numel() == 0:
                continue
            w = (wts[:, :k] * hit).sum(1)[rows]
            y = swiglu_interleaved(x[rows], w13s[e], w2s[e])
            out.index_add_(0, rows, y * w.unsqueeze(1))
        for s in range(S):
            out = out + swiglu_interleaved(x, sw13[s], sw2[s]) * wts[:, k + s:k + s + 1]
        self.last_load = load
        return out.view(shp)


def _vec(n, val=1.0):
    m = nn.Module()
    m.weight = nn.Parameter(torch.full((n,), val))
    return m


def _conv(C, K):
    m = nn.Module()
    m.weight = nn.Parameter(torch.zeros(C, 1, K))
    return m


class Layer(nn.Module):
    def __init__(self, cfg, local, dense):
        super().__init__()
        H = cfg.H
        if local:
            nh, nkv, hd, R = cfg.swa_nh, cfg.swa_nkv, cfg.swa_hd, cfg.W
        else:
            nh, nkv, hd, R = cfg.nh, cfg.nkv, cfg.hd, cfg.rel_extent
        self.attn_norm = _vec(H)
        self.mlp_norm = _vec(H)
        self.attn_sconv = _conv(H, cfg.K)
        self.mlp_sconv = _conv(H, cfg.K)
        self.attn = Attn(H, nh, nkv, hd, cfg.d_rel, R, cfg.W, cfg.K, local, cfg)
        self.mlp = DenseMLP(H, cfg.I_d) if dense else MoE(H, cfg.I, cfg.E, cfg.S, cfg.k, cfg.route_scale)
        self.eps = cfg.eps

    def forward(self, x, pos):
        u = self.attn(rms(x, self.attn_norm.weight, self.eps), pos)
        x = x + sconv(u, self.attn_sconv.weight)
        m = self.mlp(rms(x, self.mlp_norm.weight, self.eps))
        return x + sconv(m, self.mlp_sconv.weight)


class MTPDepth(nn.Module):
    def __init__(self, cfg, local):
        super().__init__()
        self.embed_norm = _vec(cfg.H)
        self.hidden_norm = _vec(cfg.H)
        self.input_proj = nn.Linear(2 * cfg.H, cfg.H, bias=False)
        self.transformer_block = Layer(cfg, local, dense=True)
        self.eps = cfg.eps

    def forward(self, h, e, pos):
        """h: incoming hidden [B, T, H]; e: backbone embedding rms(embed[tok]; embed_norm)."""
        z = self.input_proj(torch.cat([rms(h, self.hidden_norm.weight, self.eps),
                                       rms(e, self.embed_norm.weight, self.eps)], dim=-1))
        return self.transformer_block(z, pos)


class Inkling(nn.Module):
    """Parameter names = release names minus the 'model.' prefix (llm.*, mtp.*)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.llm = nn.Module()
        self.llm.embed = nn.Embedding(cfg.V, cfg.H)
        self.llm.embed_norm = _vec(cfg.H)
        self.llm.norm = _vec(cfg.H)
        self.llm.unembed = nn.Linear(cfg.H, cfg.V, bias=False)
        self.llm.layers = nn.ModuleList([Layer(cfg, cfg.local[i], cfg.dense(i)) for i in range(cfg.L)])
        self.mtp = nn.Module()
        self.mtp.layers = nn.ModuleList([MTPDepth(cfg, cfg.mtp_local[m]) for m in range(cfg.D)])

    # -- pieces
    def embed(self, ids):
        return rms(self.llm.embed(ids), self.llm.embed_norm.weight, self.cfg.eps)

    def head(self, u):
        return F.linear(u / self.cfg.mu, self.llm.unembed.weight)[..., :self.cfg.Vu]

    def backbone(self, ids, layer_outputs=None):
        """ids [B, T] -> pre-norm hidden [B, T, H]."""
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device)
        x = self.embed(ids)
        for lyr in self.llm.layers:
            x = lyr(x, pos)
            if layer_outputs is not None:
                layer_outputs.append(x)
        return x

    def forward(self, ids):
        h = self.backbone(ids)
        return self.head(rms(h, self.llm.norm.weight, self.cfg.eps))

    def mtp_chain(self, h_post, ids, ndepth=None):
        """Mode-P training semantics. h_post [B, T, H] final-normed backbone hidden of positions
        0..T-1; ids [B, T + D + 1] (at least T + ndepth tokens). Depth m row p consumes
        x_{p+m+1}. Returns the list of depth outputs u_m [B, T, H]."""
        T = h_post.shape[1]
        pos = torch.arange(T, device=ids.device)
        outs, h = [], h_post
        for m, depth in enumerate(self.mtp.layers[: (ndepth or self.cfg.D)]):
            e = self.embed(ids[:, m + 1:m + 1 + T])
            h = depth(h, e, pos)
            outs.append(h)
        return outs

    # -- greedy helpers (recompute from scratch; for export / checks only)
    @torch.no_grad()
    def greedy(self, prompt, n):
        ids = list(prompt)
        for _ in range(n):
            lg = self.forward(torch.tensor([ids]))[0, -1]
            ids.append(int(torch.argmax(lg)))
        return ids[len(prompt):]

    @torch.no_grad()
    def mtp_drafts(self, ids):
        """Mode-P drafts after a prefix ids (x_0..x_{n-1}) and bonus token already included:
        given the committed sequence ids = x_0..x_n, depth m drafts x_{n+m+1} from row n-1."""
        x = torch.tensor([ids])
        n = len(ids) - 1
        h = rms(self.backbone(x[:, :n]), self.llm.norm.weight, self.cfg.eps)
        pos = torch.arange(n)
        toks = list(ids)
        drafts = []
        for m, depth in enumerate(self.mtp.layers):
            e = self.embed(torch.tensor([toks[m + 1:m + 1 + n]]))
            h = depth(h, e, pos)
            d = int(torch.argmax(self.head(h[0, -1])))
            drafts.append(d)
            toks.append(d)
        return drafts


# ----------------------------------------------------------------------------- release I/O

def release_state(model, which):
    """Release-named tensors of 'llm' (backbone) or 'mtp' (head)."""
    out = {}
    for name, t in model.state_dict().items():
        if name.startswith(which + "."):
            out["model." + name] = t
    return out


def load_release(model_dir, dtype=torch.float32):
    from safetensors_io import load_file
    raw = json.load(open(os.path.join(model_dir, "config.json")))
    cfg = Cfg(raw)
    model = Inkling(cfg)
    sd = {}
    for fn in ("model.safetensors", "mtp.safetensors"):
        p = os.path.join(model_dir, fn)
        if os.path.exists(p):
            sd.update(load_file(p))
    own = model.state_dict()
    missing = []
    for name in own:
        rel = "model." + name
        if rel in sd:
            t = sd[rel].to(dtype)
            if t.shape != own[name].shape:
                raise ValueError(f"{rel}: shape {tuple(t.shape)} != {tuple(own[name].shape)}")
            own[name].copy_(t)
        else:
            missing.append(rel)
    extra = [n for n in sd if n[len("model."):] not in own]
    return model, cfg, missing, extra


# ----------------------------------------------------------------------------- cached decode

class Cache:
    """Per-layer KV rows and raw conv-input history for one sequence (benchmarking only)."""

    def __init__(self, L):
        self.n = 0
        self.kv = [None] * L
        self.hist = [dict() for _ in range(L)]


def _conv_step(hist, key, u, w):
    """One-row SConv with the last K-1 raw inputs kept in hist[key]. u [1, 1, C]."""
    K = w.shape[-1]
    prev = hist.get(key)
    seq = u if prev is None else torch.cat([prev, u], dim=1)
    hist[key] = seq[:, -(K - 1):]
    T = seq.shape[1]
    y = u * (1.0 + w[:, 0, K - 1])
    for k in range(K - 1):
        s = K - 1 - k
        if T - 1 - s >= 0:
            y = y + seq[:, T - 1 - s:T - s] * w[:, 0, k]
    return y


@torch.no_grad()
def decode_step(model, cache, tok):
    """Feeds one token at position cache.n; returns its logits [Vu]."""
    cfg = model.cfg
    p = cache.n
    x = model.embed(torch.tensor([[tok]]))
    for li, lyr in enumerate(model.llm.layers):
        at, hist = lyr.attn, cache.hist[li]
        a = rms(x, lyr.attn_norm.weight, cfg.eps)
        q = rms(at.wq_du(a).view(1, 1, at.nh, at.hd), at.q_norm.weight, cfg.eps)[0, 0]  # nh hd
        k = _conv_step(hist, "k", at.wk_dv(a), at.k_sconv.weight).view(at.nkv, at.hd)
        v = _conv_step(hist, "v", at.wv_dv(a), at.v_sconv.weight).view(at.nkv, at.hd)
        k = rms(k, at.k_norm.weight, cfg.eps)
        r = at.wr_du(a).view(at.nh, at.d_rel)
        if cache.kv[li] is None:
            K_, V_ = k[None], v[None]
        else:
            K_, V_ = torch.cat([cache.kv[li][0], k[None]]), torch.cat([cache.kv[li][1], v[None]])
        if at.local:
            K_, V_ = K_[-at.W:], V_[-at.W:]
        cache.kv[li] = (K_, V_)
        n = K_.shape[0]
        dist = torch.arange(n - 1, -1, -1)  # distance of each cached key
        g = at.nh // at.nkv
        kk = K_.repeat_interleave(g, dim=1)  # n nh hd
        vv = V_.repeat_interleave(g, dim=1)
        score = torch.einsum("hd,nhd->hn", q, kk) / at.hd
        lrel = r @ at.rel_logits_proj.proj  # nh R
        lrel = torch.nn.functional.pad(lrel, (0, 1))
        idx = torch.where(dist < at.R, dist, torch.full_like(dist, at.R))
        score = score + lrel[:, idx]
        if not at.local and cfg.n_floor is not None:
            score = score * (1.0 + cfg.alpha * math.log(max((p + 1) / cfg.n_floor, 1.0)))
        o = torch.einsum("hn,nhd->hd", torch.softmax(score, -1), vv).reshape(1, 1, -1)
        x = x + _conv_step(hist, "a", at.wo_ud(o), lyr.attn_sconv.weight)
        m = lyr.mlp(rms(x, lyr.mlp_norm.weight, cfg.eps))
        x = x + _conv_step(hist, "m", m, lyr.mlp_sconv.weight)
    cache.n += 1
    return model.head(rms(x, model.llm.norm.weight, cfg.eps))[0, 0]
