#!/usr/bin/env python3
"""Writes draft_vocab.json for a model directory: the token ids ranked by their frequency in the
training split of the corpus (most frequent first). The engine's `--draft-vocab N` lets the MTP head
propose only the first N of them, which cuts each draft's unembedding to N rows; the target still
verifies over the whole vocabulary, so greedy output is unchanged and sampling stays lossless
(docs/speculative.md).

    tools/train/draft_vocab.py models/inkling-kjv [--chat RUN/chat.npy]

--chat adds the chat fine-tuning stream chat.py trained on (RUN/chat.npy: rendered conversations,
the held-out verses excluded), so the chat control tokens and answer openings rank where a chat
model uses them.
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--chat", help="chat.py's RUN/chat.npy, counted with the plain corpus")
    a = ap.parse_args()
    tok = bpe.Tokenizer(os.path.join(a.model_dir, "tokenizer.json"))
    eos = tok.special["<|endoftext|>"]
    ids = []
    for b in corpus.books():  # the order and layout train.py encodes
        ids.extend(tok.encode(b))
        ids.append(eos)
    n_train = len(ids) - len(ids) // 50  # train.py holds out the last 1/50
    counts = collections.Counter(ids[:n_train])
    source = "bible-kjv-text " + corpus.package_version()
    if a.chat:
        import numpy as np
        counts.update(int(i) for i in np.load(a.chat))
        source += " + chat.py conversations"
    ranked = sorted(counts, key=lambda i: (-counts[i], i))
    total = sum(counts.values())
    cover = {}
    acc = 0
    for r, i in enumerate(ranked, 1):
        acc += counts[i]
        if r in (256, 512, 1024, 2048):
            cover[str(r)] = round(acc / total, 4)
    doc = {"about": "token ids by descending frequency in the training split (tools/train/draft_vocab.py)",
           "corpus": source, "tokens": total,
           "coverage": cover, "ids": ranked}
    with open(os.path.join(a.model_dir, "draft_vocab.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(json.dumps({k: doc[k] for k in ("corpus", "tokens", "coverage")}), "ids:", len(ranked))


if __name__ == "__main__":
    main()
