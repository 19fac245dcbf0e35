"""Byte-level BPE: a trainer that writes an Inkling-format tokenizer.json, and an encoder /
decoder for the same file (used by the trainer and the tests; must agree with
`inkling tokenize`).

Pipeline (shared/spec/tokenizer.md section 3): no normalizer; Split with the o200k regex
(Isolated) + ByteLevel(add_prefix_space=false, use_regex=false); BPE with ignore_merges=true;
ByteLevel decoder. Ids: byte b is id b; merges follow in rank order; the 60 Inkling added
tokens take the LAST 60 ids in Inkling's order (id = n_ordinary + (inkling_id - 199998)),
because a 4096-entry vocabulary cannot hold ids 199998..200057.
"""
import collections
import json

import regex

PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Inkling's added tokens 199998..200057 (tokenizer.md section 4); the rest are <|unused_N|>.
NAMED = {199998: "<|unused|>", 199999: "<|endoftext|>", 200000: "<|message_user|>",
         200001: "<|message_model|>", 200002: "<|message_system|>", 200003: "<|message_tool|>",
         200004: "<|content_text|>", 200005: "<|content_image|>", 200006: "<|content_model_end_sampling|>",
         200008: "<|content_thinking|>", 200010: "<|end_message|>", 200020: "<|content_audio_input|>",
         200022: "<|content_tool_error|>", 200023: "<|audio|>", 200024: "<|content_xml|>",
         200028: "<|begin_of_text|>", 200043: "<|audio_end|>", 200049: "<|content_invoke_tool_json|>",
         200057: "<|content_invoke_tool_text|>"}
N_ADDED = 60


def added_tokens():
    return [NAMED.get(i, f"<|unused_{i}|>") for i in range(199998, 199998 + N_ADDED)]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def train(texts, vocab_size):
    """texts: iterable of str. Returns (tokens: list of bytes by id, merges: list of (a, b) ids)."""
    n_merges = vocab_size - N_ADDED - 256
    words = collections.Counter()
    for t in texts:
        for piece in regex.findall(PATTERN, t):
            words[piece.encode("utf-8")] += 1
    syms = [list(w) for w in words]
    cnt = [words[w] for w in words]
    toks = [bytes([b]) for b in range(256)]
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for wi, s in enumerate(syms):
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += cnt[wi]
            where[(a, b)].add(wi)
    merges = []
    for _ in range(n_merges):
        if not pairs:
            break
        # most frequent pair; ties: the lexicographically smallest (left bytes, right bytes)
        best = max(pairs.items(), key=lambda kv: (kv[1], [-c for c in toks[kv[0][0]] + b"\xff" + toks[kv[0][1]]]))[0]
        new = len(toks)
        toks.append(toks[best[0]] + toks[best[1]])
        merges.append(best)
        for wi in list(where[best]):
            s, c = syms[wi], cnt[wi]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= c
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
                where[(a, b)].discard(wi)
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            syms[wi] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += c
                where[(a, b)].add(wi)
        where.pop(best, None)
    return toks, merges


def spell(b):
    return "".join(B2U[x] for x in b)


def write_tokenizer_json(path, toks, merges):
    vocab = {spell(t): i for i, t in enumerate(toks)}
    assert len(vocab) == len(toks), "duplicate token spelling"
    n = len(toks)
    added = [{"id": n + j, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for j, s in enumerate(added_tokens())]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[spell(toks[a]), spell(toks[b])] for a, b in merges]},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


class Tokenizer:
    """Encoder/decoder for the tokenizer.json files written above (the subset of the format the
    engine accepts: Split+ByteLevel, BPE with ignore_merges)."""

    def __init__(self, path):
        doc = json.load(open(path, encoding="utf-8"))
        m = doc["model"]
        self.vocab = m["vocab"]
        self.rank = {}
        for r, mg in enumerate(m["merges"]):
            a, b = mg if isinstance(mg, list) else mg.split(" ")
            self.rank[(a, b)] = r
        self.ignore_merges = m.get("ignore_merges", False)
        self.re = regex.compile(doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"])
        self.added = {t["content"]: t["id"] for t in doc["added_tokens"]}
        self.special = {t["content"]: t["id"] for t in doc["added_tokens"] if t["special"]}
        self.id2tok = {i: s for s, i in self.vocab.items()}
        self.id2tok.update({i: s for s, i in self.added.items()})
        self.n_vocab = max(self.id2tok) + 1
        self.cache = {}

    def _bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        if self.ignore_merges and piece in self.vocab:
            out = [self.vocab[piece]]
        else:
            sy = list(piece)
            while len(sy) > 1:
                best, bi = None, -1
                for i in range(len(sy) - 1):
                    r = self.rank.get((sy[i], sy[i + 1]))
                    if r is not None and (best is None or r < best):
                        best, bi = r, i
                if best is None:
                    break
                sy[bi:bi + 2] = [sy[bi] + sy[bi + 1]]
            out = [self.vocab[s] for s in sy]
        self.cache[piece] = out
        return out

    def _encode_text(self, text):
        ids = []
        for piece in self.re.findall(text):
            ids.extend(self._bpe(spell(piece.encode("utf-8"))))
        return ids

    def encode(self, text, special=False):
        table = self.added if special else {s: i for s, i in self.added.items() if s not in self.special}
        if not table:
            return self._encode_text(text)
        ids, i, start = [], 0, 0
        keys = sorted(table, key=len, reverse=True)
        while i < len(text):
            hit = next((k for k in keys if text.startswith(k, i)), None)
            if hit:
                ids.extend(self._encode_text(text[start:i]))
                ids.append(table[hit])
                i += len(hit)
                start = i
            else:
                i += 1
        ids.extend(self._encode_text(text[start:]))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            s = self.id2tok[i]
            if s in self.added:
                out += s.encode()
            else:
                out += bytes(U2B[c] for c in s)
        return out.decode("utf-8", errors="replace")
