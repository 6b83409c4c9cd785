#!/usr/bin/env bash
# Plain vs speculative decoding with `g4 run`, alternated (plain, spec, plain, spec, ...) so that a
# drifting machine favours neither; checks that greedy output is identical and prints each run's
# decode tok/s and the speculative counters. Usage:
#   tools/spec_compare.sh [ROUNDS] -- G4_RUN_ARGS... -- SPEC_ARGS...
#   tools/spec_compare.sh 5 -- --prompt "$(cat p.txt)" -n 200 --threads 2 -- --spec ngram --draft-max 4
set -euo pipefail
G4=${G4:-build/g4}
rounds=${1:-5}; shift
[[ "${1:-}" == "--" ]] && shift
common=(); while [[ $# -gt 0 && "$1" != "--" ]]; do common+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
spec=("$@")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for mode in plain spec; do
    extra=(); [[ $mode == spec ]] && extra=("${spec[@]}")
    "$G4" run "${common[@]}" "${extra[@]}" --json >"$tmp/$mode.json" 2>"$tmp/$mode.err"
    tps=$(grep -o 'decode [0-9.]* tok/s' "$tmp/$mode.err" | awk '{print $2}')
    echo "round $r $mode: $tps tok/s $(grep -o '\[spec.*\]' "$tmp/$mode.err" || true)"
  done
  python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
a, b = (json.load(open(f"{d}/{m}.json"))["ids"] for m in ("plain", "spec"))
print("  greedy output identical" if a == b else f"  OUTPUT DIFFERS at token {next(i for i,(x,y) in enumerate(zip(a,b)) if x!=y)}")
PY
done
