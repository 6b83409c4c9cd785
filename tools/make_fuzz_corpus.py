#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora under fuzz/corpus/<target>/ (a few small files each).

Usage: python3 tools/make_fuzz_corpus.py [ASSETS_DIR]   (default: assets/)
The seeds are committed; rerun this only to change them. The config seed and the small tokenizer
slice are taken from assets/models/default and assets/tokenizer/gemma4.json when present.
"""
import json
import os
import struct
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
assets = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "assets")
corpus = os.path.join(root, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    header, blobs, off = {}, b"", 0
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs += blob
        off += len(blob)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blobs


# safetensors header
put("safetensors_fuzz", "f32", safetensors([("w", "F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0))]))
put("safetensors_fuzz", "mixed", safetensors(
    [("a.weight", "BF16", [3], b"\x80\x3f\x00\x40\x40\x40"), ("b", "I64", [1], struct.pack("<q", -7)),
     ("empty", "F16", [0, 4], b""), ("flag", "BOOL", [], b"\x01")], {"format": "pt"}))
put("safetensors_fuzz", "empty_header", struct.pack("<Q", 2) + b"{}")

# index.json (the fuzzer provides shards a.safetensors {x, y} and b.safetensors {z})
put("safetensors_index_fuzz", "two_shards",
    json.dumps({"metadata": {"total_size": 24}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors",
                                                               "z": "b.safetensors"}}))
put("safetensors_index_fuzz", "bad_shard", json.dumps({"weight_map": {"x": "subdir", "q": "junk.bin"}}))

# config.json [+ "\n---\n" + generation_config.json]
model = os.path.join(assets, "models", "default")
try:
    cfg = json.load(open(os.path.join(model, "config.json")))
    gen = open(os.path.join(model, "generation_config.json")).read()
    for k in ("audio_config", "vision_config"):
        cfg.pop(k, None)
    put("config_fuzz", "e2b_tiny", json.dumps(cfg, separators=(",", ":")) + "\n---\n" + gen)
    text = dict(cfg["text_config"])
    text.pop("layer_types")
    text["model_type"] = "gemma4_text"
    put("config_fuzz", "text_only_default_layers", json.dumps(text, separators=(",", ":")))
    plc = dict(text)
    plc.pop("global_head_dim")
    plc["per_layer_config"] = {"4": {"head_dim": 32, "num_key_value_heads": 1},
                               "9": {"head_dim": 32, "num_key_value_heads": 1}}
    put("config_fuzz", "per_layer_config", json.dumps(plc, separators=(",", ":")))
except OSError as e:
    print("skipping config seeds:", e)

# tokenizer.json: a slice of the Gemma-4 test tokenizer (specials, byte tokens, a few hundred
# pieces and the merges among them), small but with every section the loader reads.
try:
    tok = json.load(open(os.path.join(assets, "tokenizer", "gemma4.json")))
    keep = {}
    for piece, i in tok["model"]["vocab"].items():
        if i < 500 or piece in ("▁", "h", "e", "l", "o", "▁w", "r", "d", "he", "ll", "llo", "hello"):
            keep[piece] = i
    merges = []
    for m in tok["model"]["merges"]:
        left, right = m if isinstance(m, list) else m.split(" ", 1)
        if left in keep and right in keep and left + right in keep:
            merges.append(m)
    tok["model"]["vocab"] = keep
    tok["model"]["merges"] = merges[:100]
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < 110]
    put("tokenizer_load_fuzz", "gemma4_slice", json.dumps(tok, ensure_ascii=False, separators=(",", ":")))
except OSError as e:
    print("skipping tokenizer slice:", e)
vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "▁": 4}
for b in range(256):
    vocab["<0x%02X>" % b] = 10 + b
put("tokenizer_load_fuzz", "tiny_bpe", json.dumps({
    "version": "1.0",
    "added_tokens": [{"id": 300, "content": "<s>", "special": True, "normalized": False, "lstrip": False,
                      "rstrip": False, "single_word": False}],
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                      "invert": False},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True, "vocab": vocab,
              "merges": [["a", "b"]]}}, ensure_ascii=False))

# tokenizer encode (mode byte even + text) / decode (mode byte odd + int32 ids)
put("tokenizer_encode_fuzz", "text", b"\x00Hello world, how are you?  Tabs\tand\nnewlines.")
put("tokenizer_encode_fuzz", "chat", b"\x02<bos><|turn>user\nWrite a haiku<turn|>\n<|turn>model\n")
put("tokenizer_encode_fuzz", "unicode", "\x00日本語のテキスト 🦀 émoji ▁ and bytes".encode() + b"\xff\xc3")
put("tokenizer_encode_fuzz", "ids", b"\x01" + struct.pack("<10i", 2, 105, 2364, 107, 9259, 106, 238, 239, 500, -5))

# chat renderer: knob byte + {"messages", "tools"}
messages = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {"role": "assistant", "content": None, "reasoning_content": "Use the tool.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5, \"sky\": [\"clear\"]}"},
    {"role": "assistant", "content": "21.5 C and clear."},
    {"role": "user", "content": "Thanks"},
]
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "enum": [1, 2, 3]},
        "units": {"type": ["string", "null"]},
        "opts": {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "number"}}}}},
        "required": ["city"]}}}]
put("chat_render_fuzz", "tools", b"\x3f" + json.dumps({"messages": messages, "tools": tools}).encode())
put("chat_render_fuzz", "simple", b"\x03" + json.dumps([{"role": "user", "content": "Hi"}]).encode())

# model output: knob byte + text
put("chat_output_fuzz", "thought", b"\x05<|channel>thought\nLet me think.<channel|>\n\nThe answer is 4.<turn|>x")
put("chat_output_fuzz", "tool_calls",
    b"\x91<|tool_call>call:get_weather{location:<|\"|>Paris, FR<|\"|>,days:2,opts:{a:[1,true,null]}}"
    b"<tool_call|><|tool_call>call:get_time{}<tool_call|><|tool_response>")
put("chat_output_fuzz", "args", b"\x00{key:<|\"|>text<|\"|>,n:1.5,ok:true,list:[1,2],obj:{k:<|\"|>v<|\"|>}}")

# HTTP bodies: route byte (0 chat, 1 completion, 2 generate, 3 tokenize, 4 detokenize) + body
put("api_request_fuzz", "chat", b"\x00" + json.dumps({
    "model": "g4", "messages": messages, "tools": tools, "tool_choice": "auto", "max_tokens": 16,
    "temperature": 0.7, "top_k": 40, "top_p": 0.9, "stop": ["\n\n"], "stream": True,
    "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2,
    "logit_bias": {"5": -100}, "seed": 1, "chat_template_kwargs": {"enable_thinking": True}}).encode())
put("api_request_fuzz", "completion", b"\x01" + json.dumps(
    {"prompt": [[2, 105, 7]], "max_tokens": 3, "logprobs": 1, "echo": False, "timeout": 5}).encode())
put("api_request_fuzz", "generate", b"\x02" + json.dumps({"prompt": "Hello", "max_new_tokens": 8, "raw": True}).encode())
put("api_request_fuzz", "tokenize", b"\x03" + json.dumps({"content": "Hi there", "add_special": True,
                                                           "with_pieces": True}).encode())
put("api_request_fuzz", "detokenize", b"\x04" + json.dumps({"tokens": [2, 105, 999]}).encode())

# /v1/responses bodies (no route byte): string input, folded items, a previous_response_id chain
# ("resp_1" is the one id the target's lookup knows).
put("responses_request_fuzz", "string_input", json.dumps(
    {"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 7, "temperature": 0.5,
     "stream": True}, separators=(",", ":")))
put("responses_request_fuzz", "items", json.dumps({"input": [
    {"role": "developer", "content": "d"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "r"}],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": "auto",
    "reasoning": {"effort": "low"}}, separators=(",", ":")))
put("responses_request_fuzz", "chained", json.dumps({
    "previous_response_id": "resp_1", "input": [{"type": "function_call_output", "call_id": "c1", "output": "r"}],
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}, "store": False},
    separators=(",", ":")))
# GBNF grammars (the `grammar` field); after a NUL, bytes to run the recogniser over.
put("gbnf_fuzz", "json", r'''root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}
''' + "\0" + '{"a": [1, "x\\n"]}')
put("gbnf_fuzz", "small", 'root ::= ("yes" | "no") "," [0-9]{2} [^a-z]? . # comment\n\0no,42!')
put("gbnf_fuzz", "unicode", 'root ::= [\\u00e0-\\u00ff]+ "\\x41" [^\\U0001F600]* x\nx ::= "é"*\n\0\u00e9A')
# JSON schemas (response_format json_schema).
put("json_schema_fuzz", "object", json.dumps({
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
    "age": {"type": "integer", "minimum": 0, "maximum": 130}, "when": {"type": "string", "format": "date-time"},
    "tags": {"type": "array", "items": {"enum": ["a", 1, None]}, "minItems": 1, "maxItems": 3},
    "kind": {"anyOf": [{"type": "null"}, {"const": "x"}]}}, "required": ["name"], "additionalProperties": False}))
put("json_schema_fuzz", "refs", json.dumps({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": ["integer", "null"]},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"}))
put("json_schema_fuzz", "any", json.dumps({"type": "object", "additionalProperties": {"type": "number", "minimum": 0}}))
print("seed corpora written to", corpus)
