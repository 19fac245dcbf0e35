#!/usr/bin/python3
"""Export a training run to the Inkling release layout.

  export.py RUN_DIR OUT_DIR [--dtype bf16|f32] [--n 32]

OUT_DIR gets config.json (text_config + mtp_config), model.safetensors (model.llm.*),
mtp.safetensors (model.mtp.*), tokenizer.json, tokenizer_config.json, generation_config.json,
TRAINING.md facts in training.json, loss.csv (+ loss.png), and expected.json: greedy
continuations computed by model.py from the EXPORTED weights (bf16 widened to f32, as the engine
does), plus tokenizer vectors, for tests/test_bundled.c.
"""
import argparse
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from model import Cfg, Inkling, load_release  # noqa: E402
from safetensors_io import save_file  # noqa: E402

PROMPTS = [
    "In the beginning God created",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the",
    "The LORD is my shepherd;",
    "And it came to pass",
    "Jesus said unto them,",
]

# Chat cases (models fine-tuned by chat.py): (system or None, user message), rendered as the engine
# renders a chat request (tok/chat.c: system, effort block at the default 0.9, user, <|message_model|>)
CHATS = [
    (None, "Genesis 1:1"),
    (None, "Continue: In the beginning God"),
    (None, "What comes after \"The LORD is my shepherd; I shall not want.\"?"),
    ("Answer in the words of the King James Bible.", "Recite John 3:16."),
    (None, "Where is this written? Jesus wept."),
]

TOKENIZER_STRINGS = PROMPTS + [
    "For God so loved the world, that he gave his only begotten Son.",
    "Genesis 1\nIn the beginning God created the heaven and the earth.\n\nGenesis 2\n",
    "  two spaces, 1234567 digits, UPPER lower MiXeD, don't we'll it's",
    "caf\u00e9 \u00fcber na\u00efve \u65e5\u672c\u8a9e \U0001F600 \t\ttabs\r\n",
    "x<|endoftext|> y<|content_model_end_sampling|>",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--n", type=int, default=32, help="greedy tokens per expected prompt")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    raw = json.load(open(os.path.join(a.run, "config.json")))
    training = raw.pop("training", {})
    cfg = Cfg(raw)
    model = Inkling(cfg)
    ck = os.path.join(a.run, "ckpt.pt")
    step = 0
    if os.path.exists(ck):
        st = torch.load(ck)
        model.load_state_dict(st["model"])
        step = st["step"]
        training["steps_done"] = step
        training["train_seconds"] = round(st["elapsed"], 1)
        if st.get("decay_start") is not None:
            training["decay_start"], training["steps"] = st["decay_start"], st["steps"]
    else:
        import train as tr
        tr.init_weights(model, cfg, 0)
        training["steps_done"] = 0
    os.makedirs(a.out, exist_ok=True)
    wdt = torch.bfloat16 if a.dtype == "bf16" else torch.float32

    def conv(name, t):
        if name.endswith("mlp.gate.bias") or name.endswith("mlp.gate.global_scale"):
            return t.float()  # f32 on disk in the release (inkling-text.md 2.4)
        return t.to(wdt)

    sd = model.state_dict()
    llm = {"model." + k: conv(k, v) for k, v in sd.items() if k.startswith("llm.")}
    mtp = {"model." + k: conv(k, v) for k, v in sd.items() if k.startswith("mtp.")}
    save_file(llm, os.path.join(a.out, "model.safetensors"), {"format": "pt"})
    save_file(mtp, os.path.join(a.out, "mtp.safetensors"), {"format": "pt"})
    raw["text_config"]["torch_dtype"] = "bfloat16" if a.dtype == "bf16" else "float32"
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
        f.write("\n")
    shutil.copy(os.path.join(a.run, "tokenizer.json"), os.path.join(a.out, "tokenizer.json"))
    tok = bpe.Tokenizer(os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": raw["text_config"]["model_max_length"], "tokenizer_class":
                   "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": raw["eos_token_id"], "do_sample": True, "temperature": 0.8,
                   "top_p": 0.95}, f, indent=2)
        f.write("\n")
    for fn in ("loss.csv", "schedule.json"):
        if os.path.exists(os.path.join(a.run, fn)):
            shutil.copy(os.path.join(a.run, fn), os.path.join(a.out, fn))
    with open(os.path.join(a.out, "training.json"), "w") as f:
        json.dump(training, f, indent=2)
        f.write("\n")
    plot(os.path.join(a.out, "loss.csv"), os.path.join(a.out, "loss.png"))

    # expected outputs from the exported (rounded) weights
    m2, cfg2, missing, extra = load_release(a.out, torch.float32)
    assert not missing and not extra, (missing, extra)
    cases = []
    for p in PROMPTS:
        ids = tok.encode(p)
        gen = m2.greedy(ids, a.n)
        cases.append({"prompt": p, "prompt_ids": ids, "greedy_ids": gen, "text": tok.decode(gen),
                      "mtp_drafts_after_prompt": m2.mtp_drafts(ids + gen[:1])})
        print(repr(p), "->", repr(tok.decode(gen)))
    if "<|message_user|>" in tok.special and training.get("chat_tokens"):
        sp_ = tok.special

        def block(role, text):
            return [sp_[role], sp_["<|content_text|>"]] + tok.encode(text) + [sp_["<|end_message|>"]]

        for system, user in CHATS:
            ids = (block("<|message_system|>", system) if system else []) + \
                block("<|message_system|>", "Thinking effort level: 0.9") + block("<|message_user|>", user) + \
                [sp_["<|message_model|>"]]
            gen = m2.greedy(ids, a.n)
            cases.append({"prompt": user, "chat": {"system": system, "user": user}, "prompt_ids": ids, "greedy_ids": gen,
                          "text": tok.decode(gen), "mtp_drafts_after_prompt": m2.mtp_drafts(ids + gen[:1])})
            print("chat", repr(user), "->", repr(tok.decode(gen)))
    vec = [{"text": s, "special": sp, "ids": tok.encode(s, special=sp)}
           for s in TOKENIZER_STRINGS for sp in (False, True)]
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump({"note": "written by tools/train/export.py from model.py (f32 math on the exported "
                           "weights); greedy = argmax over the unpadded vocab, ties to the lowest id",
                   "n_new": a.n, "step": step, "cases": cases, "tokenizer": vec}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")


def plot(csv_path, png_path):
    if not os.path.exists(csv_path):
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    import csv
    rows = list(csv.DictReader(open(csv_path)))
    if not rows:
        return
    tok = [int(r["tokens"]) / 1e6 for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
    ax.plot(tok, [float(r["main"]) for r in rows], label="backbone (next token)", lw=1)
    depths = [k for k in rows[0] if k.startswith("mtp")]
    for k in depths:
        ax.plot(tok, [float(r[k]) for r in rows], label=f"MTP depth {k[3:]} (t+{int(k[3:]) + 2})", lw=0.6)
    v = [(t, float(r["val_main"])) for t, r in zip(tok, rows) if r.get("val_main")]
    if v:
        ax.plot([x for x, _ in v], [y for _, y in v], "k.", label="backbone, held-out")
    ax.set_xlabel("training tokens (M)")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_ylim(top=min(9.0, ax.get_ylim()[1]))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main()
