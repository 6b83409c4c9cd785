#!/usr/bin/python3
"""End-to-end speed of speculative decoding on the default model with its trained assistant
drafter: `g4 run` greedy, plain vs --spec mtp (draft-max 1..4) vs --spec ngram, on held-out verse
openings (the first half of verses kept out of the drafter's training) and on a repetitive task
(a passage, then its opening again: the model recites what the prompt holds, prompt lookup's
case). The variants take turns within each repetition (the box is shared and noisy); reported:
medians over repetitions of decode tok/s summed over the prompts, acceptance, tokens per target
pass, and whether every speculative output equals the plain one token for token.

usage: /usr/bin/python3 tools/default_model/bench_assistant.py [--g4 build/g4] [--reps 3] [--n 64]
           [--variants mtp1,mtp3@0.6,mtp1:q4,ngram]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from chat import HOLD_OUT_AT, HOLD_OUT_EVERY  # noqa: E402  (train_assistant.py needs torch)

TOKS = re.compile(r"decode ([0-9.]+) tok/s")


def prompts(n_held):
    verses = []
    for b, r in corpus.BOOKS:
        verses += corpus.bible_verses(b + r)
    held = [i for i in range(len(verses)) if i % HOLD_OUT_EVERY == HOLD_OUT_AT]
    step = max(1, len(held) // n_held)
    out = {"held_out": [], "repetitive": []}
    for i in held[::step][:n_held]:
        words = verses[i][1].split()
        out["held_out"].append(" ".join(words[:max(2, len(words) // 2)]))
    for first, n in (("Ge1:1", 5), ("Joh1:1", 5)):
        k = [v[0] for v in verses].index(corpus.canonical(first))
        passage = "\n".join(v[1] for v in verses[k:k + n])
        out["repetitive"].append(passage + "\n" + " ".join(verses[k][1].split()[:4]))
    return out


def run(g4, model, prompt, n, flags, threads):
    cmd = [g4, "run", "--model", model, "--prompt", prompt, "-n", str(n), "--ignore-eos", "--json",
           "--threads", str(threads)] + flags
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(p.stdout.strip().splitlines()[-1])
    j["tok_s"] = float(TOKS.search(p.stderr).group(1))
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g4", default=os.path.join(corpus.ROOT, "build", "g4"))
    assets = os.environ.get("G4_ASSETS", os.path.join(corpus.ROOT, "assets"))
    ap.add_argument("--model", default=os.path.join(assets, "models", "default"))
    ap.add_argument("--draft", default=os.path.join(assets, "models", "default-assistant"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--held-out", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--variants", default="mtp1,mtp2,mtp3,mtp4,ngram",
                    help="besides plain: mtpK (--draft-max K), mtpK@P (and --draft-p-min P), "
                         "either with :q8 or :q4 (--draft-quant), ngram")
    args = ap.parse_args()
    variants = {"plain": []}
    for name in args.variants.split(","):
        m = re.fullmatch(r"mtp(\d+)(?:@([0-9.]+))?(?::(q8|q4))?|ngram", name)
        if not m:
            ap.error(f"unknown variant {name!r}")
        if name == "ngram":
            variants[name] = ["--spec", "ngram"]
            continue
        variants[name] = ["--spec", "mtp", "--draft", args.draft, "--draft-max", m.group(1)]
        if m.group(2):
            variants[name] += ["--draft-p-min", m.group(2)]
        if m.group(3):
            variants[name] += ["--draft-quant", m.group(3)]
    sets = prompts(args.held_out)
    load = [os.getloadavg()[0]]
    results = {}
    for task, ps in sets.items():
        per = {v: {"tok_s": [], "accepted": 0, "drafted": 0, "per_pass": [], "same": True}
               for v in variants}
        plain_ids = {}
        for rep in range(args.reps):
            # Rotate the order each repetition so that no variant always runs first.
            names = list(variants)
            names = names[rep % len(names):] + names[:rep % len(names)]
            seconds = {v: 0.0 for v in names}
            tokens = {v: 0 for v in names}
            for pi, prompt in enumerate(ps):
                for v in names:
                    j = run(args.g4, args.model, prompt, args.n, variants[v], args.threads)
                    decoded = len(j["ids"]) - 1
                    seconds[v] += decoded / j["tok_s"]
                    tokens[v] += decoded
                    if v == "plain":
                        plain_ids.setdefault(pi, j["ids"])
                        per[v]["same"] &= plain_ids[pi] == j["ids"]
                    if "speculative" in j and rep == 0:
                        s = j["speculative"]
                        per[v]["accepted"] += s["accepted"]
                        per[v]["drafted"] += s["drafted"]
                        per[v]["per_pass"].append(s["tokens_per_target_pass"])
                    if v != "plain":
                        per[v]["_ids"] = per[v].get("_ids", {})
                        per[v]["_ids"].setdefault(pi, []).append(j["ids"])
            for v in names:
                per[v]["tok_s"].append(tokens[v] / seconds[v])
            load.append(os.getloadavg()[0])
        rows = {}
        base = statistics.median(per["plain"]["tok_s"])
        for v, d in per.items():
            same = d["same"]
            for pi, runs in d.get("_ids", {}).items():
                same &= all(r == plain_ids[pi] for r in runs)
            med = statistics.median(d["tok_s"])
            row = {"tok_s_median": round(med, 2), "tok_s": [round(x, 2) for x in d["tok_s"]],
                   "speedup": round(med / base, 3), "identical_to_plain": same}
            if d["drafted"]:
                row["acceptance"] = round(d["accepted"] / d["drafted"], 4)
                row["tokens_per_target_pass"] = round(statistics.mean(d["per_pass"]), 3)
            rows[v] = row
        results[task] = {"prompts": len(ps), "rows": rows}
        print(f"{task} ({len(ps)} prompts, {args.n} tokens each, {args.reps} reps, threads {args.threads})")
        for v, r in rows.items():
            extra = (f"  acceptance {100 * r['acceptance']:5.1f}%  tokens/pass {r['tokens_per_target_pass']:.2f}"
                     if "acceptance" in r else "")
            print(f"  {v:9s} {r['tok_s_median']:8.2f} tok/s  {r['speedup']:.2f}x  identical {r['identical_to_plain']}{extra}")
    results["load_average"] = [round(x, 2) for x in load]
    print("load average (1 min) during the run:", results["load_average"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
