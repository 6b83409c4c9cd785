#!/usr/bin/env python3
"""Differential cases for g4's Jinja engine (src/template/), rendered by Python Jinja2 set up as
Hugging Face transformers sets it up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now).

Writes one JSON object per line: {"name", "template", "context", "expected"} or
{"name", "template", "context", "error"} when Jinja2 raises. The gtest JinjaDiff.* renders each
case with g4 and requires byte-identical output, or an error where Jinja2 raised.

  tools/jinja_diff.py --emit cases.jsonl [--templates DIR] [--conversations N] [--seed S]
  tools/jinja_diff.py --emit-requests cases.jsonl [...]   (whole chat-completions bodies, rendered
      as transformers + vLLM would: the oracle of ChatTemplateDiff.*)

Templates: the feature corpus below, src/template/testdata/*.jinja (other model families), and,
with --templates, every file in DIR (e.g. real Gemma-4 chat templates) x N conversations.
"""
import argparse, datetime, glob, json, os, random, sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(77)


class AssistantTracker(jinja2.ext.Extension):
    # transformers' {% generation %} extension: renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# Feature corpus: each template is rendered against FEATURE_CONTEXT.
FEATURE_TEMPLATES = [
    "{{ 1 }} {{ 1.0 }} {{ 1e-5 }} {{ 1.5e20 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
    "{{ true }} {{ false }} {{ none }} {{ True and 1 }} {{ 0 or 'x' }} {{ not none }} {{ [1, 'a', none, true, 1.5] }} {{ {'a': 1, 'b': [2]} }} {{ (1,) }} {{ (1, 'b') }}",
    "{{ 'it\\'s' }} {{ [\"it's\"] }} {{ ['a\\nb', 'ü'] }} {{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }}",
    "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-2:] }}|{{ s[0] }}|{{ items[1:] }}|{{ items[::2] }}|{{ items[-1] }}|{{ s|length }}|{{ s[10] }}|{{ items[10] }}",
    "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }};{% endfor %}",
    "{% for x in items if x is odd %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for x in items %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d|dictsort %}{{ k }}{% endfor %}|{{ d|dictsort(reverse=true) }}",
    "{% set x = 1 %}{% for i in items %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}|{% set ns = namespace(t=0) %}{% for i in items %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}block {{ a }}{% endset %}[{{ c }}]{% set t = (1, 2) %}{{ t }}",
    "{% macro f(a, b=2, c='x') %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ f(1) }} {{ f(1, 3) }} {{ f(1, c='y') }} {{ f() }}",
    "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ s }}{% endcall %}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}",
    "{{ s|upper }} {{ s|lower }} {{ s|capitalize }} {{ 'hello world-x'|title }} {{ '  pad  '|trim }} {{ 'xxhixx'|trim('x') }} {{ s|replace('l', 'L') }} {{ s|replace('l', 'L', 1) }}",
    "{{ items|join(',') }} {{ items|first }} {{ items|last }} {{ items|length }} {{ items|sum }} {{ items|min }} {{ items|max }} {{ items|reverse|list }} {{ items|list }} {{ 'abc'|list }}",
    "{{ users|map(attribute='name')|join(', ') }} {{ users|selectattr('age', 'gt', 20)|map(attribute='name')|list }} {{ users|rejectattr('admin')|list|length }} {{ users|sort(attribute='age')|map(attribute='name')|list }} {{ users|sort(attribute='name', reverse=true)|first }}",
    "{{ items|select('even')|list }} {{ items|reject('odd')|list }} {{ ['a', 'B', 'a']|unique|list }} {{ ['b', 'A', 'c']|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['x', 'y']|map('upper')|list }}",
    "{{ missing|default('dflt') }} {{ ''|default('e', true) }} {{ none|default('n') }} {{ missing|d('d') }} {{ 0|default(5, boolean=true) }}",
    "{{ '42'|int + 1 }} {{ '3.5'|float }} {{ 'x'|int }} {{ 3.7|int }} {{ 5|string ~ 'a' }} {{ -3|abs }} {{ 2.5|round }} {{ 2.567|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 7|round }}",
    "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ users|tojson }} {{ 'ü \"q\" \\n'|tojson }} {{ [1.0, 1e-7, none, true]|tojson }} {{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ 'ü'|tojson(ensure_ascii=true) }}",
    "{{ text|indent(2) }}|{{ text|indent(2, true) }}|{{ text|indent(2, blank=true) }}|{{ text|wordcount }}|{{ 'ab'|center(6) }}|{{ 'hello world foo bar'|truncate(9, leeway=0) }}",
    "{{ '%s-%d'|format('a', 3) }} {{ '%05.1f'|format(3.14159) }} {{ 'x=%s' % 1 }} {{ '<a href=\"x\">'|e }} {{ '<b>'|safe }} {{ [1,2,3,4,5]|batch(2)|list }}",
    "{{ s.startswith('he') }} {{ s.endswith(('x', 'lo')) }} {{ '  a b  '.strip() }} {{ 'xxaxx'.lstrip('x') }} {{ 'xxaxx'.rstrip('x') }} {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
    "{{ s.upper() }} {{ s.replace('l', '') }} {{ s.find('l') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format(1, 'b') }} {{ '{x}'.format(x=2) }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'Hello World'.title() }} {{ 'hELLO'.capitalize() }}",
    "{{ d.get('a') }} {{ d.get('zz', 'no') }} {{ d.get('zz') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d['a'] }} {{ d.a }} {{ d.zz is defined }} {{ items.index(3) }}",
    "{{ x is defined }} {{ missing is defined }} {{ none is none }} {{ s is string }} {{ d is mapping }} {{ items is iterable }} {{ items is sequence }} {{ 1 is number }} {{ true is boolean }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is true }} {{ false is false }} {{ 3 is divisibleby 3 }} {{ 2 in items }} {{ 2 is in items }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is eq 1 }} {{ 2 is equalto 2 }} {{ s is not none }} {{ 2 is even }}",
    "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 'l' in s }} {{ 'q' not in s }} {{ 'a' in d }} {{ 1 != 2 }} {{ 3 >= 3 }} {{ true == 1 }}",
    "{{ 'yes' if s else 'no' }} {{ 'yes' if missing else 'no' }} [{{ 'only' if false }}] {{ (1 if true else 2) + 1 }} {{ -items[0] }} {{ not items }}",
    "  {% if true %}\n    indented\n  {% endif %}\n{% for i in items %}\n  - {{ i }}\n{% endfor %}\n{#- comment -#}\n  tail  {{- '!' -}}  \n{%+ if true %}plus{% endif %}\n",
    "{%- for m in messages -%}\n  {{- m.role }}: {{ m.content -}}\n  {% if not loop.last %}\n\n{% endif %}\n{%- endfor %}\n{# a comment #}\nend\n",
    "{% generation %}gen {{ s }}{% endgeneration %}{% raw %}{{ not rendered }}{% endraw %}{% filter upper %}up {{ s }}{% endfilter %}",
    "{{ missing }}|{{ missing|length }}|{{ missing|string }}|{% for x in missing %}x{% endfor %}|{{ missing is undefined }}|{{ missing|list }}|{{ missing == missing }}",
    "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1, b=2) }} {{ namespace(a=1).a }} {{ users[0].name }} {{ users[1]['age'] }} {{ users|length }}",
    "{{ raise_exception('custom failure') }}",
    "{{ missing.attr }}",
    "{{ none + 1 }}",
    "{{ 1 / 0 }}",
    "{% for x in 5 %}{% endfor %}",
    "{{ x|nosuchfilter }}",
    "{% if x %}unclosed",
    "{{ items.append(4) }}",
    "{{ 'a' < 1 }}",
    "{{ d.content.foo }}",
    "{% set ns = namespace(a=1) %}{% set d.x = 1 %}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{{ messages[0].content|tojson }}{{ messages|map(attribute='role')|list }}{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
    "{{ '{{' }} {{ \"}}\" }} {{ {'a': {'b': 1}}['a']['b'] }} {{ [[1, 2], [3]]|map('length')|list }} {{ 'ab'|reverse }} {{ items[1:-1]|join }}",
    "{{ 'x' * 0 }}|{{ ''.join([]) }}|{{ 'a b c'.split(' ', 1) }}|{{ 'α β γ'[2:] }}|{{ 'αβγ'|length }}|{{ 'αβγ'[::-1] }}|{{ 'ÀB'|lower }}",
]

FEATURE_CONTEXT = {
    "s": "hello", "x": 1, "items": [1, 2, 3, 4, 5], "text": "line1\nline2\n\nline4",
    "d": {"b": 2, "a": 1, "c": [1, 2]},
    "users": [{"name": "ann", "age": 31, "admin": True}, {"name": "bob", "age": 19, "admin": False},
              {"name": "Cid", "age": 25, "admin": False}],
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
}

WORDS = ["hello", "wörld", "tool", "x", "42", "日本語", "emoji 🎉", "quote \"q\"", "back\\slash", "new\nline",
         "tab\there", "  spaced  ", "<tag>", "{{ not jinja }}", "a'b", ""]


def text(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))


def schema(rng, depth=0):
    kind = rng.choice(["string", "integer", "number", "boolean", "array", "object"] if depth < 2 else ["string", "integer"])
    s = {"type": kind}
    if rng.random() < 0.7:
        s["description"] = text(rng)
    if kind == "string" and rng.random() < 0.3:
        s["enum"] = [text(rng), text(rng)]
    if kind == "array":
        s["items"] = schema(rng, depth + 1)
    if kind == "object":
        props = {f"p{i}_{rng.randint(0, 9)}": schema(rng, depth + 1) for i in range(rng.randint(1, 3))}
        s["properties"] = props
        s["required"] = [k for k in props if rng.random() < 0.5]
    if rng.random() < 0.1:
        s["nullable"] = True
    return s


def tool(rng, i):
    props = {f"arg{j}": schema(rng, 1) for j in range(rng.randint(0, 3))}
    params = {"type": "object", "properties": props, "required": [k for k in props if rng.random() < 0.6]}
    fn = {"name": f"tool_{i}", "description": text(rng), "parameters": params}
    return {"type": "function", "function": fn}


def arg_value(rng, depth=0):
    kind = rng.randint(0, 7 if depth < 2 else 4)
    return [lambda: text(rng), lambda: rng.randint(-5, 1000), lambda: rng.random() * 100, lambda: rng.random() < 0.5,
            lambda: None, lambda: [arg_value(rng, depth + 1) for _ in range(rng.randint(0, 3))],
            lambda: {f"k{j}": arg_value(rng, depth + 1) for j in range(rng.randint(0, 3))},
            lambda: 1.0][kind]()


def content(rng):
    if rng.random() < 0.2:
        return [{"type": "text", "text": text(rng)} for _ in range(rng.randint(1, 2))]
    return text(rng)


def conversation(rng):
    tools = [tool(rng, i) for i in range(rng.randint(0, 3))] if rng.random() < 0.5 else None
    messages = []
    if rng.random() < 0.4:
        messages.append({"role": rng.choice(["system", "developer"]) if rng.random() < 0.8 else "system",
                         "content": content(rng)})
    for turn in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": content(rng)})
        if turn == 0 and rng.random() < 0.3 and len(messages) > 1 and False:
            pass
        is_last = rng.random() < 0.3
        if tools and rng.random() < 0.5:
            calls = []
            for c in range(rng.randint(1, 2)):
                args = {k: arg_value(rng) for k in tools[0]["function"]["parameters"]["properties"]}
                if rng.random() < 0.3:
                    args = json.dumps(args, ensure_ascii=False)
                calls.append({"id": f"call_{turn}_{c}", "type": "function",
                              "function": {"name": rng.choice(tools)["function"]["name"], "arguments": args}})
            msg = {"role": "assistant", "content": rng.choice([None, "", text(rng)]), "tool_calls": calls}
            if rng.random() < 0.4:
                msg["reasoning_content"] = text(rng)
            messages.append(msg)
            for call in calls:
                if rng.random() < 0.9:
                    result = rng.choice([text(rng), json.dumps({"ok": True, "v": arg_value(rng)}), ""])
                    messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                                     "content": result})
            if rng.random() < 0.6:
                messages.append({"role": "assistant", "content": text(rng)})
        elif not is_last or rng.random() < 0.5:
            msg = {"role": "assistant", "content": text(rng)}
            if rng.random() < 0.3:
                msg["content"] = "<|channel>thought\n" + text(rng) + "<channel|>" + text(rng)
            if rng.random() < 0.2:
                msg["reasoning_content"] = text(rng)
            messages.append(msg)
    ctx = {"messages": messages, "bos_token": "<bos>", "eos_token": "<eos>",
           "add_generation_prompt": rng.random() < 0.7}
    if tools is not None:
        ctx["tools"] = tools
    r = rng.random()
    if r < 0.4:
        ctx["enable_thinking"] = True
    elif r < 0.6:
        ctx["enable_thinking"] = False
    if rng.random() < 0.2:
        ctx["preserve_thinking"] = rng.random() < 0.5
    return ctx


# What the C++ side writes into the test checkpoint's tokenizer_config.json: the special tokens
# transformers passes to the template (eos in AddedToken form, as real configs have it).
TOKENIZER_CONFIG = {"bos_token": "<bos>", "eos_token": {"content": "<eos>", "special": True}, "pad_token": "<pad>",
                    "unk_token": "<unk>"}
SPECIAL_TOKENS = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}


def request_body(rng, ctx):
    """An OpenAI chat-completions body holding the conversation `ctx`, with the knobs a client sets."""
    body = {"model": "g4", "messages": ctx["messages"]}
    if "tools" in ctx:
        body["tools"] = ctx["tools"]
        r = rng.random()
        if r < 0.15:
            body["tool_choice"] = "none"
        elif r < 0.3 and ctx["tools"]:
            body["tool_choice"] = {"type": "function", "function": {"name": rng.choice(ctx["tools"])["function"]["name"]}}
        elif r < 0.5:
            body["tool_choice"] = rng.choice(["auto", "required"])
    kwargs = {k: ctx[k] for k in ("enable_thinking", "preserve_thinking") if k in ctx}
    if rng.random() < 0.2:
        kwargs["custom_flag"] = rng.choice([True, "text", 3])
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    elif rng.random() < 0.2:
        body["reasoning_effort"] = rng.choice(["none", "low", "high"])
    if not ctx["add_generation_prompt"]:
        body["add_generation_prompt"] = False
    return body


def oracle_context(body):
    """The template context transformers' apply_chat_template builds for `body` as vLLM serves it:
    JSON-string tool-call arguments parsed into objects, tools unless tool_choice is "none" (a
    named choice keeps that tool), special tokens, then chat_template_kwargs."""
    messages = json.loads(json.dumps(body["messages"]))
    for m in messages:
        for call in m.get("tool_calls") or []:
            if isinstance(call["function"].get("arguments"), str):
                try:
                    call["function"]["arguments"] = json.loads(call["function"]["arguments"])
                except ValueError:
                    pass
    tools = body.get("tools") or None
    choice = body.get("tool_choice")
    if choice == "none":
        tools = None
    elif isinstance(choice, dict) and tools:
        tools = [t for t in tools if t["function"]["name"] == choice["function"]["name"]][:1]
    kwargs = dict(body.get("chat_template_kwargs", {}))
    effort = body.get("reasoning_effort")
    if effort and "enable_thinking" not in kwargs:
        kwargs["enable_thinking"] = effort not in ("none", "minimal")
    ctx = dict(messages=messages, tools=tools, documents=None,
               add_generation_prompt=body.get("add_generation_prompt", True), **SPECIAL_TOKENS)
    ctx.update(kwargs)
    return ctx


def emit_requests(args, env, here):
    """Cases for the chat-template component (ChatTemplateDiff.*): whole request bodies."""
    files = sorted(glob.glob(os.path.join(here, "..", "tests", "templates", "*.jinja")))
    files += sorted(glob.glob(os.path.join(here, "..", "src", "template", "testdata", "*.jinja")))
    if args.templates:
        files += sorted(glob.glob(os.path.join(args.templates, "*")))
    rng = random.Random(args.seed)
    bodies = [request_body(rng, conversation(rng)) for _ in range(args.conversations)]
    # A tool-call argument string that is not JSON stays a string on both sides.
    bodies.append({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}]})
    cases = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for i, body in enumerate(bodies):
            cases.append(dict(name=f"{os.path.basename(path)}#{i}", template_file=os.path.abspath(path), body=body,
                              **render(env, source, oracle_context(body))))
    with open(args.emit_requests, "w", encoding="utf-8") as out:
        out.write(json.dumps({"tokenizer_config": TOKENIZER_CONFIG}) + "\n")
        for case in cases:
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} request cases ({errors} where Jinja2 raises) from {len(files)} templates", file=sys.stderr)


_compiled = {}


def render(env, template, context):
    try:
        if template not in _compiled:  # compiling a large template costs far more than rendering it
            _compiled[template] = env.from_string(template)
        return {"expected": _compiled[template].render(**context)}
    except Exception as e:  # noqa: BLE001 - any Jinja2 failure is an expected error
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emit", help="engine cases: template + context")
    ap.add_argument("--emit-requests", help="component cases: template file + chat-completions body")
    ap.add_argument("--templates", help="directory of extra templates (e.g. real Gemma-4 chat templates)")
    ap.add_argument("--conversations", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    env = make_env()
    here = os.path.dirname(os.path.abspath(__file__))
    if args.emit_requests:
        return emit_requests(args, env, here)
    if not args.emit:
        ap.error("give --emit or --emit-requests")
    cases = []
    for i, t in enumerate(FEATURE_TEMPLATES):
        cases.append(dict(name=f"feature_{i}", template=t, context=FEATURE_CONTEXT, **render(env, t, FEATURE_CONTEXT)))
    files = sorted(glob.glob(os.path.join(here, "..", "src", "template", "testdata", "*.jinja")))
    if args.templates:
        files += sorted(glob.glob(os.path.join(args.templates, "*")))
    rng = random.Random(args.seed)
    conversations = [conversation(rng) for _ in range(args.conversations)]
    for path in files:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for i, ctx in enumerate(conversations):
            cases.append(dict(name=f"{os.path.basename(path)}#{i}", template=source, context=ctx, **render(env, source, ctx)))
    with open(args.emit, "w", encoding="utf-8") as out:
        for case in cases:
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} cases ({errors} where Jinja2 raises) from {len(FEATURE_TEMPLATES)} feature templates and "
          f"{len(files)} template files x {len(conversations)} conversations", file=sys.stderr)


if __name__ == "__main__":
    main()
