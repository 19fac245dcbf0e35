#!/usr/bin/env bash
# Runs every test binary in BUILD/tests (or those INKLING_TESTS names) and prints one summary line the CI reads (INKLING_TEST_RUNNER,
# e.g. qemu-aarch64-static, prefixes each binary: `make cross-aarch64`):
#   "N passed, M failed, K skipped"
# A skipped test is reported as skipped, never as passed. A binary that crashes or exits non-zero
# without reporting a failure counts as one failure. Run from the repository root.
# INKLING_TEST_JOBS=N (default 1) runs N binaries at a time (the emulated suite in CI: qemu is
# CPU-bound and single-threaded per process); binaries that measure the machine's load
# (SERIAL_TESTS) still run alone, after the others; each result line is printed when its binary ends.
# INKLING_TEST_TIMEOUT=S (default 900; 0 = none) kills a binary that runs longer than S seconds and
# counts it as a failure, so a hung test ends the run with its name instead of stalling CI.
set -u
build=${1:-build/release}
export INKLING_BIN="${INKLING_BIN:-$build/inkling}"
jobs=${INKLING_TEST_JOBS:-1}
limit=${INKLING_TEST_TIMEOUT:-900}
SERIAL_TESTS=" test_pool "
pass=0; fail=0; skip=0; failed_names=()
outdir=$(mktemp -d "${TMPDIR:-/tmp}/inkling-run.XXXXXX")
trap 'rm -rf "$outdir"' EXIT

# one binary: its output in $outdir/NAME.out, its exit status in $outdir/NAME.rc
run_one() {
  local t=$1 name
  name=$(basename "$t")
  local t0=$SECONDS rc
  if [ "$limit" -gt 0 ]; then
    timeout -k 10 "$limit" ${INKLING_TEST_RUNNER:-} "$t" >"$outdir/$name.out" 2>&1; rc=$?
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "run.sh: $name killed after ${limit} s (INKLING_TEST_TIMEOUT)" >>"$outdir/$name.out"
  else
    ${INKLING_TEST_RUNNER:-} "$t" >"$outdir/$name.out" 2>&1; rc=$?
  fi
  echo $rc >"$outdir/$name.rc"
  echo $((SECONDS - t0)) >"$outdir/$name.s"
}

names=(); parallel=(); serial=()
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.o|*.d) continue;; esac
  name=$(basename "$t")
  # INKLING_TESTS="test_a test_b": only those binaries (a quick subset, e.g. under qemu in CI)
  if [ -n "${INKLING_TESTS:-}" ] && [[ " $INKLING_TESTS " != *" $name "* ]]; then continue; fi
  names+=("$name")
  if [ "$jobs" -gt 1 ] && [[ "$SERIAL_TESTS" != *" $name "* ]]; then parallel+=("$t"); else serial+=("$t"); fi
done

# prints one binary's result line (and the tail of a failing one) and adds up its counts
report() {
  local name=$1 out rc secs p f s
  out=$(cat "$outdir/$name.out"); rc=$(cat "$outdir/$name.rc" 2>/dev/null || echo 127)
  secs=$(cat "$outdir/$name.s" 2>/dev/null || echo "?")
  p=$(grep -c '^\[       OK \]' <<<"$out")
  f=$(grep '^\[  FAILED  \]' <<<"$out" | grep -v 'test(s)' | sort -u | wc -l)
  s=$(grep '^\[  SKIPPED \]' <<<"$out" | grep -v 'test(s)' | sort -u | wc -l)
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  if [ "$f" -ne 0 ]; then
    failed_names+=("$name"); echo "---- $name (exit $rc, ${secs} s) ----"; echo "$out" | tail -n 60
  else
    echo "$name: $p passed, $s skipped (${secs} s)"
  fi
}

# parallel binaries: start up to $jobs, report each one as soon as it ends (a file NAME.done marks it)
declare -A reported=()
report_done() {
  local f n
  for f in "$outdir"/*.done; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .done)
    [ -n "${reported[$n]:-}" ] && continue
    reported[$n]=1; report "$n"
  done
}
running=0
for t in "${parallel[@]+"${parallel[@]}"}"; do
  ( run_one "$t"; touch "$outdir/$(basename "$t").done" ) &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); report_done; fi
done
while [ "$running" -gt 0 ]; do wait -n; running=$((running - 1)); report_done; done
wait; report_done
for t in "${serial[@]+"${serial[@]}"}"; do run_one "$t"; report "$(basename "$t")"; done

[ ${#failed_names[@]} -gt 0 ] && echo "failing binaries: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
