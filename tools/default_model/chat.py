"""Chat conversations for the default model, in the Gemma-4 turn format.

A conversation renders exactly as the default model's chat template (g4's built-in small
template; `g4 template --request` prints it):

    <bos><|turn>user\\n{question}<turn|>\\n<|turn>model\\n{answer}<turn|>\\n<|turn>user\\n...

The model is trained on the answer tokens and the closing <turn|> (id 106, an end-of-turn id in
generation_config.json); the question, the markers and the "\\n" the template writes after
<turn|> are input only. Three kinds of question, all about KJV verses of the corpus:
  ref       "What does John 3:16 say?" / "Quote Psalm 23:1."  -> the verse
  continue  "Continue: The LORD is my shepherd;"              -> "I shall not want."
  book      "Which book says 'In the beginning was the Word'?" -> "John."
Every 17th verse (never one of the README/test verses) is held out of the chat samples so that
chat_eval.py can measure answers on questions the model was not trained on.
"""
import json
import os
import re
import subprocess
import tempfile

import corpus

TURN_OPEN, TURN_CLOSE = 105, 106
BOOK_REF = {"Ge": "Genesis", "Psa": "Psalm", "John": "John"}    # "Psalm 23:1"
BOOK_NAME = {"Ge": "Genesis", "Psa": "Psalms", "John": "John"}  # the answer to "which book"
HOLD_OUT_EVERY, HOLD_OUT_AT = 17, 5


def render(turns):
    """turns: [(question, answer)]; the last answer may be None (then the text ends with the
    generation prompt "<|turn>model\n"), else the text ends with its <turn|>."""
    s = "<bos>"
    for k, (q, a) in enumerate(turns):
        s += f"<|turn>user\n{q}<turn|>\n<|turn>model\n"
        if a is not None:
            s += a + "<turn|>" + ("\n" if k + 1 < len(turns) else "")
    return s


def split_ref(ref):
    m = re.match(r"^([A-Za-z]+?)(\d+):(\d+)$", ref)
    return m.group(1), int(m.group(2)), int(m.group(3))


def human_ref(ref):
    b, c, v = split_ref(ref)
    return f"{BOOK_REF[b]} {c}:{v}"


def opening(text):
    """The opening of a verse for a "Continue:" question: up to the first , ; or : after at
    least three words (when something follows), else the first half of the words."""
    words = text.split(" ")
    for k in range(2, len(words) - 1):
        if words[k][-1] in ",;:":
            return " ".join(words[:k + 1])
    return " ".join(words[:max(1, len(words) // 2)])


def fragment(text):
    """The quote for "Which book says '...'?": the first clause, at most eight words."""
    words = text.split(" ")
    out = []
    for w in words[:8]:
        out.append(w.rstrip(",;:.?!"))
        if w[-1] in ",;:.?!" and len(out) >= 3:
            break
    return " ".join(out)


def questions(data):
    """All single-turn questions: list of dicts kind, ref, question, answer, verse (index),
    held_out, focus."""
    verses, focus = data["verses"], set(data["focus"])
    test_refs = {p["ref"] for p in data["prompts"]}
    prompt_of = {p["ref"]: p["prompt"] for p in data["prompts"]}
    frag_books = {}
    for ref, text in verses:
        frag_books.setdefault(fragment(text), set()).add(split_ref(ref)[0])
    out = []
    for i, (ref, text) in enumerate(verses):
        held = i % HOLD_OUT_EVERY == HOLD_OUT_AT and ref not in test_refs
        base = {"ref": ref, "verse": i, "held_out": held, "focus": i in focus}
        if i in focus or ref in test_refs:
            hr = human_ref(ref)
            out.append(dict(base, kind="ref", question=f"What does {hr} say?", answer=text))
            out.append(dict(base, kind="ref", question=f"Quote {hr}.", answer=text))
        op = prompt_of.get(ref) or opening(text)
        rest = text[len(op):].strip()
        if rest:
            out.append(dict(base, kind="continue", question=f"Continue: {op}", answer=rest))
        fr = fragment(text)
        if len(frag_books[fr]) == 1 and len(fr.split(" ")) >= 3:
            out.append(dict(base, kind="book", question=f"Which book says '{fr}'?",
                            answer=BOOK_NAME[split_ref(ref)[0]] + "."))
    return out


def tokenize_strings(strings, tokenizer_json=None):
    """HF tokenizers (Node) without added <bos>; special-token markers in the text are parsed."""
    tokenizer_json = tokenizer_json or os.path.join(corpus.ROOT, "assets", "tokenizer", "gemma4.json")
    with tempfile.TemporaryDirectory() as d:
        inp, outp = os.path.join(d, "in.json"), os.path.join(d, "out.json")
        with open(inp, "w") as f:
            json.dump({"verses": [], "prompts": strings}, f)
        subprocess.run(["node", os.path.join(corpus.HERE, "tokenize.js"), tokenizer_json, inp, outp],
                       check=True)
        with open(outp) as f:
            return json.load(f)["prompts"]


def encode(convs):
    """convs: list of [(question, answer)] -> list of (ids, targets): targets[t] is the id to
    predict after ids[:t+1], or -1 where no loss is taken. ids hold the whole rendered
    conversation (ending with the last <turn|>)."""
    strings, index = [], []
    for turns in convs:
        cuts = []
        for k in range(len(turns)):
            head = render(turns[:k] + [(turns[k][0], None)])
            cuts.append((len(strings), len(strings) + 1))
            strings += [head, head + turns[k][1] + "<turn|>"]
        index.append((len(strings), cuts))
        strings.append(render(turns))
    toks = tokenize_strings(strings)
    out = []
    for turns, (full, cuts) in zip(convs, index):
        ids = toks[full]
        tgt = [-1] * len(ids)
        for a, b in cuts:
            head, done = toks[a], toks[b]
            # the answer tokens must be exactly the tokens of the whole rendered conversation
            assert ids[:len(done)] == done and done[:len(head)] == head, (turns, head, done)
            assert done[-1] == TURN_CLOSE
            for t in range(len(head), len(done)):
                tgt[t - 1] = ids[t]
        out.append((ids, tgt))
    return out


def check_template(g4, model_dir, convs):
    """Compares render() with what `g4 template --request` prints (its generation prompt)."""
    for turns in convs:
        msgs = []
        for q, a in turns:
            msgs.append({"role": "user", "content": q})
            if a is not None:
                msgs.append({"role": "assistant", "content": a})
        r = subprocess.run([g4, "template", "--model", model_dir, "--request", "-"],
                           input=json.dumps({"messages": msgs}), capture_output=True, text=True,
                           check=True)
        assert turns[-1][1] is None, "compare generation prompts only"
        want = render(turns)
        if r.stdout != want and r.stdout != want + "\n":
            raise RuntimeError(f"template mismatch:\n{r.stdout!r}\n{want!r}")


def check_tokens(g4, model_dir, strings):
    """Compares HF tokenizers' ids (tokenize_strings) with `g4 tokenize --jsonl`."""
    r = subprocess.run([g4, "tokenize", "--model", model_dir, "--jsonl"], capture_output=True, text=True,
                       input="".join(json.dumps(s) + "\n" for s in strings), check=True)
    mine = [json.loads(line) for line in r.stdout.splitlines()]
    if mine != tokenize_strings(strings):
        raise RuntimeError("g4's token ids differ from HF tokenizers' on a rendered conversation")


def main():
    """usage: chat.py G4_BINARY [MODEL_DIR]: checks render() against `g4 template` and the
    HF token ids against `g4 tokenize` on 30 conversations of one to three turns."""
    import random
    import sys
    g4 = sys.argv[1]
    model_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(corpus.ROOT, "assets", "models", "default")
    qs = questions(corpus.build())
    rng = random.Random(1)
    convs = []
    for _ in range(30):
        picked = [rng.choice(qs) for _ in range(rng.randint(1, 3))]
        convs.append([(q["question"], q["answer"]) for q in picked[:-1]] + [(picked[-1]["question"], None)])
    check_template(g4, model_dir, convs)
    check_tokens(g4, model_dir, [render(c) for c in convs] + [render(c[:-1] + [(c[-1][0], "x")]) for c in convs])
    print(f"chat.py: {len(convs)} conversations render as `g4 template` prints them; token ids agree")


if __name__ == "__main__":
    main()
