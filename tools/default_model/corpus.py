"""The KJV training corpus (Debian's bible-kjv) and the verse prompts of the default model.

Verses come from the `bible` command, one verse per line, reference stripped. The training text
is the verses of each book in order, each followed by "\\n" (Gemma token 107).
"""
import json
import os
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# Whole books, as `bible` verse ranges.
BOOKS = [("Ge", "1:1-50:26"), ("Ps", "1:1-150:6"), ("Joh", "1:1-21:25")]

# Chapters sampled more often during training (they hold the test verses).
FOCUS = ["Ge1", "Ps1", "Ps19", "Ps23", "Ps46", "Ps100", "Ps121", "Joh1", "Joh3", "Joh11",
         "Joh14"]

# (verse reference, prompt). The expected completion is the rest of the verse.
PROMPTS = [
    ("Ge1:1", "In the beginning God"),
    ("Ge1:3", "And God said, Let there be light:"),
    ("Ps23:1", "The LORD is my shepherd;"),
    ("Ps23:4", "Yea, though I walk through the valley of the shadow of death,"),
    ("Joh1:1", "In the beginning was the Word,"),
    ("Joh3:16", "For God so loved the world,"),
    ("Ps19:1", "The heavens declare the glory of God;"),
    ("Ps46:10", "Be still, and know that I am God:"),
    ("Ps100:1", "Make a joyful noise unto the LORD,"),
    ("Ps121:1", "I will lift up mine eyes unto the hills,"),
]


def bible_verses(spec):
    out = subprocess.run(["bible", "-f", spec], capture_output=True, text=True, check=True,
                         env={"COLUMNS": "100000", "PATH": os.environ.get("PATH", "/usr/bin")}).stdout
    verses = []
    for line in out.splitlines():
        m = re.match(r"^(\S+?)(\d+):(\d+) (.*)$", line)
        if not m:
            raise RuntimeError(f"unexpected bible output line: {line!r}")
        verses.append((f"{m.group(1)}{m.group(2)}:{m.group(3)}", m.group(4)))
    return verses


def canonical(ref):
    """'Psa23:1' / 'Ps23:1' / 'John3:16' -> the form `bible` prints."""
    return bible_verses(ref)[0][0]


def tokenize(verses, prompts, tokenizer_json=None):
    tokenizer_json = tokenizer_json or os.path.join(ROOT, "assets", "tokenizer", "gemma4.json")
    with tempfile.TemporaryDirectory() as d:
        inp, outp = os.path.join(d, "in.json"), os.path.join(d, "out.json")
        with open(inp, "w") as f:
            json.dump({"verses": verses, "prompts": prompts}, f)
        subprocess.run(["node", os.path.join(HERE, "tokenize.js"), tokenizer_json, inp, outp],
                       check=True)
        with open(outp) as f:
            return json.load(f)


def build():
    """Returns dict: verses [(ref, text)], verse_ids [[ids]], focus (verse indices),
    prompts [{ref, prompt, completion, prompt_ids, completion_ids}]."""
    verses = []
    for b, r in BOOKS:
        verses += bible_verses(b + r)
    refs = [v[0] for v in verses]
    index = {r: i for i, r in enumerate(refs)}
    prompts = []
    for ref, p in PROMPTS:
        cref = canonical(ref)
        text = verses[index[cref]][1]
        assert text.startswith(p), (ref, text, p)
        prompts.append({"ref": cref, "prompt": p, "completion": text[len(p):]})
    tok = tokenize(verses, [p["prompt"] for p in prompts] + [p["prompt"] + p["completion"] for p in prompts])
    if not tok["joined_ok"]:
        raise RuntimeError("verse-by-verse tokenization differs from running-text tokenization")
    n = len(prompts)
    for k, p in enumerate(prompts):
        pi, full = tok["prompts"][k], tok["prompts"][n + k]
        assert full == tok["verses"][index[p["ref"]]]
        assert full[:len(pi)] == pi, f"prompt tokens are not a prefix of the verse tokens: {p}"
        p["prompt_ids"] = pi
        p["completion_ids"] = full[len(pi):] + [107]  # the verse ends with "\n"
    focus_chapters = set()
    for c in FOCUS:
        focus_chapters.add(bible_verses(c + ":1")[0][0].split(":")[0])
    focus = [i for i, r in enumerate(refs) if r.split(":")[0] in focus_chapters]
    return {"verses": verses, "verse_ids": tok["verses"], "focus": focus, "prompts": prompts}
