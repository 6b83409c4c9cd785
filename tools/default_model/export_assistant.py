#!/usr/bin/python3
"""Exports the trained assistant drafter (train_assistant.py) in the tracked compact form
(models/default-assistant/, expanded by expand_assistant.js) and writes the reference the C++
test checks the engine against: chained drafts from the PyTorch module (float64 activations,
the exported bf16 weights, the target's tracked weights, the centroid head as g4 computes it).

usage: /usr/bin/python3 tools/default_model/export_assistant.py [--trained build/default_assistant/trained.pt]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import assistant_tiny as A  # noqa: E402
import corpus  # noqa: E402
import gemma4_tiny as G  # noqa: E402
import st_io  # noqa: E402
from train_assistant import BOS, split  # noqa: E402
from train_chat import load_compact  # noqa: E402

OUT = os.path.join(corpus.ROOT, "models", "default-assistant")
SHARD_LIMIT = 4 << 20
DRAFT = 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trained", default=os.path.join(corpus.ROOT, "build", "default_assistant", "trained.pt"))
    ap.add_argument("--held-out-prompts", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(2)
    st = torch.load(args.trained)
    acfg, tcfg, vocab = st["config"], st["target_config"], st["vocab"]
    W = {n: G.bf16_round(t.float()) for n, t in st["weights"].items()}
    Vc = len(vocab)
    ordering = st["ordering"]
    E, C = W["model.embed_tokens.weight"], W["masked_embedding.centroids.weight"]
    nu = C.shape[0] - 1
    # The compact tables index the target's vocabulary in its order; the ordering lists them by cluster.
    tensors = {
        "vocab_ids": ("I32", np.array(vocab, dtype=np.int32)),
        "embed_rows": ("BF16", E[:Vc].numpy()),
        "null_embed": ("BF16", E[Vc].numpy()),
        "used_ordering": ("I32", ordering[:Vc].numpy().astype(np.int32)),
        "centroid_rows": ("BF16", C[:nu].numpy()),
        "null_centroid": ("BF16", C[nu].numpy()),
    }
    for n, t in W.items():
        if n not in ("model.embed_tokens.weight", "masked_embedding.centroids.weight"):
            tensors[n] = ("BF16", t.numpy())
    os.makedirs(OUT, exist_ok=True)
    shard = "weights-00001-of-00001.safetensors"
    st_io.write(os.path.join(OUT, shard), tensors, {"format": "g4-default-assistant-compact"})
    assert os.path.getsize(os.path.join(OUT, shard)) < SHARD_LIMIT
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(A.hf_config(tcfg, acfg), f, indent=2)
        f.write("\n")
    s = st["summary"]
    manifest = {"shards": [shard], "model_safetensors_sha256": None,
                "training": {"steps": s["steps"], "train_seconds": s["train_seconds"],
                             "final_loss": s["final_loss"], "heldout_loss": s["heldout_loss"],
                             "heldout_prefix_acc": s["heldout_prefix_acc"]}}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    tmp = os.path.join(corpus.ROOT, "build", "default_assistant", "expanded")
    subprocess.run(["node", os.path.join(HERE, "expand_assistant.js"), "--out", tmp, "--no-verify"], check=True)
    manifest["model_safetensors_sha256"] = hashlib.sha256(open(os.path.join(tmp, "model.safetensors"), "rb").read()).hexdigest()
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")

    # The reference: read the expanded checkpoint back (what g4 loads), draft with the module.
    full, _ = st_io.read(os.path.join(tmp, "model.safetensors"))
    order = torch.from_numpy(full["masked_embedding.token_ordering"])
    assert torch.equal(order, ordering), "expanded token_ordering differs from the trained one"
    assert np.array_equal(full["model.embed_tokens.weight"][vocab], E[:Vc].numpy())
    tvocab, TW, _ = load_compact(os.path.join(corpus.ROOT, "models", "default"), tcfg)
    drafter = A.Drafter(acfg, W, vocab, ordering, tcfg, TW, tvocab)
    cluster_rows = drafter.cluster_row
    assert np.array_equal(full["masked_embedding.centroids.weight"], C[cluster_rows].numpy())
    data = corpus.build()
    _, held = split(data)
    prompts = [("test:" + p["ref"], [BOS] + p["prompt_ids"]) for p in data["prompts"][:4]]
    step = max(1, len(held) // args.held_out_prompts)
    for i in held[::step][:args.held_out_prompts]:
        ids = data["verse_ids"][i]
        prompts.append(("held_out:" + data["verses"][i][0], [BOS] + ids[:max(2, len(ids) // 2)]))
    cases, noise = [], 0.0
    for name, ids in prompts:
        toks, logits = drafter.draft(ids, DRAFT, torch.float64)
        toks32, logits32 = drafter.draft(ids, DRAFT, torch.float32)
        steps = []
        for k, l in enumerate(logits):
            v, i = torch.topk(l, 20)
            steps.append({"token": toks[k], "top_ids": i.tolist(), "top_logits": [round(float(x), 7) for x in v],
                          "gap": round(float(v[0] - v[1]), 6)})
            if toks32[:k + 1] == toks[:k + 1]:
                noise = max(noise, float((logits32[k].double()[i] - v).abs().max()))
        cases.append({"name": name, "ids": ids, "draft": toks, "steps": steps, "float32_same": toks32 == toks})
    ref = {"draft_tokens": DRAFT, "cases": cases, "float32_vs_float64_max_abs_diff": noise}
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: sha256 {manifest['model_safetensors_sha256']}; float32 noise {noise:.2e}; "
          f"drafts: " + "; ".join(f"{c['name']} {c['draft']}" for c in cases))


if __name__ == "__main__":
    main()
