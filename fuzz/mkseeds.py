#!/usr/bin/env python3
"""Regenerates the seed corpora in fuzz/corpus/<target>/ from the repository's test data.

Usage: fuzz/mkseeds.py [MICRO_MODEL_DIR ...]
The tdir / safetensors seeds pack tiny checkpoints (written by tests/support/ckpt.c with
hidden 8, two layers: release names, HF names in two shards, an MTP file); pass their
directories. Run from the repository root. Seeds are small on purpose (max_len of the targets)."""
import gzip, json, os, struct, sys

OUT = "fuzz/corpus"


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def st_raw(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def st_brace(header, data=b""):  # fz_write_st form: header, NUL, data
    return json.dumps(header, separators=(",", ":")).encode() + b"\0" + data


# ---- safetensors
one = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
put("safetensors", "f32", st_raw(one, bytes(16)))
put("safetensors", "f32_brace", st_brace(one, bytes(16)))
put("safetensors", "empty", st_raw({}))
put("safetensors", "meta", st_brace({"__metadata__": {"format": "pt"}, "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                                     "b": {"dtype": "U8", "shape": [0, 5], "data_offsets": [6, 6]},
                                     "c": {"dtype": "F8_E4M3", "shape": [1, 1, 1, 2], "data_offsets": [6, 8]}}, bytes(8)))
put("safetensors", "dtypes", st_brace({f"t{i}": {"dtype": d, "shape": [1], "data_offsets": [o, o + b]}
                                       for i, (d, b, o) in enumerate([("F64", 8, 0), ("I64", 8, 8), ("U64", 8, 16), ("I32", 4, 24),
                                                                      ("U32", 4, 28), ("I16", 2, 32), ("U16", 2, 34), ("F16", 2, 36),
                                                                      ("I8", 1, 38), ("BOOL", 1, 39), ("F8_E5M2", 1, 40), ("F8_E8M0", 1, 41)])}, bytes(42)))
put("safetensors", "overlap", st_brace({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                        "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, bytes(6)))

# ---- tdir (and safetensors seeds from the micro models)
def pack(files):
    out = b""
    for name, data in files:
        out += b"%%" + name.encode() + b"\n" + data + b"\n"
    return out[:-1]

for k, d in enumerate(sys.argv[1:]):
    files = []
    for fn in sorted(os.listdir(d)):
        data = open(os.path.join(d, fn), "rb").read()
        if fn.endswith(".safetensors"):
            n = struct.unpack("<Q", data[:8])[0]
            put("safetensors", f"model{k}_{fn}", data)
            data = data[8:8 + n] + b"\0" + data[8 + n:]
        files.append((fn, data))
    put("tdir", f"model{k}", pack(files))
    names = dict(files)
    if "model.safetensors.index.json" in names:  # a missing shard, then a stale index
        miss = [f for f in files if not f[0].endswith("00002.safetensors")]
        put("tdir", f"model{k}_missing", pack(miss))
        stale = [(("other.safetensors" if f[0].endswith("00002.safetensors") else f[0]), f[1]) for f in files]
        put("tdir", f"model{k}_stale", pack(stale))
put("tdir", "index_only", pack([("model.safetensors.index.json", b'{"weight_map":{"a":"x.safetensors","mtp.b":"y.safetensors"}}'),
                                ("x.safetensors", st_brace(one, bytes(16)))]))

# ---- config
for p in ["tests/data/golden/tiny-dense/config.json", "tests/data/golden/tiny-moe/config.json",
          "tests/data/golden/tiny-moe/drafter-fit/config.json"] + [os.path.join(d, "config.json") for d in sys.argv[1:]]:
    if os.path.exists(p):
        put("config", p.replace("/", "_").replace("tests_data_golden_", "").replace("_config.json", "") or "c", open(p, "rb").read())
flat = json.load(open("tests/data/golden/tiny-moe/config.json"))
tc = flat.pop("text_config")
tc.update({"architectures": ["InklingForCausalLM"], "model_type": "inkling", "eos_token_id": [2, 3],
           "mlp_layer_types": ["dense"] + ["sparse"] * (tc["num_hidden_layers"] - 1), "moe_intermediate_size": 32})
put("config", "flat_hf", json.dumps(tc, indent=1))

# ---- tokenizer: a reduced copy of the test tokenizer (bytes + a few merges), both merge forms
t = json.load(gzip.open("tests/data/tok/tokenizer.json.gz"))
vocab = t["model"]["vocab"]
keep = {k: v for k, v in vocab.items() if len(k) == 1 or v < 300}
merges = [m for m in t["model"]["merges"] if m[0] in keep and m[1] in keep and (m[0] + m[1]) in keep][:40]
small = dict(t)
small["model"] = dict(t["model"], vocab=keep, merges=merges)
small["added_tokens"] = [a for a in t["added_tokens"] if a["id"] in (199999, 200000, 200006)]
put("tokenizer", "small_pairs", json.dumps(small, ensure_ascii=False))
small2 = dict(small)
small2["model"] = dict(small["model"], merges=[" ".join(m) for m in merges], ignore_merges=False)
small2["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+|\\S+"}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
put("tokenizer", "small_strings", json.dumps(small2, ensure_ascii=False))

# ---- encode: texts of the tokenizer vectors (a spread of them)
vec = json.load(open("tests/data/tok/vectors.json"))
cases = vec["cases"]
for c in cases[:: max(1, len(cases) // 60)]:
    b = c["text"].encode("utf-8", "surrogatepass")
    if 0 < len(b) <= 2048:
        put("encode", c["name"][:60].replace("/", "_"), b)
put("encode", "bytes", bytes(range(256)))
put("encode", "specials", "<|endoftext|>x<|message_user|><|content_text|> hi<|end_message|>")

# ---- chat: the rendered chat cases of the vectors
for c in vec["chat"]:
    obj = {"messages": json.loads(c["messages_json"])}
    for k in ("effort", "tools"):
        if c.get(k) is not None:
            obj[k] = json.loads(c[k]) if k == "tools" and isinstance(c[k], str) else c[k]
    if c.get("tools_json"):
        obj["tools"] = json.loads(c["tools_json"])
    put("chat", c["name"], json.dumps(obj, ensure_ascii=False))

# ---- hub: Hub API listings
sha = "0123456789abcdef0123456789abcdef01234567"
sibs = [{"rfilename": "config.json", "size": 1200, "blobId": "a" * 40},
        {"rfilename": "model-00001-of-00002.safetensors", "size": 134, "blobId": "b" * 40,
         "lfs": {"sha256": "c" * 64, "size": 1000000, "pointerSize": 134}},
        {"rfilename": "model-00002-of-00002.safetensors", "lfs": {"oid": "d" * 64, "size": 5}},
        {"rfilename": "model.safetensors.index.json", "size": 300},
        {"rfilename": "tokenizer.json"}, {"rfilename": "README.md"}, {"rfilename": "pytorch_model.bin"},
        {"rfilename": "sub/dir/extra.safetensors"}, {"rfilename": "../evil.safetensors"}, {"rfilename": "/abs.json"}]
put("hub", "listing", json.dumps({"id": "o/n", "sha": sha, "siblings": sibs}))
put("hub", "gated", json.dumps({"sha": sha, "gated": "manual", "siblings": sibs[:3]}))
put("hub", "globs", json.dumps({"sha": sha, "siblings": sibs, "x-include": ["*.safetensors", "config.json", "**/*.json"],
                                "x-exclude": ["model-0000[2]-*", "sub/**"]}))
put("hub", "empty", json.dumps({"sha": sha, "siblings": []}))
