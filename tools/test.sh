#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite
# twice: a Release build, then an AddressSanitizer + UndefinedBehaviorSanitizer build; then the
# scheduler and server tests under ThreadSanitizer, and every fuzz target for a bounded time.
# G4_SKIP_SANITIZERS=1 runs only the Release suite (quicker, for local iteration);
# G4_SKIP_TSAN=1 and G4_SKIP_FUZZ=1 skip those steps; G4_FUZZ_SECONDS sets the time per target.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/tools/setup.sh"
jobs="${G4_JOBS:-$(nproc)}"
# The sanitizer builds keep line tables only (-g1): reports still name file and line, and the
# builds take a quarter less time than with full debug information.
sanitizer_flags="-O2 -g1 -DNDEBUG"
# Each stage's heading says how long the run has taken so far (CI's time is bounded).
stage() { echo "== $1 ($((SECONDS / 60)) min $((SECONDS % 60)) s in) =="; }

stage "Release build and tests"
G4_BUILD_DIR="$root/build" bash "$root/tools/build.sh"
(cd "$root/build" && ctest --output-on-failure -j"$jobs" --timeout 1200)

if [ "${G4_SKIP_SANITIZERS:-0}" != 1 ]; then
  stage "AddressSanitizer + UBSan build and tests"
  G4_BUILD_DIR="$root/build-asan" G4_BUILD_TYPE=RelWithDebInfo bash "$root/tools/build.sh" -DG4_SANITIZE=ON -DG4_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$sanitizer_flags"
  (cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j"$jobs" --timeout 2400)
fi
if [ "${G4_SKIP_TSAN:-0}" != 1 ]; then
  # The threaded parts: the scheduler's engine thread, the thread pool, tensor parallelism's rank
  # threads (collectives, the forward pass and the scheduler over ranks, in one process), and
  # g4 serve end to end (HTTP threads + engine thread), with g4 itself built under TSan. Of the
  # server tests, those that put threads in each other's way: concurrent and cancelled streams,
  # disconnects, SIGTERM under load, speculative slots beside plain ones (the others send
  # requests down the same paths one at a time, and each takes minutes under TSan).
  stage "ThreadSanitizer build: scheduler, thread pool and server tests"
  cmake -S "$root" -B "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DG4_TSAN=ON \
    -DG4_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$sanitizer_flags" >/dev/null
  cmake --build "$root/build-tsan" --target g4 g4_tests -j"$jobs"
  (cd "$root/build-tsan" && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tools/sanitizers/tsan.supp" \
     ctest --output-on-failure -j"$jobs" --timeout 1200 \
       -R '^(SchedulerTest\.|ThreadPool\.|InProcessCommunicator\.|(Presets/)?TensorParallel(Serve)?(Failures)?\.|server_(curl|faults|openai_client|spec)$)')
fi

if [ "${G4_SKIP_FUZZ:-0}" != 1 ]; then
  # libFuzzer targets, G4_FUZZ_SECONDS each (15 here: the whole run stays well inside CI's
  # time on 2 cores; tools/fuzz.sh alone defaults to 60), two at a time.
  stage "fuzzing"
  G4_FUZZ_SECONDS="${G4_FUZZ_SECONDS:-15}" bash "$root/tools/fuzz.sh"
fi
stage "all tests passed"
