#!/usr/bin/python3
"""The assistant drafter's step cost on the trained pair, g4 binaries alternated (ABBA: the box is
shared and noisy). Per binary and round: a plain greedy `g4 run` (ms per token) and the same with
`--spec mtp --draft-max 1` (one draft step per proposal, so a draft step costs drafting seconds /
drafts). Reported: medians over the rounds, the draft step as a share of a plain step, the load
average, and whether every output equals the plain one token for token.

usage: G4_ASSETS=assets /usr/bin/python3 tools/default_model/draft_cost.py \\
           [--rounds 6] [--threads 1] [--n 200] old=/tmp/g4.old new=build/g4
"""
import argparse
import json
import os
import re
import statistics
import subprocess

PROMPT = ("In the beginning God created the heaven and the earth. And the earth was without form, "
          "and void")


def run(g4, assets, n, threads, flags):
    cmd = [g4, "run", "--model", os.path.join(assets, "models", "default"), "--prompt", PROMPT,
           "-n", str(n), "--ignore-eos", "--json", "--threads", str(threads)] + flags
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    tok_s = float(re.search(r"decode ([0-9.]+) tok/s", p.stderr).group(1))
    return tok_s, json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("binaries", nargs="+", help="NAME=PATH, alternated in this order and back")
    args = ap.parse_args()
    assets = os.environ.get("G4_ASSETS", "assets")
    draft = os.path.join(assets, "models", "default-assistant")
    spec = ["--spec", "mtp", "--draft", draft, "--draft-max", "1"]
    bins = [b.split("=", 1) for b in args.binaries]
    keys = ("plain_tok_s", "plain_ms", "draft_us", "share", "mtp1_tok_s")
    res = {name: {k: [] for k in keys} for name, _ in bins}
    plain_ids, same, loads = None, True, [os.getloadavg()[0]]
    for r in range(args.rounds):
        for name, g4 in (bins if r % 2 == 0 else bins[::-1]):
            plain, pj = run(g4, assets, args.n, args.threads, [])
            mtp, sj = run(g4, assets, args.n, args.threads, spec)
            s = sj["speculative"]
            draft_us = 1e6 * s["draft_time_share"] * (args.n - 1) / mtp / s["drafted"]
            for k, v in zip(keys, (plain, 1e3 / plain, draft_us, draft_us / (1e6 / plain), mtp)):
                res[name][k].append(v)
            plain_ids = plain_ids or pj["ids"]
            same = same and pj["ids"] == plain_ids and sj["ids"] == plain_ids
        loads.append(os.getloadavg()[0])
    print(f"{args.rounds} rounds, --threads {args.threads}, -n {args.n}, load average (1 min) "
          f"{min(loads):.1f}-{max(loads):.1f}; outputs {'all' if same else 'NOT all'} the plain ones")
    for name, _ in bins:
        m = {k: statistics.median(v) for k, v in res[name].items()}
        print(f"{name}: plain {m['plain_tok_s']:.1f} tok/s ({m['plain_ms']:.2f} ms/token); draft "
              f"step {m['draft_us']:.0f} us = {100 * m['share']:.1f}% of a plain step; mtp, 1 draft: "
              f"{m['mtp1_tok_s']:.1f} tok/s")


if __name__ == "__main__":
    main()
