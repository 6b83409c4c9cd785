#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cc) with clang + ASan + UBSan and runs each for a
# bounded time, starting from its committed seed corpus (fuzz/corpus/<target>/) plus whatever
# earlier local runs found (build-fuzz/corpus/<target>/). Fails on any crash, leak, timeout or
# out-of-memory; the input that did it is left in build-fuzz/artifacts/ and named in the output.
#
#   G4_FUZZ_SECONDS=60     time per target
#   G4_FUZZ_JOBS=2         targets run at once (each is single-threaded)
#   G4_FUZZ_TARGETS="a b"  a subset (names without _fuzz), default all
#   G4_FUZZ_BUILD_DIR      default build-fuzz/
#   G4_FUZZ_SKIP_BUILD=1   use the binaries already built
# Reproduce a crash: build-fuzz/fuzz/<target>_fuzz build-fuzz/artifacts/<target>_fuzz-crash-...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${G4_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${G4_FUZZ_SECONDS:-60}"
jobs="${G4_FUZZ_JOBS:-$(( $(nproc) < 2 ? 1 : 2 ))}"

if [ "${G4_FUZZ_SKIP_BUILD:-0}" != 1 ]; then
  command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (tools/setup.sh installs it)" >&2; exit 1; }
  echo "== building fuzzers (clang, ASan+UBSan, libFuzzer) in $build =="
  # Line tables only (-g1): crash reports name file and line; a quarter less build time.
  CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DG4_FUZZ=ON \
    -DG4_BUILD_TESTS=OFF -DG4_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
  cmake --build "$build" --target g4_fuzzers -j"${G4_JOBS:-$(nproc)}"
fi

targets=()
if [ -n "${G4_FUZZ_TARGETS:-}" ]; then
  for t in $G4_FUZZ_TARGETS; do targets+=("${t%_fuzz}_fuzz"); done
else
  for f in "$root"/fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
fi
mkdir -p "$build/logs" "$build/artifacts"

run_one() {
  local t="$1" bin="$build/fuzz/$1" work="$build/corpus/$1" seeds="$root/fuzz/corpus/$1"
  local dict="$root/fuzz/dicts/${1%_fuzz}.dict" log="$build/logs/$1.log"
  [ -x "$bin" ] || { echo "fuzz: $bin is not built" >&2; return 1; }
  mkdir -p "$work"
  local args=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=2560 -print_final_stats=1
              -artifact_prefix="$build/artifacts/$t-")
  [ -f "$dict" ] && args+=(-dict="$dict")
  # New inputs go to the first (scratch) corpus directory; the seeds are read only.
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="print_stacktrace=1" \
    "$bin" "${args[@]}" "$work" "$seeds" >"$log" 2>&1
}
export -f run_one
export build root seconds

echo "== fuzzing ${#targets[@]} targets, ${seconds}s each, $jobs at a time =="
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {} && echo "  ok   {}" || { echo "  FAIL {}"; exit 1; }' || status=1

printf '%-24s %10s %9s %8s %7s\n' target execs exec/s corpus cov
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" 2>/dev/null | awk '{print $2}' | tail -1 || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" 2>/dev/null | awk '{print $2}' | tail -1 || true)
  corpus=$(ls "$build/corpus/$t" 2>/dev/null | wc -l || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" 2>/dev/null | tail -1 | awk '{print $2}' || true)
  printf '%-24s %10s %9s %8s %7s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "${cov:-?}"
done
if [ "$status" != 0 ]; then
  for t in "${targets[@]}"; do
    log="$build/logs/$t.log"
    if grep -qE 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|==ERROR|Test unit written' "$log"; then
      echo "---- $t: $log (tail) ----"
      tail -40 "$log"
    fi
  done
  echo "fuzz: FAILED (crash inputs in $build/artifacts/)" >&2
  exit 1
fi
echo "== fuzzing clean =="
