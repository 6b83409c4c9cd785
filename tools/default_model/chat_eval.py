#!/usr/bin/python3
"""Measures the chat ability of a trained default model (OUT/trained.pt from train_chat.py):
greedy answers, in float32, to questions rendered in the Gemma-4 turn format.

usage: /usr/bin/python3 tools/default_model/chat_eval.py [--out build/default_model] [--per-kind 60]
For each kind of question (chat.py; "/focus": verses of the FOCUS chapters, which the model
recites well, "/other": the rest) and for held-out / trained questions it prints how many
answers end their turn with <turn|> (id 106) within --max-new tokens, and how many answers are
exactly right. Held-out questions are about verses no chat sample was trained on (the verses
themselves are in the raw-text corpus).
"""
import argparse
import json
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat  # noqa: E402
import corpus  # noqa: E402
import gemma4_tiny as G  # noqa: E402

STOP = (1, 106, 50)  # generation_config.json eos ids


class Greedy:
    """Greedy decoding over the trained ids plus the null row (any other id has the null row's
    logit; it wins only if the null logit is the maximum, then the answer is counted wrong)."""

    def __init__(self, cfg, W, vocab, dtype=torch.float32):
        self.cfg, self.W, self.dtype = cfg, W, dtype
        self.vocab = vocab
        self.to_c = {t: k for k, t in enumerate(vocab)}

    def __call__(self, prompts, max_new):
        """prompts: lists of ids -> the generated ids of each (up to and including a stop id;
        -1 where the null row won). Prompts of equal length decode together as one batch."""
        outs = [None] * len(prompts)
        groups = {}
        for k, p in enumerate(prompts):
            groups.setdefault(len(p), []).append(k)
        with torch.no_grad():
            for ks in groups.values():
                c = torch.tensor([[self.to_c.get(i, len(self.vocab)) for i in prompts[k]] for k in ks])
                gen = [[] for _ in ks]
                for _ in range(max_new):
                    lg = G.forward(self.cfg, self.W, c, dtype=self.dtype, last_only=True)[:, -1]
                    nxt = torch.argmax(lg, -1)
                    for j, n in enumerate(nxt.tolist()):
                        done = gen[j] and (gen[j][-1] in STOP or gen[j][-1] < 0)
                        if not done:
                            gen[j].append(self.vocab[n] if n < len(self.vocab) else -1)
                    if all(g[-1] in STOP or g[-1] < 0 for g in gen):
                        break
                    c = torch.cat([c, nxt[:, None]], 1)
                for j, k in enumerate(ks):
                    outs[k] = gen[j]
        return outs


def evaluate(greedy, questions, max_new, decode):
    prompts = chat.tokenize_strings([chat.render([(q["question"], None)]) for q in questions])
    answers = greedy(prompts, max_new)
    texts = decode([[t for t in a if t >= 0 and t != 106] for a in answers])
    rows = []
    for q, a, text in zip(questions, answers, texts):
        ended = bool(a) and a[-1] == 106
        rows.append({"kind": q["kind"], "ref": q["ref"], "question": q["question"], "answer": text,
                     "ended": ended, "correct": ended and text == q["answer"], "tokens": len(a)})
    return rows


def summary(rows):
    out = {}
    for r in rows:
        s = out.setdefault(r["kind"], {"n": 0, "ended": 0, "correct": 0})
        s["n"] += 1
        s["ended"] += r["ended"]
        s["correct"] += r["correct"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(corpus.ROOT, "build", "default_model"))
    ap.add_argument("--per-kind", type=int, default=40, help="questions per kind and split")
    ap.add_argument("--max-new", type=int, default=80)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    st = torch.load(os.path.join(args.out, "trained.pt"))
    W = {n: G.bf16_round(t.float()) for n, t in st["weights"].items()}
    greedy = Greedy(st["config"], W, st["vocab"])
    split = json.load(open(os.path.join(args.out, "chat_split.json")))
    import export  # decode() via the HF tokenizer
    rng = random.Random(args.seed)
    report = {}
    t0 = time.time()
    for name in ("held_out", "trained"):
        qs = []
        for kind, focus in (("ref", True), ("continue", True), ("continue", False), ("book", None)):
            pool = [dict(q, kind=q["kind"] + {True: "/focus", False: "/other", None: ""}[focus])
                    for q in split[name] if q["kind"] == kind and focus in (None, q["focus"])]
            qs += rng.sample(pool, min(args.per_kind, len(pool)))
        rows = evaluate(greedy, qs, args.max_new, export.decode)
        report[name] = {"summary": summary(rows), "examples": rows[:: max(1, len(rows) // 12)]}
        for kind, s in report[name]["summary"].items():
            print(f"{name:9s} {kind:15s} n={s['n']:3d} ended with <turn|>: {s['ended']:3d} "
                  f"({100 * s['ended'] / s['n']:.0f}%)  exact answer: {s['correct']:3d} "
                  f"({100 * s['correct'] / s['n']:.0f}%)", flush=True)
    for r in report["held_out"]["examples"]:
        print(f"  [{r['kind']}] {r['question']!r} -> {r['answer']!r} ended={r['ended']}")
    report["seconds"] = round(time.time() - t0)
    with open(os.path.join(args.out, "chat_eval.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"chat_eval: {report['seconds']} s; wrote {os.path.join(args.out, 'chat_eval.json')}")


if __name__ == "__main__":
    main()
