#!/usr/bin/env bash
# Memory-clean runs of the CLI under valgrind (issue 9): `inkling generate` (plain, MTP in both
# modes, capture-commit, sampling), `inkling download` against the loopback mock Hub
# (tests/support/mock_hub.py: a normal repo, a resumed one, one that fails verification) and a
# server session (completions on token ids, streaming, a client that disconnects, bad requests). A run fails on any memory error or definite / indirect leak
# (still-reachable blocks of libcurl / OpenSSL globals are not errors). Usage: tests/memcheck.sh
# [BIN] (default build/release/inkling). Prints one line per run and a summary; exits non-zero on
# failure. Run from the repository root.
set -u
bin=${1:-build/release/inkling}
moe=tests/data/golden/tiny-moe
vg=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
    --show-leak-kinds=definite,indirect --track-origins=yes --num-callers=30)
command -v valgrind >/dev/null || { echo "memcheck: valgrind is not installed"; exit 1; }
[ -x "$bin" ] || { echo "memcheck: $bin not built"; exit 1; }
tmp=$(mktemp -d /tmp/inkmem.XXXXXX)
pass=0; fail=0
cleanup() { [ -n "${hubfd:-}" ] && exec 9>&-; [ -n "${hubpid:-}" ] && kill "$hubpid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# run NAME EXPECTED_RC CMD...: valgrind's 99 is always a failure; otherwise the exit code must match.
run() {
  local name=$1 want=$2; shift 2
  "${vg[@]}" --log-file="$tmp/$name.vg" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  if [ "$rc" -eq 99 ] || [ -s "$tmp/$name.vg" ] || { [ "$want" != any ] && [ "$rc" -ne "$want" ]; }; then
    fail=$((fail + 1)); echo "memcheck $name: FAILED (exit $rc)"
    tail -n 40 "$tmp/$name.vg" "$tmp/$name.err"
  else
    pass=$((pass + 1)); echo "memcheck $name: clean"
  fi
}

ids=$(seq -s, 1 24)
run generate-plain 0 "$bin" generate -m "$moe" --prompt-ids "$ids" -n 24 --temp 0 --ids --threads 2
run generate-mtp-p 0 "$bin" generate -m "$moe" --prompt-ids "$ids" -n 24 --temp 0 --ids --threads 2 \
    --draft-kind mtp --draft-model "$moe/drafter-fit" --mtp-mode per-depth --stats-json "$tmp/stats.json"
run generate-mtp-compat-cc 0 "$bin" generate -m "$moe" --prompt-ids "$ids" -n 24 --temp 0.8 --seed 3 --ids \
    --threads 1 --draft-kind mtp --draft-model "$moe" --mtp-mode compat --capture-commit --trace "$tmp/trace.jsonl"
run generate-bad-model 1 "$bin" generate -m "$tmp/nonexistent" --prompt-ids 1,2 -n 2

# download from the mock hub (it exits when its stdin closes)
mkfifo "$tmp/hubin"
python3 tests/support/mock_hub.py "$tmp/hub" <"$tmp/hubin" >"$tmp/hub.ready" 2>"$tmp/hub.err" &
hubpid=$!
exec 9>"$tmp/hubin"; hubfd=1
for _ in $(seq 100); do grep -q READY "$tmp/hub.ready" 2>/dev/null && break; sleep 0.1; done
port=$(awk '/READY/ {print $2}' "$tmp/hub.ready")
if [ -z "$port" ]; then
  fail=$((fail + 1)); echo "memcheck download: mock hub did not start"; cat "$tmp/hub.err"
else
  export HF_ENDPOINT="http://127.0.0.1:$port" INKLING_CACHE_DIR="$tmp/cache"
  unset HF_TOKEN
  run download 0 "$bin" download org/model --quiet
  run download-resume 0 "$bin" download org/drop --quiet
  run download-badhash any "$bin" download org/badhash --quiet
  run download-gated any "$bin" download org/gated --quiet
fi

# a server session: the server runs under valgrind while curl sends requests (plain and
# speculative completions on token ids, streaming, a client that goes away, errors), then SIGTERM
if "$bin" serve --help >/dev/null 2>&1 && command -v curl >/dev/null; then
  "${vg[@]}" --log-file="$tmp/serve.vg" "$bin" serve -m "$moe" --port 0 --threads 2 --draft-kind mtp \
      --draft-model "$moe/drafter-fit" --spec-default off >"$tmp/serve.out" 2>"$tmp/serve.err" &
  srvpid=$!
  url=""
  for _ in $(seq 600); do
    url=$(grep -o 'http://[^ ]*' "$tmp/serve.err" 2>/dev/null | head -n1)
    [ -n "$url" ] && curl -s -o /dev/null -w '%{http_code}' "$url/health" 2>/dev/null | grep -q 200 && break
    sleep 0.2
  done
  ok=1
  c() { curl -s -m 120 -o "$tmp/resp" -w '%{http_code}' "$@"; }
  req() { local want=$1; shift; local got; got=$(c "$@"); [ "$got" = "$want" ] || { ok=0; echo "  $* -> $got (want $want)"; }; }
  if [ -z "$url" ]; then ok=0; echo "  the server did not become ready"; else
    j='Content-Type: application/json'
    req 200 -H "$j" -d '{"prompt":[1,2,3,4,5,6,7,8],"max_tokens":12,"temperature":0}' "$url/v1/completions"
    req 200 -H "$j" -d '{"prompt":[1,2,3,4,5,6,7,8],"max_tokens":12,"temperature":0.7,"seed":4,"speculative":{"enabled":true,"block_size":3}}' "$url/v1/completions"
    req 200 -H "$j" -d '{"prompt":[9,8,7],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}' "$url/v1/completions"
    req 400 -H "$j" -d '{"prompt":[1,2,' "$url/v1/completions"
    req 400 -H "$j" -d '{"prompt":[999999]}' "$url/v1/completions"
    req 200 "$url/v1/models"
    req 200 "$url/metrics"
    curl -s -m 1 -H "$j" -d '{"prompt":[1,2],"max_tokens":200,"stream":true}' "$url/v1/completions" >/dev/null 2>&1
    req 200 -H "$j" -d '{"prompt":[4,4,4],"max_tokens":4}' "$url/v1/completions"
  fi
  kill -TERM "$srvpid" 2>/dev/null; wait "$srvpid"; rc=$?
  if [ "$ok" = 1 ] && [ "$rc" -ne 99 ] && [ ! -s "$tmp/serve.vg" ]; then
    pass=$((pass + 1)); echo "memcheck serve: clean"
  else
    fail=$((fail + 1)); echo "memcheck serve: FAILED (exit $rc)"; tail -n 40 "$tmp/serve.vg" "$tmp/serve.err"
  fi
else
  echo "memcheck serve: skipped (no server in this build)"
fi

echo "memcheck: $pass clean, $fail failed"
[ "$fail" -eq 0 ]
