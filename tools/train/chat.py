#!/usr/bin/python3
"""Fine-tune a trained model (default: the bundled models/inkling-kjv) to speak the Inkling chat
format, on conversations rendered from the same KJV corpus, mixed with the plain corpus; the MTP
head is trained along.

  chat.py --out RUN [--init models/inkling-kjv] [--time-budget S] [--steps N --decay-start S]
  export.py RUN models/inkling-kjv

Conversations (docs/tokenizer.md, shared spec tokenizer.md 6): an optional system block, the
effort block, then user/model turns, each model turn a text block closed by
<|end_message|><|content_model_end_sampling|>. Kinds: a verse by reference ("Genesis 1:3"), the
verse after a quoted one, continue a passage (the rest of the verse and the next), which book and
chapter a line is from, a two-turn exchange. The held-out split is the plain corpus' last 2 % and
the chat rows built from the last 2 % of verses. Batches are a function of (seed, step), half chat
rows, half plain rows; RUN/ckpt.pt resumes (same layout as train.py, so export.py applies).
"""
import argparse
import csv
import json
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
import train as tr  # noqa: E402
from model import Cfg, MoE, load_release  # noqa: E402

ASK_REF = ["{r}", "Give me {r}.", "What does {r} say?", "Recite {r}.", "Read {r}.", "Quote {r}, please.",
           "What is written in {r}?", "Show me {r}."]
ASK_NEXT = ["What comes after \"{v}\"?", "Which verse follows: {v}", "Next verse after: {v}"]
ASK_CONT = ["Continue: {v}", "Finish this verse: {v}", "Go on: {v}", "Continue the passage: {v}"]
ASK_WHERE = ["Where is this written? {v}", "Which book says: {v}", "Who wrote \"{v}\"?"]
SYSTEMS = ["Answer in the words of the King James Bible.", "You are a concordance of the King James Bible.",
           "Be brief.", "Quote scripture exactly."]
EFFORTS = ["0", "0.2", "0.9", "0.9", "0.9", "0.99", "0.7", "0.1"]


def verses():
    """[(book, chapter, verse, text)] in canonical order."""
    out = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, check=True).stdout
    res, book, ch = [], None, 0
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            res.append((book, ch, int(m.group(1)), m.group(2).strip()))
            continue
        h = re.match(r"^(.*\S) (\d+)$", line.strip())
        if not h:
            raise ValueError("unexpected line: " + line)
        book, ch = h.group(1), int(h.group(2))
    return res


class Renderer:
    def __init__(self, tok):
        self.tok = tok
        s = tok.special
        self.U, self.M, self.S = s["<|message_user|>"], s["<|message_model|>"], s["<|message_system|>"]
        self.T, self.E, self.EOS = s["<|content_text|>"], s["<|end_message|>"], s["<|content_model_end_sampling|>"]

    def block(self, role, text):
        return [role, self.T] + self.tok.encode(text) + [self.E]

    def conv(self, system, effort, turns):
        ids = []
        if system:
            ids += self.block(self.S, system)
        ids += self.block(self.S, f"Thinking effort level: {effort}")
        for u, a in turns:
            ids += self.block(self.U, u) + [self.M, self.T] + self.tok.encode(a) + [self.E, self.EOS]
        return ids


def ref(v):
    return f"{v[0]} {v[1]}:{v[2]}"


def conversation(rng, vs, i):
    v = vs[i]
    nxt = vs[i + 1] if i + 1 < len(vs) and vs[i + 1][0] == v[0] else None
    k = rng.random()
    if k < 0.4 or nxt is None:
        turns = [(rng.choice(ASK_REF).format(r=ref(v)), v[3])]
    elif k < 0.55:
        turns = [(rng.choice(ASK_NEXT).format(v=v[3]), nxt[3])]
    elif k < 0.75:
        w = v[3].split(" ")
        cut = max(1, min(len(w) - 1, rng.randint(2, 8)))
        turns = [(rng.choice(ASK_CONT).format(v=" ".join(w[:cut])), " ".join(w[cut:]) + " " + nxt[3])]
    elif k < 0.85:
        turns = [(rng.choice(ASK_WHERE).format(v=v[3]), f"It is written in {ref(v)}.")]
    else:
        turns = [(rng.choice(ASK_REF).format(r=ref(v)), v[3]), ("And the next?", nxt[3])]
    system = rng.choice(SYSTEMS) if rng.random() < 0.3 else None
    return system, rng.choice(EFFORTS), turns


def chat_stream(tok, vs, seed):
    """All verses once each (shuffled), rendered and concatenated: int16 ids."""
    r = Renderer(tok)
    rng = random.Random(seed)
    order = list(range(len(vs)))
    rng.shuffle(order)
    ids = []
    for i in order:
        ids += r.conv(*conversation(rng, vs, i))
    return np.array(ids, dtype=np.int16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../models/inkling-kjv"))
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--chat-rows", type=int, default=5, help="rows per batch from the chat stream")
    ap.add_argument("--seq", type=int, default=192)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.5)
    ap.add_argument("--mtp-stride", type=int, default=4)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--decay-start", type=int, default=None)
    ap.add_argument("--time-budget", type=float, default=0,
                    help="training seconds: at 80%% fix decay_start = now, steps = now * 1.25 (recorded)")
    ap.add_argument("--time-limit", type=float, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    import shutil
    tokp = os.path.join(a.out, "tokenizer.json")
    if not os.path.exists(tokp):
        shutil.copy(os.path.join(a.init, "tokenizer.json"), tokp)
    tok = bpe.Tokenizer(tokp)
    eos = tok.special["<|endoftext|>"]
    plainp, chatp, valp = (os.path.join(a.out, f) for f in ("tokens.npy", "chat.npy", "chat_val.npy"))
    if not os.path.exists(plainp):
        ids = []
        for b in corpus.books():
            ids.extend(tok.encode(b))
            ids.append(eos)
        np.save(plainp, np.array(ids, dtype=np.int16))
    if not os.path.exists(chatp):
        vs = verses()
        n_hold = len(vs) // 50
        np.save(chatp, chat_stream(tok, vs[:-n_hold], a.seed))
        np.save(valp, chat_stream(tok, vs[-n_hold:], a.seed + 1))
    plain = np.load(plainp).astype(np.int64)
    chat = np.load(chatp).astype(np.int64)
    cval = np.load(valp).astype(np.int64)
    n_val = len(plain) // 50
    n_train = len(plain) - n_val
    raw = json.load(open(os.path.join(a.init, "config.json")))
    raw.pop("training", None)
    raw["training"] = {"corpus": "bible-kjv-text " + corpus.package_version(), "seed": a.seed,
                       "init": "models/inkling-kjv (plain-text model, see README)",
                       "command": " ".join(["tools/train/chat.py"] + sys.argv[1:]), "tokens": int(len(plain)),
                       "chat_tokens": int(len(chat)), "chat_val_tokens": int(len(cval)), "val_tokens": n_val}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    model, cfg, missing, extra = load_release(a.init, torch.float32)
    assert not missing and not extra, (missing, extra)
    model.train()
    torch.manual_seed(a.seed)
    opt = torch.optim.AdamW(tr.param_groups(model, a.wd), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed = 0, 0.0
    ck = os.path.join(a.out, "ckpt.pt")
    if os.path.exists(ck):
        st = torch.load(ck)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, elapsed = st["step"], st["elapsed"]
        if st.get("decay_start") is not None:
            a.decay_start, a.steps = st["decay_start"], st["steps"]
        print(f"resumed at step {step} ({elapsed:.0f}s trained)", flush=True)
    print(f"plain {len(plain)} tokens, chat {len(chat)} (+{len(cval)} held out)", flush=True)
    logp = os.path.join(a.out, "loss.csv")
    fields = ["step", "tokens", "seconds", "lr", "loss", "main"] + [f"mtp{m}" for m in range(cfg.D)] + \
             ["val_main"] + [f"val_mtp{m}" for m in range(cfg.D)] + ["val_chat_main"]
    if not os.path.exists(logp):
        with open(logp, "w", newline="") as f:
            csv.writer(f).writerow(fields)
    span = a.seq + cfg.D + 1
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    t_run = time.time()

    def rows(step):
        g = np.random.default_rng([a.seed, step])
        po = g.integers(0, n_train - span, size=a.batch - a.chat_rows)
        co = g.integers(0, len(chat) - span, size=a.chat_rows)
        r = [chat[o:o + span] for o in co] + [plain[o:o + span] for o in po]
        return torch.from_numpy(np.stack(r).astype(np.int64))

    def save():
        tmp = ck + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed": elapsed, "decay_start": a.decay_start, "steps": a.steps}, tmp)
        os.replace(tmp, ck)

    while step < a.steps:
        t0 = time.time()
        for g_ in opt.param_groups:
            g_["lr"] = tr.lr_at(step, a)
        x = rows(step)
        main_l, dl = tr.losses(model, x, a.seq, cfg.D, a.mtp_stride, step)
        loss = main_l + a.mtp_weight * sum(dl) / len(dl)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
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
               "lr": f"{tr.lr_at(step - 1, a):.3e}", "loss": f"{loss.item():.4f}", "main": f"{main_l.item():.4f}"}
        for m, l in enumerate(dl):
            row[f"mtp{m}"] = f"{l.item():.4f}"
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                vb = torch.from_numpy(np.stack([plain[n_train + o:n_train + o + span]
                                                for o in range(0, n_val - span, n_val // 8)][:8]).astype(np.int64))
                vm, vd = tr.losses(model, vb, a.seq, cfg.D)
                cb = torch.from_numpy(np.stack([cval[o:o + span]
                                                for o in range(0, len(cval) - span, len(cval) // 8)][:8]).astype(np.int64))
                cm, _ = tr.losses(model, cb, a.seq, cfg.D)
            model.train()
            row["val_main"] = f"{vm.item():.4f}"
            for m, l in enumerate(vd):
                row[f"val_mtp{m}"] = f"{l.item():.4f}"
            row["val_chat_main"] = f"{cm.item():.4f}"
        with open(logp, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=fields).writerow(row)
        if step % 5 == 0:
            print(f"step {step}/{a.steps} {elapsed:.0f}s loss {loss.item():.3f} main {main_l.item():.3f} "
                  f"mtp {' '.join(f'{l.item():.2f}' for l in dl)} {a.batch * a.seq / dt:.0f} tok/s"
                  + (f" val {row['val_main']} chat {row['val_chat_main']}" if "val_main" in row else ""), flush=True)
        if step % a.ckpt_every == 0 or step == a.steps:
            save()
        if a.time_limit and time.time() - t_run > a.time_limit:
            save()
            print("time limit reached", flush=True)
            break


if __name__ == "__main__":
    main()
