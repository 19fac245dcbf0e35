#!/usr/bin/python3
"""Train the BPE on the corpus and write tokenizer.json. Usage: mktok.py OUT_DIR [VOCAB]"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402

out = sys.argv[1]
V = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
os.makedirs(out, exist_ok=True)
t0 = time.time()
toks, merges = bpe.train(corpus.books(), V)
bpe.write_tokenizer_json(os.path.join(out, "tokenizer.json"), toks, merges)
print(f"{len(toks)} tokens + {bpe.N_ADDED} added, {len(merges)} merges, {time.time() - t0:.1f}s")
