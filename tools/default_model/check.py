#!/usr/bin/python3
"""Independent check of the EXPANDED default model: loads DIR/model.safetensors with numpy (own
safetensors reader), runs the PyTorch Gemma-4 module over the full 262,144-token vocabulary in
float64, and compares with models/default/reference.json (teacher-forced logits and greedy runs).

usage: /usr/bin/python3 tools/default_model/check.py [DIR]   (default: assets/models/default)
Exit status 0 when everything matches.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gemma4_tiny as G  # noqa: E402
import st_io  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TOL = 1e-6  # the reference was written by the same code; only JSON rounding (1e-6) separates them


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("G4_ASSETS", os.path.join(ROOT, "assets")), "models", "default")
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(d, "config.json")))["text_config"]
    tensors, _ = st_io.read(os.path.join(d, "model.safetensors"))
    W = {}
    for n, a in tensors.items():
        assert n.startswith(G.PREFIX), n
        W[n[len(G.PREFIX):]] = torch.from_numpy(a.copy())
    expected = {G.PREFIX + n: tuple(s) for n, s in G.dense_shapes(cfg).items()}
    L, P, H, V = cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"], cfg["hidden_size"], cfg["vocab_size"]
    expected[G.PREFIX + "embed_tokens.weight"] = (V, H)
    expected[G.PREFIX + "embed_tokens_per_layer.weight"] = (V, L * P)
    got = {n: tuple(a.shape) for n, a in tensors.items()}
    if got != expected:
        print("tensor set/shapes differ:", set(got.items()) ^ set(expected.items()))
        return 1
    ref = json.load(open(os.path.join(ROOT, "models", "default", "reference.json")))
    sample = torch.tensor(ref["sample_ids"])
    bad = 0
    worst = 0.0
    for s in ref["sequences"]:
        ids = torch.tensor(s["ids"])[None]
        lg = G.forward(cfg, W, ids, dtype=torch.float64)[0]
        for t, p in enumerate(s["positions"]):
            top = torch.topk(lg[t], len(p["top_ids"]))
            if top.indices.tolist() != p["top_ids"]:
                print(f"{s['ref']} pos {t}: top ids differ")
                bad += 1
            d1 = (top.values - torch.tensor(p["top_logits"], dtype=torch.float64)).abs().max().item()
            d2 = (lg[t, sample] - torch.tensor(p["sample_logits"], dtype=torch.float64)).abs().max().item()
            worst = max(worst, d1, d2)
    for g in ref["greedy"]:
        ids = list(g["prompt_ids"])
        out = []
        for _ in range(len(g["greedy_ids"])):
            t = int(torch.argmax(G.forward(cfg, W, torch.tensor(ids)[None], dtype=torch.float64, last_only=True)[0, -1]))
            out.append(t)
            ids.append(t)
        status = "ok" if out == g["greedy_ids"] else "MISMATCH"
        if out != g["greedy_ids"]:
            bad += 1
        n = len(g["expected_ids"])
        print(f"{status:8s} {g['ref']:9s} verse {'correct' if out[:n] == g['expected_ids'] else 'WRONG'}: "
              f"{g['prompt']}{g['greedy_text']!r}")
    for c in ref.get("chat", []):
        ids = list(c["prompt_ids"])
        out = []
        while len(out) < len(c["greedy_ids"]):
            t = int(torch.argmax(G.forward(cfg, W, torch.tensor(ids)[None], dtype=torch.float64, last_only=True)[0, -1]))
            out.append(t)
            ids.append(t)
        same = out == c["greedy_ids"]
        bad += (not same) + (not c["ended"])
        print(f"{'ok' if same else 'MISMATCH':8s} chat {'ends its turn' if c['ended'] else 'DOES NOT END'}: "
              f"{c['question']!r} -> {c['greedy_text']!r}")
    print(f"max |logit - reference| = {worst:.2e} (tolerance {TOL:g})")
    if worst > TOL:
        bad += 1
    print("check.py:", "PASS" if bad == 0 else f"FAIL ({bad})")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
