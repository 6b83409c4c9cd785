#!/usr/bin/env bash
# Held-out KJV text for `g4 perplexity` (books the default model was not trained on: it saw
# Genesis, Psalms and John, tools/default_model/corpus.py). One verse per line, the reference
# stripped, as in training. Needs Debian's bible-kjv (`apt-get install -y bible-kjv`).
#   bash tools/perplexity/heldout_text.sh "Pr1:1-31:31" > /tmp/proverbs.txt
#   bash tools/perplexity/heldout_text.sh "Mt1:1-28:20" > /tmp/matthew.txt
set -euo pipefail
range=${1:?usage: heldout_text.sh BIBLE_RANGE (e.g. Pr1:1-31:31)}
command -v bible >/dev/null || { echo "heldout_text.sh: the bible command is missing (apt-get install -y bible-kjv)" >&2; exit 1; }
COLUMNS=100000 bible -f "$range" | sed -E 's/^[^ ]+ //'
