#!/usr/bin/python3
"""Loopback mock of the Hugging Face Hub for tests/test_download.c (Python 3 stdlib only).

Usage: mock_hub.py ROOT
  Writes the repository files it serves under ROOT/origin/ (so a test can compare bytes), appends
  one JSON line per request to ROOT/requests.log, listens on two ephemeral 127.0.0.1 ports and
  prints "READY <hub_port> <cdn_port>" on stdout. The hub port answers the model-info API and the
  resolve URLs; LFS files redirect (302) to the cdn port, a different origin, which serves bytes
  with Range support. It exits when stdin closes (the test keeps a pipe open).

Repository ids select behaviours:
  org/model     normal                      org/norange  the cdn ignores Range (always 200)
  org/drop      the cdn drops the connection halfway through the first GET of each LFS file
  org/dropall   the cdn always drops halfway (a download never completes)
  org/badhash   mtp.safetensors is served with one byte flipped (the listing has the real sha256)
  org/flaky     the API and each resolve answer 503 (Retry-After: 0) once, then work
  org/gated     403 with X-Error-Code: GatedRepo
  org/private   401 unless "Authorization: Bearer good-token"
  org/ghost     the listing names missing.json, whose resolve is 404 EntryNotFound
  org/badrange  the cdn answers 206 with a Content-Range starting at 0 whatever was asked
  org/manual    listed with gated "manual"; every resolve is 401 (no token) / 403 (token), GatedRepo
  org/expired   the cdn answers 403 (expired signature) to the first GET of each LFS file
  anything else 404 RepoNotFound
tokenizer.json always answers a relative 307 to itself (with ?moved=1) first.
Revisions: main, v1, refs/pr/1 and the commit itself resolve; others are 404 RevisionNotFound.
"""
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import urllib.parse

ROOT = sys.argv[1]
LOG = os.path.join(ROOT, "requests.log")
LOCK = threading.Lock()
COUNTS = {}


def gen(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    out = bytearray()
    block = seed
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


CONFIG = json.dumps({"architectures": ["InklingForCausalLM"], "model_type": "inkling"}).encode()
INDEX = json.dumps({"metadata": {"total_size": 1},
                    "weight_map": {"a": "model-00001-of-00002.safetensors",
                                   "b": "model-00002-of-00002.safetensors"}}).encode()
FILES = {
    ".gitattributes": (b"*.safetensors filter=lfs\n", False),
    "README.md": (b"# model card\n", False),
    "config.json": (CONFIG, False),
    "generation_config.json": (b'{"eos_token_id": 1}', False),
    "model.safetensors.index.json": (INDEX, False),
    "model-00001-of-00002.safetensors": (gen("shard1", 300000), True),
    "model-00002-of-00002.safetensors": (gen("shard2", 200000), True),
    "mtp.safetensors": (gen("mtp", 150000), True),
    "tokenizer.json": (b'{"model": {"type": "BPE"}}', False),
    "sub dir/extra.json": (b'{"x": 1}', False),
    "pytorch_model.bin": (b"not wanted", False),
}
REPOS = {"model", "drop", "dropall", "badhash", "flaky", "gated", "private", "ghost", "norange",
         "badrange", "expired", "manual"}


def commit_of(repo):
    return hashlib.sha1(repo.encode()).hexdigest()


def git_blob(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def log(entry):
    with LOCK:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def once(key):
    """True the first time key is seen."""
    with LOCK:
        n = COUNTS.get(key, 0)
        COUNTS[key] = n + 1
        return n == 0


class Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kind = "?"

    def log_message(self, *a):
        pass

    def send(self, status, body=b"", headers=None, ctype="application/json"):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, msg):
        headers = {"X-Error-Code": code, "X-Error-Message": msg} if code else {}
        self.send(status, json.dumps({"error": msg}).encode(), headers)

    def record(self):
        log({"port": self.kind, "method": self.command, "path": self.path,
             "auth": self.headers.get("Authorization"), "range": self.headers.get("Range")})

    def serve_bytes(self, data, mode, name):
        rng = self.headers.get("Range")
        start = 0
        if rng and mode != "norange":
            if not rng.startswith("bytes=") or not rng[6:].split("-")[0].isdigit():
                return self.send(400, b"bad range")
            start = int(rng[6:].split("-")[0])
            if start >= len(data):
                return self.send(416, b"", {"Content-Range": "bytes */%d" % len(data)})
        body = data[start:]
        status = 206 if start > 0 else 200
        headers = {"Accept-Ranges": "bytes"}
        if mode == "badrange" and start > 0:
            headers["Content-Range"] = "bytes 0-%d/%d" % (len(data) - 1, len(data))
            body = data
        elif status == 206:
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        drop = mode == "dropall" or (mode == "drop" and once(("drop", name)))
        if not drop:
            return self.send(status, body, headers, "application/octet-stream")
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Hub(Base):
    kind = "hub"

    def do_GET(self):
        self.record()
        u = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in u.path.split("/")[1:]]
        if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
            return self.api(parts[2], parts[3], parts[4:])
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(parts[0], parts[1], parts[3], "/".join(parts[4:]))
        self.error(404, None, "no route")

    def check_repo(self, owner, name):
        """Returns the mode, or None after answering an error."""
        if owner != "org" or name not in REPOS:
            self.error(404, "RepoNotFound", "Repository not found")
            return None
        if name == "gated":
            self.error(403, "GatedRepo", "Access to model org/gated is restricted")
            return None
        if name == "private" and self.headers.get("Authorization") != "Bearer good-token":
            self.error(401, None, "Invalid credentials in Authorization header")
            return None
        return name

    def api(self, owner, name, rest):
        mode = self.check_repo(owner, name)
        if mode is None:
            return
        if mode == "flaky" and once("api"):
            return self.send(503, b"busy", {"Retry-After": "0"})
        rev = "main"
        if rest:
            if rest[0] != "revision" or len(rest) != 2:
                return self.error(404, None, "no route")
            rev = rest[1]
        commit = commit_of(name)
        if rev not in ("main", "v1", "refs/pr/1", commit):
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        sib = []
        for path, (data, lfs) in sorted(FILES.items()):
            e = {"rfilename": path, "size": len(data), "blobId": git_blob(data)}
            if lfs:
                e["blobId"] = git_blob(b"pointer " + path.encode())
                e["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": 134}
            sib.append(e)
        if mode == "ghost":
            sib.append({"rfilename": "missing.json", "size": 5, "blobId": git_blob(b"ghost")})
        body = {"id": "org/" + name, "sha": commit, "siblings": sib,
                "gated": "manual" if mode == "manual" else False,
                "private": mode == "private"}
        self.send(200, json.dumps(body).encode())

    def resolve(self, owner, name, rev, path):
        mode = self.check_repo(owner, name)
        if mode is None:
            return
        if rev != commit_of(name):
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        if mode == "manual":
            status = 403 if self.headers.get("Authorization") else 401
            return self.error(status, "GatedRepo", "Access to model org/manual is restricted")
        if mode == "flaky" and once(("resolve", path)):
            return self.send(503, b"busy", {"Retry-After": "0"})
        if path not in FILES:
            return self.error(404, "EntryNotFound", "Entry not found: " + path)
        data, lfs = FILES[path]
        if path == "tokenizer.json" and "moved=1" not in self.path:
            # a relative same-origin redirect (as for renamed repos): the token must follow it
            loc = "/org/%s/resolve/%s/%s?moved=1" % (name, rev, urllib.parse.quote(path))
            return self.send(307, b"", {"Location": loc})
        if lfs:
            loc = "http://127.0.0.1:%d/blob/%s/%s?mode=%s&sig=x" % (
                CDN_PORT, hashlib.sha256(data).hexdigest(), urllib.parse.quote(path), mode)
            return self.send(302, b"", {"Location": loc, "X-Linked-Size": str(len(data)),
                                        "X-Repo-Commit": commit_of(name)})
        self.serve_bytes(data, mode if mode in ("norange",) else "model", path)


class Cdn(Base):
    kind = "cdn"

    def do_GET(self):
        self.record()
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        parts = u.path.split("/")
        path = urllib.parse.unquote("/".join(parts[3:]))
        mode = q.get("mode", ["model"])[0]
        if path not in FILES:
            return self.send(404, b"no such blob")
        data = FILES[path][0]
        if mode == "expired" and once(("expired", path)):
            return self.send(403, b"<Error>Request has expired</Error>", ctype="application/xml")
        if mode == "badhash" and path == "mtp.safetensors":
            data = data[:1000] + bytes([data[1000] ^ 1]) + data[1001:]
        self.serve_bytes(data, mode, path)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], OSError):  # a client hanging up early is expected
            super().handle_error(request, client_address)


def main():
    global CDN_PORT
    origin = os.path.join(ROOT, "origin")
    for path, (data, _) in FILES.items():
        p = os.path.join(origin, path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    hub = Server(("127.0.0.1", 0), Hub)
    cdn = Server(("127.0.0.1", 0), Cdn)
    CDN_PORT = cdn.server_address[1]
    for s in (hub, cdn):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("READY %d %d" % (hub.server_address[1], CDN_PORT), flush=True)
    sys.stdin.read()  # until the test closes the pipe
    hub.shutdown()
    cdn.shutdown()


CDN_PORT = 0
if __name__ == "__main__":
    main()
