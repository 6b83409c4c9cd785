#!/usr/bin/env python3
"""Renders Gemma-4 chat scenarios with Python Jinja2 (as Hugging Face transformers does:
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks) from real chat_template.jinja files,
writing tests/data/gemma4-chat-golden.json for src/tokenizer/chat_gemma4_test.cc.

The templates are not part of the repository; pass their paths:
  python3 tools/make_chat_golden.py BASE.jinja INTERLEAVED.jinja tests/data/gemma4-chat-golden.json
BASE: llama.cpp models/templates/gemma4.jinja (commit a20c1a8). INTERLEAVED: the same with the
rules of llama.cpp models/templates/google-gemma-4-31B-it-interleaved.jinja (commit 3240d8f):
"<|think|>\\n", reasoning replay, no new model turn for a tool call after tool responses.

Each scenario is written in OpenAI form (what g4's server receives). The templates take Gemma's
native form, so this script converts it the way g4 documents in chat_gemma4.h: "tool" messages
become tool_responses of the assistant message whose tool_calls they answer (name from
tool_call_id, JSON object/array content parsed), and JSON-string arguments become mappings.
"""
import copy
import hashlib
import json
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the documentation",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "Words to look for"},
        "limit": {"type": "integer", "description": "Max hits", "nullable": True},
        "exact": {"type": "boolean"},
        "score": {"type": "number", "description": "Minimum score"},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter tags"},
        "filters": {"type": "object", "description": "Structured filters",
                    "properties": {"lang": {"type": "string", "enum": ["en", "de"]},
                                   "year": {"type": "integer"}},
                    "required": ["lang"]},
        "ranges": {"type": "array", "items": {"type": "object", "properties": {
            "from": {"type": "integer"}, "to": {"type": "integer"}}, "required": ["from"]}},
        "Mode": {"type": ["string", "null"], "description": "Search mode"}},
        "required": ["query", "exact"]}}}
NO_PARAMS = {"type": "function", "function": {"name": "get_time", "description": "Current time"}}

SCENARIOS = [
    ("user_only", [{"role": "user", "content": "Hello"}], None),
    ("system_user", [{"role": "system", "content": "Be precise."},
                     {"role": "user", "content": "Explain slices."}], None),
    ("developer_trimmed", [{"role": "developer", "content": "  \n You are terse.\t"},
                           {"role": "user", "content": "\u00a0Hi there \u3000"}], None),
    ("multi_turn", [{"role": "user", "content": "Compute 1+1."},
                    {"role": "assistant", "content": "2"},
                    {"role": "user", "content": "Now double it."},
                    {"role": "assistant", "content": "<|channel>thought\nDouble 2.<channel|>  4  "},
                    {"role": "user", "content": "Why?"}], None),
    ("content_parts", [{"role": "user", "content": [{"type": "text", "text": " Part one. "},
                                                    {"type": "text", "text": "Part two."}]}], None),
    ("later_system", [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"},
                      {"role": "system", "content": "Switch to French."},
                      {"role": "user", "content": "C"}], None),
    ("tools_declared", [{"role": "user", "content": "Weather in Paris?"}], [WEATHER, NO_PARAMS]),
    ("tools_with_system", [{"role": "system", "content": "Use tools when useful."},
                           {"role": "user", "content": "Find docs about slices."}], [SEARCH, WEATHER]),
    ("tool_round_trip", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather",
                          "arguments": "{\"location\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "{\"temperature\": 21.5, \"sky\": \"clear\", \"wind\": {\"kph\": 12, \"dir\": \"NW\"}}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."},
        {"role": "user", "content": "Thanks!"}], [WEATHER]),
    ("tool_response_last", [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
            {"id": "b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "12:00"},
        {"role": "tool", "tool_call_id": "a", "content": "[1, 2.0, true, null, \"x\"]"}], [WEATHER, NO_PARAMS]),
    ("tool_arguments_kinds", [
        {"role": "user", "content": "Search."},
        {"role": "assistant", "tool_calls": [
            {"id": "s", "type": "function", "function": {"name": "search_docs", "arguments": {
                "query": "slices 世界 \"quoted\"", "limit": 5, "exact": False, "score": 0.25,
                "tags": ["a", "b"], "filters": {"lang": "en", "year": 2024, "Nested": {"deep": [1, {"k": None}]}},
                "big": 1e20, "small": 1.5e-7, "whole": 3.0}}}]},
        {"role": "tool", "tool_call_id": "s", "content": "no hits"}], [SEARCH]),
    ("interleaved_reasoning", [
        {"role": "user", "content": "Plan a trip."},
        {"role": "assistant", "reasoning_content": "Need weather first.", "content": None, "tool_calls": [
            {"id": "w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "w", "content": "{\"sky\": \"rain\"}"},
        {"role": "assistant", "reasoning_content": "Now the time.", "tool_calls": [
            {"id": "t", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t", "content": "09:30"}], [WEATHER, NO_PARAMS]),
]


def to_native(messages):
    out = []
    for m in copy.deepcopy(messages):
        if m["role"] == "tool":
            prev = out[-1]
            name = next((c["function"]["name"] for c in prev["tool_calls"] if c.get("id") == m.get("tool_call_id")), "unknown")
            try:
                value = json.loads(m["content"])
                if not isinstance(value, (dict, list)):
                    value = m["content"]
            except ValueError:
                value = m["content"]
            prev.setdefault("tool_responses", []).append({"name": name, "response": value})
            continue
        for call in m.get("tool_calls") or []:
            args = call["function"].get("arguments")
            if isinstance(args, str):
                try:
                    parsed = json.loads(args)
                    if isinstance(parsed, dict):
                        call["function"]["arguments"] = parsed
                except ValueError:
                    pass
        out.append(m)
    return out


def main():
    base_path, interleaved_path, out_path = sys.argv[1:4]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    templates = {}
    for name, path in (("base", base_path), ("interleaved", interleaved_path)):
        text = open(path, encoding="utf-8").read()
        templates[name] = (env.from_string(text), hashlib.sha256(text.encode()).hexdigest(), len(text.encode()))
    cases = []
    for name, messages, tools in SCENARIOS:
        for thinking in (False, True):
            for gen in (True, False):
                if not gen and thinking:
                    continue
                expected = {}
                for tname, (template, _, _) in templates.items():
                    kwargs = dict(messages=to_native(messages), bos_token="<bos>", add_generation_prompt=gen)
                    if tools:
                        kwargs["tools"] = tools
                    if thinking:
                        kwargs["enable_thinking"] = True
                    expected[tname] = template.render(**kwargs)
                cases.append({"name": name, "messages": messages, "tools": tools, "enable_thinking": thinking,
                              "add_generation_prompt": gen, "expected": expected})
    doc = {
        "description": "Gemma-4 prompts rendered by Python Jinja2 (transformers settings) from chat templates; "
                       "messages are in OpenAI form, converted as chat_gemma4.h documents. Generated by "
                       "tools/make_chat_golden.py.",
        "jinja2_version": __import__("jinja2").__version__,
        "templates": {name: {"sha256": sha, "bytes": size} for name, (_, sha, size) in templates.items()},
        "template_sources": {
            "base": "llama.cpp models/templates/gemma4.jinja @ a20c1a89cfb3ebc911d91245af15cbe89751eaaf",
            "interleaved": "base + the rules of llama.cpp models/templates/google-gemma-4-31B-it-interleaved.jinja "
                           "@ 3240d8f92c08e9db0be78358b29e06a1f531fe33 (think newline, reasoning replay, "
                           "turn continuation after tool responses)"},
        "cases": cases,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {out_path}")


if __name__ == "__main__":
    main()
