#!/usr/bin/env bash
# Configures and builds g4 into build/ (or $G4_BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${G4_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${G4_BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$build" -j"${G4_JOBS:-$(nproc)}"
