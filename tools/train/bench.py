#!/usr/bin/python3
"""Plain vs MTP decoding on the bundled model, and engine vs PyTorch decode speed.

  bench.py [--model models/inkling-kjv] [--bin ./inkling] [--threads 2] [--reps 3] [--n 96]
           [--draft-vocab N] [--no-torch] [--json OUT.json]

For every repetition the plain run and all MTP configurations (per-depth and compat, K = 2..D+2,
T = 0 and T = 0.8; with --draft-vocab N also per-depth with an N-token draft vocabulary) run back to back on the same prompts (the expected.json prompts), so each
speedup is a ratio measured within one repetition; the table reports medians over repetitions.
Engine numbers come from `inkling generate --stats-json`. The PyTorch column is model.py's cached
decode (decode_step) on the same checkpoint (bf16 widened to f32) with the same thread count.
Markdown goes to stdout.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_engine(a, prompt, temp, seed, mode=None, K=None, dv=0):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [a.bin, "generate", "-m", a.model, "-t", str(a.threads), "--prompt-ids", ",".join(map(str, prompt)),
           "-n", str(a.n), "--temp", str(temp), "--seed", str(seed), "--ids", "--stats-json", path]
    if mode:
        cmd += ["--draft-kind", "mtp", "--draft-model", a.model, "--mtp-mode", mode, "--draft-block-size", str(K),
                "--draft-vocab", str(dv)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    st = json.load(open(path))
    os.unlink(path)
    return st


def aggregate(stats):
    gen = sum(s["generated_tokens"] for s in stats)
    dec = sum(s["decode_s"] for s in stats)
    out = {"tok_s": (gen - len(stats)) / dec if dec > 0 else 0.0}
    rounds = sum(s.get("rounds", 0) for s in stats)
    if rounds:
        # mean accepted length = tokens per verify = 1 + accepted / rounds (bonus included)
        out["mal"] = 1.0 + sum(s["accepted"] for s in stats) / rounds
        D = max(len(s.get("proposed_per_depth", [])) for s in stats)
        prop = [sum(s["proposed_per_depth"][j] for s in stats if j < len(s["proposed_per_depth"])) for j in range(D)]
        acc = [sum(s["accepted_per_depth"][j] for s in stats if j < len(s["accepted_per_depth"])) for j in range(D)]
        out["per_depth"] = [acc[j] / prop[j] if prop[j] else None for j in range(D)]
    return out


def torch_decode_tps(a, prompts):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from model import Cache, decode_step, load_release
    torch.set_num_threads(a.threads)
    model, cfg, _, _ = load_release(a.model, torch.float32)
    model.eval()
    res = []
    for _ in range(a.reps):
        ntok, secs = 0, 0.0
        for p in prompts:
            c = Cache(cfg.L)
            for t in p[:-1]:
                decode_step(model, c, t)
            tok = p[-1]
            t0 = time.time()
            for _ in range(a.n):
                tok = int(torch.argmax(decode_step(model, c, tok)))
            secs += time.time() - t0
            ntok += a.n
        res.append(ntok / secs)
    return statistics.median(res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/inkling-kjv")
    ap.add_argument("--bin", default="./inkling")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--draft-vocab", type=int, default=0)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    exp = json.load(open(os.path.join(a.model, "expected.json")))
    prompts = [c["prompt_ids"] for c in exp["cases"]]
    D = json.load(open(os.path.join(a.model, "config.json")))["mtp_config"]["num_nextn_predict_layers"]
    configs = [(m, K, 0) for m in ("per-depth", "compat") for K in range(2, D + 3)]
    if a.draft_vocab:
        configs += [("per-depth", K, a.draft_vocab) for K in range(2, D + 3)]
    temps = (0.0, 0.8)
    reps = {}
    for r in range(a.reps):
        for T in temps:
            base = aggregate([run_engine(a, p, T, 100 + i) for i, p in enumerate(prompts)])
            reps.setdefault((T, None, None, 0), []).append(base)
            for m, K, dv in configs:
                ag = aggregate([run_engine(a, p, T, 100 + i, m, K, dv) for i, p in enumerate(prompts)])
                ag["speedup"] = ag["tok_s"] / base["tok_s"]
                reps.setdefault((T, m, K, dv), []).append(ag)
        print(f"rep {r + 1}/{a.reps} done", file=sys.stderr, flush=True)

    def med(lst, key):
        return statistics.median(x[key] for x in lst)

    rows = []
    for (T, m, K, dv), lst in reps.items():
        label = (m + (f", {dv} draft ids" if dv else "")) if m else "plain"
        row = {"temp": T, "mode": label, "K": K, "draft_vocab": dv, "tok_s": med(lst, "tok_s")}
        if m:
            row["speedup"] = med(lst, "speedup")
            row["mal"] = med(lst, "mal")
            row["per_depth"] = [statistics.median(x["per_depth"][j] for x in lst if x["per_depth"][j] is not None)
                                if any(x["per_depth"][j] is not None for x in lst) else None
                                for j in range(len(lst[0]["per_depth"]))]
        rows.append(row)
    print(f"Model `{a.model}`, {len(prompts)} prompts x {a.n} new tokens, {a.threads} threads, "
          f"medians of {a.reps} repetitions; speedup = MTP decode tok/s / plain decode tok/s of the same repetition.\n")
    print("| T | mode | K | mean accepted length | acceptance per draft position | decode tok/s | speedup |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if row["mode"] == "plain":
            print(f"| {row['temp']:g} | plain | - | 1 | - | {row['tok_s']:.1f} | 1.00 |")
        else:
            pd = " / ".join("-" if x is None else f"{x:.2f}" for x in row["per_depth"])
            print(f"| {row['temp']:g} | {row['mode']} | {row['K']} | {row['mal']:.2f} | {pd} | {row['tok_s']:.1f} | "
                  f"{row['speedup']:.2f} |")
    out = {"rows": rows, "threads": a.threads, "n": a.n, "reps": a.reps}
    if not a.no_torch:
        pt = torch_decode_tps(a, prompts)
        eng = next(r["tok_s"] for r in rows if r["mode"] == "plain" and r["temp"] == 0.0)
        out["torch_tok_s"], out["engine_tok_s"] = pt, eng
        print(f"\nGreedy decode, same checkpoint and prompts, {a.threads} threads: engine {eng:.1f} tok/s, "
              f"PyTorch (tools/train/model.py decode_step, f32) {pt:.1f} tok/s, ratio {eng / pt:.1f}x.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
