#!/usr/bin/env bash
# g4 serve driven with curl: every route, /apply-template and the checkpoint's own chat template
# (a directory's and an artifact's), the SSE wire format, error bodies (malformed JSON, invalid UTF-8, oversized body, unknown route, context overflow), /metrics series, the loading
# phase, and SIGTERM draining (in-flight stream completes, exit code 0).
#   tests/server/curl_test.sh      (G4_BINARY_DIR, G4_SERVE_TEST_MODEL optional)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="${G4_SOURCE_DIR:-$here/../..}"
bin="${G4_BIN:-${G4_BINARY_DIR:-$src/build}/g4}"
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
[ -x "$bin" ] || { echo "SKIP: no g4 binary at $bin"; exit 77; }
tmp="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT

model="${G4_SERVE_TEST_MODEL:-}"
if [ -z "$model" ]; then
  model="$tmp/model"
  "$bin" synth --preset e2b --out "$model" >/dev/null || { echo "FAIL: g4 synth"; exit 1; }
fi

failed=0; passed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

# wait_for WHAT SECONDS COMMAND...: polls COMMAND until it succeeds; after SECONDS says what it
# waited for, and fails. For events a test needs before its next step (never a fixed sleep).
wait_for() {
  local what="$1" seconds="$2"; shift 2
  local deadline=$((SECONDS + seconds))
  while [ "$SECONDS" -lt "$deadline" ]; do "$@" && return 0; sleep 0.05; done
  "$@" && return 0
  echo "FAIL: timed out after ${seconds} s waiting for $what"
  return 1
}
# start NAME FLAGS...: starts a server, sets $url and $pid (log in $tmp/NAME.log).
start() {
  local name="$1"; shift
  "$bin" serve --model "$model" --port 0 --threads 1 "$@" 2>"$tmp/$name.log" &
  pid=$!; pids+=("$pid")
  wait_for "server $name to listen" 60 grep -q 'http://127.0.0.1:[0-9]*' "$tmp/$name.log" ||
    { echo "FAIL: server $name did not start"; cat "$tmp/$name.log"; exit 1; }
  url="$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/$name.log" | head -1)"
}
healthy() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health")" = 200 ]; }
wait_ready() { wait_for "$1/health to be 200" 120 healthy "$1"; }

# req METHOD PATH [BODY]: sets $code and $body.
req() {
  local out="$tmp/out"
  if [ $# -ge 3 ]; then
    code="$(curl -s -o "$out" -w '%{http_code}' -X "$1" "$url$2" -H 'Content-Type: application/json' --data-binary "$3")"
  else
    code="$(curl -s -o "$out" -w '%{http_code}' -X "$1" "$url$2")"
  fi
  body="$(cat "$out")"
}
has() { grep -q -- "$2" <<<"$1"; }
has_text() { grep -qF -- "$2" <<<"$1"; }
is_error() { [ "$code" = "$1" ] && has "$body" '"error":{' && has "$body" '"message":' && has "$body" '"type":' && has "$body" '"code":' && has "$body" '"param":'; }

# --- Loading phase: /health says loading, requests get 503 ---------------------------------
# The load is held for 5 s: time for two requests even on a slow (sanitizer) machine.
G4_SERVE_LOAD_DELAY_MS=5000 start loading --ctx 256
req GET /health
if [ "$code" = 503 ] && has "$body" '"status":"loading"'; then ok "health is 503 loading while the model loads"; else fail "health is 503 loading while the model loads"; fi
req POST /v1/completions '{"prompt":"x","max_tokens":1}'
if is_error 503; then ok "requests are 503 while loading"; else fail "requests are 503 while loading"; fi
wait_ready "$url"
req GET /health
if [ "$code" = 200 ] && has "$body" '"status":"ok"'; then ok "health is 200 ok once loaded"; else fail "health is 200 ok once loaded"; fi
kill -TERM "$pid"; wait "$pid"; rc=$?
if [ "$rc" = 0 ]; then ok "SIGTERM when idle exits 0"; else fail "SIGTERM when idle exits 0"; fi

# --- The main server -------------------------------------------------------------------------
start main --ctx 256 --parallel 4 --max-body 65536
wait_ready "$url" || { echo "FAIL: not ready"; cat "$tmp/main.log"; exit 1; }

req GET /v1/models
if [ "$code" = 200 ] && has "$body" '"object":"list"' && has "$body" '"max_model_len":256'; then ok "GET /v1/models"; else fail "GET /v1/models"; fi

req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":5,"temperature":0}'
if [ "$code" = 200 ] && has "$body" '"object":"chat.completion"' && has "$body" '"role":"assistant"' && has "$body" '"usage":{'; then ok "POST /v1/chat/completions"; else fail "POST /v1/chat/completions"; fi

req POST /v1/completions '{"prompt":"Hello","max_tokens":5,"temperature":0}'
if [ "$code" = 200 ] && has "$body" '"object":"text_completion"' && has "$body" '"completion_tokens":5'; then ok "POST /v1/completions"; else fail "POST /v1/completions"; fi

req POST /generate '{"prompt":"Hello","max_tokens":4}'
if [ "$code" = 200 ] && has "$body" '"response":' && has "$body" '"prompt_tokens":' && has "$body" '"gen_tokens":4' && has "$body" '"finish_reason":"length"'; then ok "POST /generate"; else fail "POST /generate"; fi

# /apply-template: the prompt a chat body renders to (no template shipped: the built-in format).
req POST /apply-template '{"messages":[{"role":"user","content":"Hello"}]}'
if [ "$code" = 200 ] && has_text "$body" '{"prompt":"<bos><|turn>user\nHello<turn|>\n<|turn>model\n'; then ok "POST /apply-template (built-in format)"; else fail "POST /apply-template (built-in format): $body"; fi
req POST /apply-template '{"messages":"no"}'
if is_error 400 && has "$body" '"param":"messages"'; then ok "POST /apply-template with a bad body -> 400"; else fail "POST /apply-template with a bad body -> 400: $body"; fi

req POST /tokenize '{"content":"Hello world","with_pieces":true}'
if [ "$code" = 200 ] && has "$body" '"piece":"Hello"'; then ok "POST /tokenize with pieces"; else fail "POST /tokenize with pieces"; fi
req POST /tokenize '{"content":"Hello world"}'
ids="$(sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/' <<<"$body")"
req POST /detokenize "{\"tokens\":[$ids]}"
if [ "$code" = 200 ] && has "$body" '"content":"Hello world"'; then ok "POST /detokenize round-trips"; else fail "POST /detokenize round-trips"; fi

# SSE wire format: role delta first, data lines, finish chunk, usage chunk, [DONE] last.
curl -sN "$url/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}' >"$tmp/sse"
first="$(grep -m1 '^data: ' "$tmp/sse")"
last="$(grep '^data: ' "$tmp/sse" | tail -1)"
if has "$first" '"delta":{"content":"","role":"assistant"}'; then ok "SSE: role delta first"; else fail "SSE: role delta first"; fi
if [ "$last" = "data: [DONE]" ]; then ok "SSE: [DONE] last"; else fail "SSE: [DONE] last"; fi
if [ "$(grep -c '"finish_reason":"length"' "$tmp/sse")" = 1 ]; then ok "SSE: one finish_reason"; else fail "SSE: one finish_reason"; fi
if grep -q '"choices":\[\],.*"usage":{"completion_tokens":6' "$tmp/sse"; then ok "SSE: usage chunk"; else fail "SSE: usage chunk"; fi
if [ -z "$(grep -v -e '^data: ' -e '^$' "$tmp/sse")" ]; then ok "SSE: only data lines and blank lines"; else fail "SSE: only data lines and blank lines"; fi

# A named tool_choice on the wire: the stream carries one tool_calls delta (index, id, the named
# function, arguments as a string) and finish_reason tool_calls. The forced call is decoded under
# its schema: get_time has no parameters, so its arguments are "{}" whatever the model prefers
# (<|tool_response>, id 50, a stop token, is biased and still cannot end the call early).
tools='"tools":[{"type":"function","function":{"name":"get_weather"}},{"type":"function","function":{"name":"get_time"}}]'
curl -sN "$url/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Time?"}],"max_tokens":12,"temperature":0,"stream":true,'"$tools"',"tool_choice":{"type":"function","function":{"name":"get_time"}},"logit_bias":{"50":100}}' >"$tmp/sse_tool"
if [ "$(grep -c '"tool_calls":\[{"function":{"arguments":"{}","name":"get_time"},"id":"call_0","index":0,"type":"function"}\]' "$tmp/sse_tool")" = 1 ] &&
   [ "$(grep -c '"finish_reason":"tool_calls"' "$tmp/sse_tool")" = 1 ] && [ "$(grep '^data: ' "$tmp/sse_tool" | tail -1)" = "data: [DONE]" ]; then
  ok "SSE: named tool_choice gives one tool_calls delta and finish_reason tool_calls"
else
  fail "SSE: named tool_choice gives one tool_calls delta and finish_reason tool_calls"; cat "$tmp/sse_tool"
fi
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Time?"}],"max_tokens":12,"temperature":0,'"$tools"',"tool_choice":"required"}'
if [ "$code" = 200 ] && has "$body" '"tool_calls":\[{"function":{"arguments":"{' && grep -qE '"name":"get_(time|weather)"},"id":"call_0"' <<<"$body"; then ok "tool_choice required -> a call to one of the tools"; else fail "tool_choice required -> a call to one of the tools: $body"; fi
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Time?"}],'"$tools"',"tool_choice":{"type":"function","function":{"name":"nope"}}}'
if is_error 400 && has "$body" '"param":"tool_choice"'; then ok "tool_choice naming an unknown function -> 400"; else fail "tool_choice naming an unknown function -> 400"; fi

# Errors: always a JSON error object, never a crash.
req POST /v1/chat/completions '{"messages": [1, 2'
if is_error 400; then ok "malformed JSON -> 400"; else fail "malformed JSON -> 400"; fi
req POST /v1/chat/completions "$(printf '{"messages":[{"role":"user","content":"\xc3\x28"}]}')"
if is_error 400; then ok "invalid UTF-8 -> 400"; else fail "invalid UTF-8 -> 400"; fi
req POST /v1/chat/completions '{"messages":[{"role":"user","content":5}]}'
if is_error 400; then ok "wrong type -> 400"; else fail "wrong type -> 400"; fi
req POST /v1/completions '{"prompt":"x","max_tokens":-3}'
if is_error 400 && has "$body" '"param":"max_tokens"'; then ok "negative max_tokens -> 400"; else fail "negative max_tokens -> 400"; fi
req POST /v1/completions '{"prompt":"x","top_p":77}'
if is_error 400; then ok "absurd top_p -> 400"; else fail "absurd top_p -> 400"; fi
req POST /v1/completions '{"prompt":"x","n":3}'
if is_error 400 && has "$body" '"param":"n"'; then ok "n > 1 -> 400"; else fail "n > 1 -> 400"; fi
req POST /v1/completions "{\"prompt\":\"$(printf 'word %.0s' $(seq 400))\"}"
if is_error 400 && has "$body" 'the prompt has 40[0-9] tokens but the context is 256 tokens'; then ok "prompt longer than the context -> 400 with both numbers"; else fail "prompt longer than the context -> 400 with both numbers"; fi
big="$(head -c 70000 /dev/zero | tr '\0' 'a')"
req POST /v1/completions "{\"prompt\":\"$big\"}"
if is_error 413; then ok "oversized body -> 413"; else fail "oversized body -> 413"; fi
req GET /v1/nothing
if is_error 404; then ok "unknown route -> 404"; else fail "unknown route -> 404"; fi
req POST /v1/models '{}'
if [ "${code:0:1}" = 4 ] && has "$body" '"error":{'; then ok "wrong method -> 4xx JSON"; else fail "wrong method -> 4xx JSON"; fi
req POST /v1/completions '{"prompt":"x","max_tokens":100000,"temperature":0,"ignore_eos":true}'
if [ "$code" = 200 ] && has "$body" '"finish_reason":"length"' && has "$body" '"total_tokens":256'; then ok "max_tokens capped: finish_reason length, prompt + completion = ctx"; else fail "max_tokens capped: finish_reason length, prompt + completion = ctx"; fi
if [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ]; then ok "still healthy after bad input"; else fail "still healthy after bad input"; fi

req GET /metrics
for series in 'g4_requests_total{route="/v1/chat/completions",status="200"}' 'g4_errors_total{kind="invalid_request"}' \
    g4_prompt_tokens_total g4_completion_tokens_total g4_time_to_first_token_seconds_bucket \
    g4_time_per_output_token_seconds_bucket g4_queue_depth g4_requests_in_flight g4_kv_cache_usage_ratio \
    g4_kv_cache_bytes process_resident_memory_bytes 'g4_errors_total{kind="payload_too_large"}'; do
  if has "$body" "$series"; then ok "metrics: $series"; else fail "metrics: $series"; fi
done
if grep -qE 'cmpl-[0-9a-f-]+ /v1/completions prompt=[0-9]+ cached=[0-9]+ completion=5 .*ttft=[0-9.]+s decode=[0-9.]+ tok/s finish=length' "$tmp/main.log"; then ok "log: one line per request with id, tokens, TTFT, tok/s"; else fail "log: one line per request with id, tokens, TTFT, tok/s"; fi

kill -TERM "$pid"; wait "$pid"

# SIGTERM while a stream runs: the stream finishes, new requests are refused, exit code 0.
# SIGTERM goes only once the stream's first data line arrived, i.e. the server accepted it:
# sent earlier (a slow machine, a sanitizer build), the request could arrive after the drain
# began and rightly get 503. Generous bound; failing it says so. The stream is long (2000
# tokens, seconds even in a Release build) so that it is still running when the refused
# request comes: a 120-token stream on the main server (ctx 256) once ended first on a loaded
# machine, and the server, drained, had exited before that request. The grace period is long
# too: under ASan on a loaded 2-core machine the 2000 tokens once outlasted the default 30 s,
# and the server rightly cancelled the stream (the grace period's own test is server_faults').
start drain --ctx 4096 --grace 600
wait_ready "$url" || { fail "drain server ready"; cat "$tmp/drain.log"; }
curl -sN "$url/v1/completions" -d '{"prompt":"x","max_tokens":2000,"temperature":0,"ignore_eos":true,"stream":true}' >"$tmp/drain" &
cpid=$!
wait_for "the drain test's stream to start" 60 grep -q '^data: ' "$tmp/drain" || { cat "$tmp/drain"; exit 1; }
kill -TERM "$pid"
# /health turns "draining" as soon as the signal thread has it; no fixed pause to race with.
draining_health() { req GET /health; [ "$code" = 503 ] && has "$body" '"status":"draining"'; }
if wait_for "/health to say draining" 30 draining_health; then ok "draining: /health 503 draining"; else fail "draining: /health 503 draining"; fi
req POST /v1/completions '{"prompt":"x","max_tokens":1}'
if is_error 503; then ok "draining: new requests 503"; else fail "draining: new requests 503"; fi
wait "$cpid"
if [ "$(grep '^data: ' "$tmp/drain" | tail -1)" = "data: [DONE]" ] && grep -q '"finish_reason":"length"' "$tmp/drain"; then ok "draining: the in-flight stream completed"; else fail "draining: the in-flight stream completed"; tail -3 "$tmp/drain"; cat "$tmp/drain.log"; fi
wait "$pid"; rc=$?
if [ "$rc" = 0 ]; then ok "draining: exit code 0"; else fail "draining: exit code 0"; fi

# The checkpoint's own chat template is what renders: a copy of the model with a template that
# differs visibly from Gemma's and refuses system messages.
custom="$tmp/custom"; mkdir -p "$custom"
for f in "$model"/*; do ln -s "$f" "$custom/"; done
printf '%s' '{{ bos_token }}CUSTOM{% for m in messages %}[{{ m.role }}={{ m.content }}]{% endfor %}{% if add_generation_prompt %}<|turn>model{{ "\n" }}{% endif %}{% if messages[0].role == "system" %}{{ raise_exception("no system messages here") }}{% endif %}' >"$custom/chat_template.jinja"
model="$custom"
start custom --ctx 128
wait_ready "$url" || { fail "custom-template server ready"; cat "$tmp/custom.log"; }
req POST /apply-template '{"messages":[{"role":"user","content":"Hi"}]}'
if [ "$code" = 200 ] && [ "$body" = '{"prompt":"<bos>CUSTOM[user=Hi]<|turn>model\n"}' ]; then ok "the checkpoint's chat_template.jinja renders the prompt"; else fail "the checkpoint's chat_template.jinja renders the prompt: $body"; fi
req POST /tokenize '{"content":"<bos>CUSTOM[user=Hi]<|turn>model\n"}'
want_tokens="$(grep -o '[0-9]\+' <<<"$(sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/' <<<"$body")" | wc -l)"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"temperature":0,"ignore_eos":true}'
if [ "$code" = 200 ] && has "$body" "\"prompt_tokens\":$want_tokens,"; then ok "chat completions use it too (prompt_tokens $want_tokens)"; else fail "chat completions use it too (want prompt_tokens $want_tokens): $body"; fi
req POST /v1/chat/completions '{"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}]}'
if is_error 400 && has "$body" 'no system messages here'; then ok "raise_exception in the template -> 400 with its message"; else fail "raise_exception in the template -> 400 with its message: $body"; fi
grep -q 'chat template: chat_template.jinja (unknown/custom)' "$tmp/custom.log" && ok "the log names the template" || fail "the log names the template"
kill -TERM "$pid"; wait "$pid"

# A `g4 pack` artifact serves like the directory it came from (tokenizer, config and chat
# template inside it).
"$bin" pack --model "$model" --quant q8 --threads 1 --out "$tmp/model.g4" >/dev/null 2>&1 || fail "g4 pack"
model="$tmp/model.g4"
start artifact --ctx 128
wait_ready "$url" || { fail "artifact server ready"; cat "$tmp/artifact.log"; }
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3,"temperature":0,"ignore_eos":true}'
if [ "$code" = 200 ] && has "$body" '"completion_tokens":3' && has "$body" '"model":"model.g4"'; then ok "serves a packed artifact"; else fail "serves a packed artifact: $body"; fi
req POST /apply-template '{"messages":[{"role":"user","content":"Hi"}]}'
if [ "$body" = '{"prompt":"<bos>CUSTOM[user=Hi]<|turn>model\n"}' ]; then ok "the artifact renders with the template it was packed with"; else fail "the artifact renders with the template it was packed with: $body"; fi
kill -TERM "$pid"; wait "$pid"

echo "curl tests: $passed/$((passed + failed)) passed"
[ "$failed" = 0 ]
