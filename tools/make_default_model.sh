#!/usr/bin/env bash
# Writes the embedded default model to assets/models/default: a tiny Gemma-4 trained on the King
# James Bible (docs/default-model.md), expanded from the compact weights in models/default/, and
# its trained assistant (MTP) drafter to assets/models/default-assistant (models/default-assistant/).
# Deterministic and quick (about a second each); the sha256s are checked against the manifests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
assets="${G4_ASSETS:-$root/assets}"
out="$assets/models/default"
manifest="$root/models/default/manifest.json"
if ! { [ -f "$out/model.safetensors" ] && [ -f "$out/.expanded" ] && [ "$out/.expanded" -nt "$manifest" ]; }; then
  G4_ASSETS="$assets" node "$root/tools/default_model/expand.js" --out "$out"
  touch "$out/.expanded"
fi
out="$assets/models/default-assistant"
manifest="$root/models/default-assistant/manifest.json"
if ! { [ -f "$out/model.safetensors" ] && [ -f "$out/.expanded" ] && [ "$out/.expanded" -nt "$manifest" ]; }; then
  node "$root/tools/default_model/expand_assistant.js" --out "$out"
  touch "$out/.expanded"
fi
