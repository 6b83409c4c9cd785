#!/usr/bin/env bash
# Writes the embedded default model to assets/models/default (skipped if it is already there).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
assets="${G4_ASSETS:-$root/assets}"
out="$assets/models/default"
if [ -f "$out/config.json" ] && [ -f "$out/model.safetensors" ]; then exit 0; fi
mkdir -p "$assets/models"
"$root/build/g4" synth --preset e2b --scale tiny --seed 1 --tokenizer "$assets/tokenizer/gemma4.json" --out "$out"
