#!/usr/bin/env bash
# Writes the embedded default model to assets/models/default: a tiny Gemma-4 trained on the King
# James Bible (docs/default-model.md), expanded from the compact weights in models/default/.
# Deterministic and quick (about a second); the sha256 is checked against models/default/manifest.json.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
assets="${G4_ASSETS:-$root/assets}"
out="$assets/models/default"
manifest="$root/models/default/manifest.json"
if [ -f "$out/model.safetensors" ] && [ -f "$out/.expanded" ] && [ "$out/.expanded" -nt "$manifest" ]; then
  exit 0
fi
G4_ASSETS="$assets" node "$root/tools/default_model/expand.js" --out "$out"
touch "$out/.expanded"
