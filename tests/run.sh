#!/usr/bin/env bash
# Runs every test binary in BUILD/tests (or those INKLING_TESTS names) and prints one summary line the CI reads (INKLING_TEST_RUNNER,
# e.g. qemu-aarch64-static, prefixes each binary: `make cross-aarch64`):
#   "N passed, M failed, K skipped"
# A skipped test is reported as skipped, never as passed. A binary that crashes or exits non-zero
# without reporting a failure counts as one failure. Run from the repository root.
set -u
build=${1:-build/release}
export INKLING_BIN="${INKLING_BIN:-$build/inkling}"
pass=0; fail=0; skip=0; failed_names=()
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.o|*.d) continue;; esac
  name=$(basename "$t")
  # INKLING_TESTS="test_a test_b": only those binaries (a quick subset, e.g. under qemu in CI)
  if [ -n "${INKLING_TESTS:-}" ] && [[ " $INKLING_TESTS " != *" $name "* ]]; then continue; fi
  out=$(${INKLING_TEST_RUNNER:-} "$t" 2>&1); rc=$?
  p=$(grep -c '^\[       OK \]' <<<"$out")
  f=$(grep '^\[  FAILED  \]' <<<"$out" | grep -vc 'test(s)')
  s=$(grep '^\[  SKIPPED \]' <<<"$out" | grep -vc 'test(s)')
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  if [ "$f" -ne 0 ]; then
    failed_names+=("$name"); echo "---- $name (exit $rc) ----"; echo "$out" | tail -n 60
  else
    echo "$name: $p passed${s:+, $s skipped}"
  fi
done
[ ${#failed_names[@]} -gt 0 ] && echo "failing binaries: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
