#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite
# twice: a Release build, then an AddressSanitizer + UndefinedBehaviorSanitizer build.
# G4_SKIP_SANITIZERS=1 runs only the Release suite (quicker, for local iteration).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/tools/setup.sh"
jobs="${G4_JOBS:-$(nproc)}"

echo "== Release build and tests =="
G4_BUILD_DIR="$root/build" bash "$root/tools/build.sh"
(cd "$root/build" && ctest --output-on-failure -j"$jobs" --timeout 1200)

if [ "${G4_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== AddressSanitizer + UBSan build and tests =="
  G4_BUILD_DIR="$root/build-asan" G4_BUILD_TYPE=RelWithDebInfo bash "$root/tools/build.sh" -DG4_SANITIZE=ON -DG4_BUILD_BENCH=OFF
  (cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j"$jobs" --timeout 2400)
fi
echo "== all tests passed =="
