#!/usr/bin/env bash
# The README's first command: install dependencies, build g4, make the embedded default model,
# and run it on a prompt.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/tools/setup.sh"
bash "$root/tools/build.sh"
echo
echo "== g4 run on the default model (assets/models/default) =="
"$root/build/g4" run --prompt "${1:-In the beginning God}" -n "${2:-10}"
