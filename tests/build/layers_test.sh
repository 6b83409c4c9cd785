#!/usr/bin/env bash
# The layers are enforced by the build (CMakeLists.txt, g4_layer): every layer compiles against a
# view of src/ holding only itself and the layers below it. This checks the views themselves: for
# every layer, a header of each folder it may NOT use fails to preprocess ("No such file or
# directory"), and a header of each folder it may use preprocesses.
# usage: layers_test.sh CXX LAYER_VIEWS_DIR SRC_DIR
set -uo pipefail
cxx="$1" views="$2" src="$3"
failures=0 checks=0
for view in "$views"/*/; do
  layer="$(basename "$view")"
  for folder_dir in "$src"/*/; do
    folder="$(basename "$folder_dir")"
    header="$(cd "$folder_dir" && ls *.h 2>/dev/null | head -1)"
    [ -n "$header" ] || continue
    out="$(printf '#include "%s/%s"\n' "$folder" "$header" |
           "$cxx" -std=c++20 -E -x c++ -I "$view" -o /dev/null - 2>&1)"
    rc=$?
    checks=$((checks + 1))
    if [ -e "$view/$folder" ]; then
      if [ $rc -ne 0 ]; then
        echo "FAIL: layer $layer may use $folder, but $folder/$header does not preprocess:"
        echo "$out" | head -5
        failures=$((failures + 1))
      fi
    elif [ $rc -eq 0 ] || ! grep -q "No such file or directory" <<<"$out"; then
      echo "FAIL: layer $layer must not see $folder, but including $folder/$header gave rc=$rc:"
      echo "$out" | head -5
      failures=$((failures + 1))
    fi
  done
done
# The stack itself: no layer may see cli/ (the front end is on top), and base sees only itself.
for view in "$views"/*/; do
  [ -e "$view/cli" ] && { echo "FAIL: $(basename "$view") sees cli/"; failures=$((failures + 1)); }
done
[ "$(ls "$views/base")" = base ] || { echo "FAIL: base sees $(ls "$views/base" | tr '\n' ' ')"; failures=$((failures + 1)); }
echo "layers_test: $checks include checks over $(ls "$views" | wc -l) layers, $failures failures"
[ $checks -gt 50 ] && [ $failures -eq 0 ]
