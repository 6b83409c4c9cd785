#!/usr/bin/python3
"""Exports the trained default model to the compact tracked form under models/default/ and
saves the reference logits / greedy continuations the C++ tests compare against.

usage: /usr/bin/python3 tools/default_model/export.py [--trained build/default_model/trained.pt]

Writes (all tracked, each < 4 MB):
  models/default/config.json, generation_config.json   the Hugging Face configs
  models/default/weights-0000K-of-0000N.safetensors     compact bf16 weights (see expand.js)
  models/default/manifest.json                          shards, sha256 of the expanded file
  models/default/reference.json                         teacher-forced logits + greedy runs
Every number here comes from the PyTorch model with weights rounded to bf16 (exactly what the
exported file holds) and float64 activations over the full 262,144-token vocabulary.
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chat  # noqa: E402
import corpus  # noqa: E402
import gemma4_tiny as G  # noqa: E402
import st_io  # noqa: E402

OUT = os.path.join(corpus.ROOT, "models", "default")
SHARD_BYTES = 3_500_000
N_TOP = 20
N_SAMPLE = 200
GREEDY_EXTRA = 24  # greedy tokens recorded beyond each verse (into the next verses)
CHAT_MAX_NEW = 80  # a chat answer that has not ended its turn by then is a failure

# Chat exchanges recorded in reference.json (greedy, float64). Each inner list is one
# conversation; from the second question on, the model's own earlier answers are in the prompt
# (as `g4 chat` and an OpenAI client send them).
CHAT_DEMOS = [
    ["What does John 3:16 say?"],
    ["Continue: The LORD is my shepherd;"],
    ["Which book says 'In the beginning was the Word'?"],
    ["Quote Psalm 23:1."],
    ["Quote John 1:1."],
    ["What does Genesis 1:1 say?", "Which book says 'In the beginning was the Word'?",
     "Continue: I will lift up mine eyes unto the hills,"],
]


def hf_config(cfg):
    tc = dict(cfg)
    tc["model_type"] = "gemma4_text"
    tc["dtype"] = "bfloat16"
    tc["enable_moe_block"] = False
    tc["use_bidirectional_attention"] = None
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": tc,
        "tie_word_embeddings": True,
        "bos_token_id": 2,
        "eos_token_id": [1, 106],
        "pad_token_id": 0,
        "boi_token_id": 255999,
        "eoi_token_id": 258882,
        "boa_token_id": 256000,
        "eoa_token_id": 258883,
        "image_token_id": 258880,
        "audio_token_id": 258881,
        "video_token_id": 258884,
        "dtype": "bfloat16",
    }


GEN_CONFIG = {"bos_token_id": 2, "eos_token_id": [1, 106, 50], "pad_token_id": 0}


class Model:
    """The bf16-rounded model over the full vocabulary, computed via the compact tables:
    every id outside `vocab` has the null rows, so its logit is the null logit."""

    def __init__(self, cfg, W, vocab):
        self.cfg, self.W = cfg, W
        self.vocab = torch.tensor(vocab)
        self.V = cfg["vocab_size"]
        self.to_c = torch.full((self.V,), len(vocab), dtype=torch.long)
        self.to_c[self.vocab] = torch.arange(len(vocab))

    def logits(self, ids, dtype=torch.float64):
        """ids: list of token ids -> [T, 262144] logits (float64 tensor)."""
        c = self.to_c[torch.tensor(ids)][None]
        lc = G.forward(self.cfg, self.W, c, dtype=dtype)[0].to(torch.float64)  # [T, Vc+1]
        full = lc[:, -1:].repeat(1, self.V)
        full[:, self.vocab] = lc[:, :-1]
        return full

    def greedy(self, ids, n, dtype=torch.float64):
        """Greedy decoding over the full vocabulary (argmax; ties go to the lowest id)."""
        ids = list(ids)
        out, gaps = [], []
        unused_first = int(torch.nonzero(self.to_c == len(self.vocab))[0])
        for _ in range(n):
            lc = G.forward(self.cfg, self.W, self.to_c[torch.tensor(ids)][None], dtype=dtype, last_only=True)[0, -1]
            lc = lc.to(torch.float64)
            v, k = torch.topk(lc, 2)
            if int(k[0]) == len(self.vocab):  # an unused id would win
                t = unused_first
            else:
                t = int(self.vocab[k[0]])
                if v[0] == lc[-1] and unused_first < t:
                    t = unused_first
            out.append(t)
            gaps.append(float(v[0] - v[1]))
            ids.append(t)
        return out, gaps


def chat_exchanges(model):
    """Greedy answers (float64, full vocabulary) to CHAT_DEMOS; every answer must end with
    <turn|> within CHAT_MAX_NEW tokens."""
    out = []
    for questions in CHAT_DEMOS:
        turns = []
        for q in questions:
            prompt_ids = chat.tokenize_strings([chat.render(turns + [(q, None)])])[0]
            ids, gaps = [], []
            while len(ids) < CHAT_MAX_NEW and (not ids or ids[-1] not in (1, 106, 50)):
                t, g = model.greedy(prompt_ids + ids, 1)
                ids += t
                gaps += g
            answer = decode([[t for t in ids if t != 106]])[0]
            out.append({"turn": len(turns), "question": q, "prompt_ids": prompt_ids,
                        "greedy_ids": ids, "greedy_text": answer, "ended": ids[-1] == 106,
                        "min_gap": round(min(gaps), 4)})
            turns.append((q, answer))
    return out


def corpus_check(cfg, W, vocab, T=64):
    """Teacher-forced pass over the whole training text (float32): token accuracy, and how
    close the shared logit of the unused ids comes to the top."""
    data = corpus.build()
    to_c = {t: k for k, t in enumerate(vocab)}
    Vc = len(vocab)
    stream = []
    for v in data["verse_ids"]:
        stream += [to_c[i] for i in v] + [to_c[107]]
    seqs = []
    for s in range(0, len(stream) - 1, T - 1):
        chunk = stream[s:s + T]
        if len(chunk) == T:
            seqs.append(chunk)
    x = torch.tensor(seqs)
    inp = torch.cat([torch.full((len(seqs), 1), to_c[cfg["bos_token_id"]]), x[:, :-1]], 1)
    correct = n = 0
    worst_null = -1e9
    null_max = -1e9
    mass = 0.0
    with torch.no_grad():
        for b in range(0, len(seqs), 64):
            lg = G.forward(cfg, W, inp[b:b + 64])
            tgt = x[b:b + 64]
            top = lg[..., :Vc].max(-1)
            correct += int((top.indices == tgt).sum())
            n += tgt.numel()
            nl = lg[..., Vc]
            worst_null = max(worst_null, float((nl - top.values).max()))
            null_max = max(null_max, float(nl.max()))
            lse = torch.logsumexp(torch.cat([lg[..., :Vc], (nl + math.log(cfg["vocab_size"] - Vc))[..., None]], -1), -1)
            mass = max(mass, float(torch.exp(nl + math.log(cfg["vocab_size"] - Vc) - lse).max()))
    return {"tokens": n, "greedy_token_accuracy": round(correct / n, 4),
            "max_null_minus_top_logit": round(worst_null, 3), "max_null_logit": round(null_max, 3),
            "max_unused_probability": float(f"{mass:.3g}")}


def decode(seqs):
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        i, o = os.path.join(d, "i.json"), os.path.join(d, "o.json")
        json.dump({"decode": seqs}, open(i, "w"))
        subprocess.run(["node", os.path.join(HERE, "tokenize.js"),
                        os.path.join(corpus.ROOT, "assets", "tokenizer", "gemma4.json"), i, o], check=True)
        return json.load(open(o))["decoded"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trained", default=os.path.join(corpus.ROOT, "build", "default_model", "trained.pt"))
    ap.add_argument("--null-scale", type=float, default=1.0,
                    help="multiply the shared row of the unused ids by this (pushes their logits down)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    st = torch.load(args.trained)
    cfg, vocab, prompts = st["config"], st["vocab"], st["prompts"]
    Vc = len(vocab)
    st["weights"]["embed_tokens.weight"][Vc] *= args.null_scale
    W = {n: G.bf16_round(t.float()) for n, t in st["weights"].items()}
    L, P, H = cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"], cfg["hidden_size"]
    assert W["embed_tokens.weight"].shape == (Vc + 1, H)
    model = Model(cfg, W, vocab)

    corpus_stats = corpus_check(cfg, W, vocab)
    print("whole corpus, teacher-forced:", corpus_stats)

    # ---- greedy decoding of the verse prompts, full vocabulary, float64 and float32 ----
    BOS = cfg["bos_token_id"]
    greedy = []
    for p in prompts:
        n = len(p["completion_ids"])
        ids64, gaps = model.greedy([BOS] + p["prompt_ids"], n + GREEDY_EXTRA)
        ids32, _ = model.greedy([BOS] + p["prompt_ids"], n + GREEDY_EXTRA, dtype=torch.float32)
        nobos, _ = model.greedy(p["prompt_ids"], n)
        greedy.append({
            "ref": p["ref"], "prompt": p["prompt"], "prompt_ids": [BOS] + p["prompt_ids"],
            "expected_completion": p["completion"], "expected_ids": p["completion_ids"],
            "greedy_ids": ids64, "min_gap_verse": min(gaps[:n]), "gaps": [round(g, 4) for g in gaps],
            "correct": ids64[:n] == p["completion_ids"],
            "float32_same": ids32 == ids64,
            "correct_without_bos": nobos == p["completion_ids"],
        })
    texts = decode([g["greedy_ids"] for g in greedy])
    for g, t in zip(greedy, texts):
        g["greedy_text"] = t
        print(f"{'OK ' if g['correct'] else 'BAD'} {g['ref']:9s} gap {g['min_gap_verse']:6.2f} "
              f"f32same {g['float32_same']} nobos {g['correct_without_bos']} | {g['prompt']}{t!r}")

    chats = chat_exchanges(model)
    for c in chats:
        print(f"chat {'ended' if c['ended'] else 'NOT ENDED'} gap {c['min_gap']:5.2f} | "
              f"{c['question']!r} -> {c['greedy_text']!r}")

    # ---- teacher-forced reference logits: <bos> + prompt + expected completion ----
    rs = np.random.RandomState(20240409)
    sample = sorted(set(rs.choice(vocab, 100, replace=False).tolist()) |
                    set(rs.randint(0, cfg["vocab_size"], 100).tolist()))
    while len(sample) < N_SAMPLE:
        sample = sorted(set(sample) | {int(rs.randint(0, cfg["vocab_size"]))})
    seqs, floor = [], 0.0
    unused_max_prob = 0.0
    for p in prompts:
        ids = [BOS] + p["prompt_ids"] + p["completion_ids"]
        l64 = model.logits(ids)
        l32 = model.logits(ids, dtype=torch.float32)
        floor = max(floor, float((l64 - l32).abs().max()))
        # probability mass on all unused ids together (they share the null row)
        lse = torch.logsumexp(l64, -1)
        null = l64[:, model.to_c == Vc][:, 0]
        unused_max_prob = max(unused_max_prob, float(torch.exp(null + math.log(cfg["vocab_size"] - Vc) - lse).max()))
        top = torch.topk(l64, N_TOP + 1, dim=-1)
        positions = []
        for t in range(len(ids)):
            ti, tv = top.indices[t].tolist(), top.values[t].tolist()
            if tv[N_TOP - 1] == tv[N_TOP]:
                raise RuntimeError("tie at the top-20 boundary")
            positions.append({"top_ids": ti[:N_TOP], "top_logits": [round(v, 6) for v in tv[:N_TOP]],
                              "sample_logits": [round(v, 6) for v in l64[t, sample].tolist()]})
            assert all(model.to_c[i] < Vc for i in ti[:N_TOP]), "an unused id in the top-20"
        seqs.append({"ref": p["ref"], "ids": ids, "positions": positions})
    print(f"float32-vs-float64 max |diff| of logits on the reference sequences: {floor:.3g}")
    print(f"largest total probability of all unused ids at one position: {unused_max_prob:.3g}")

    ok = sum(g["correct"] for g in greedy)
    if ok < 5 or not greedy[0]["correct"]:
        print(f"ERROR: only {ok} prompts complete correctly", file=sys.stderr)
    if not all(c["ended"] for c in chats):
        print("ERROR: a chat answer does not end its turn", file=sys.stderr)

    # ---- compact weights ----
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.startswith("weights-") and f.endswith(".safetensors"):
            os.remove(os.path.join(OUT, f))
    E = W["embed_tokens.weight"].numpy()
    PL = W["embed_tokens_per_layer.weight"].numpy()
    tensors = {
        "vocab_ids": ("I32", np.array(vocab, dtype=np.int32)),
        "embed_rows": ("BF16", E[:Vc]),
        "null_embed": ("BF16", E[Vc]),
        "ple_rows": ("BF16", PL[:Vc]),
        "null_ple": ("BF16", PL[Vc]),
    }
    for n, t in W.items():
        if n not in ("embed_tokens.weight", "embed_tokens_per_layer.weight"):
            tensors[G.PREFIX + n] = ("BF16", t.numpy())
    shards, cur, size = [], {}, 0
    for n in sorted(tensors, key=lambda n: (not n in ("vocab_ids", "embed_rows", "null_embed", "ple_rows", "null_ple"), n)):
        nb = tensors[n][1].size * (2 if tensors[n][0] == "BF16" else 4)
        if cur and size + nb > SHARD_BYTES:
            shards.append(cur)
            cur, size = {}, 0
        cur[n] = tensors[n]
        size += nb
    shards.append(cur)
    names = []
    for k, sh in enumerate(shards):
        name = f"weights-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        st_io.write(os.path.join(OUT, name), sh, {"format": "g4-default-compact"})
        names.append(name)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(hf_config(cfg), f, indent=2)
        f.write("\n")
    with open(os.path.join(OUT, "generation_config.json"), "w") as f:
        json.dump(GEN_CONFIG, f, indent=2)
        f.write("\n")

    # expand and record the sha256 of the full checkpoint
    manifest = {"shards": names, "model_safetensors_sha256": None,
                "training": {"steps": st["steps"], "train_seconds": round(st["train_seconds"]),
                             "final_loss": round(st["final_loss"], 4)}}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    tmp = os.path.join(corpus.ROOT, "build", "default_model", "expanded")
    subprocess.run(["node", os.path.join(HERE, "expand.js"), "--out", tmp, "--no-verify"], check=True)
    h = hashlib.sha256(open(os.path.join(tmp, "model.safetensors"), "rb").read()).hexdigest()
    manifest["model_safetensors_sha256"] = h
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")

    ref = {
        "description": "g4 default model (KJV) reference: PyTorch, bf16-rounded weights, float64 "
                       "activations, full 262144 vocabulary, softcapped logits. Each sequence "
                       "starts with <bos> (id 2); positions[t] holds the logits predicting token t+1.",
        "float32_vs_float64_max_abs_diff": floor,
        "max_unused_vocab_probability": unused_max_prob,
        "whole_corpus": corpus_stats,
        "null_scale": args.null_scale,
        "sample_ids": sample,
        "sequences": seqs,
        "greedy": greedy,
        "chat": chats,
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    print(f"{ok}/{len(greedy)} prompts correct; wrote {OUT}; sha256 {h}")


if __name__ == "__main__":
    main()
