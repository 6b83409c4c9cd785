#!/usr/bin/python3
"""Fine-tunes the default model to chat: starts from the tracked compact weights
(models/default/), adds the chat token ids to the trained vocabulary and trains on a mix of raw
verses (as train.py, to keep recitation) and conversations in the Gemma-4 turn format (chat.py).

usage: /usr/bin/python3 tools/default_model/train_chat.py [--minutes 18] [--out build/default_model]
Writes OUT/trained.pt in train.py's format (export.py reads it) plus OUT/chat_split.json (the
held-out questions for chat_eval.py). One CPU thread.

New ids (<|turn>, <turn|>, "user", "model", the question words, ...) start from the shared null
row, which is what the model computed for them before, so step 0 is the shipped model.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat  # noqa: E402
import corpus  # noqa: E402
import gemma4_tiny as G  # noqa: E402
import st_io  # noqa: E402
import train  # noqa: E402

BOS, NL = 2, 107


def load_compact(src, cfg):
    """models/default/ compact shards -> (vocab ids, weights dict with [Vc+1]-row tables)."""
    manifest = json.load(open(os.path.join(src, "manifest.json")))
    t = {}
    for s in manifest["shards"]:
        t.update(st_io.read(os.path.join(src, s))[0])
    vocab = [int(i) for i in t["vocab_ids"]]
    W = {n[len(G.PREFIX):]: torch.from_numpy(np.array(a, dtype=np.float32))
         for n, a in t.items() if n.startswith(G.PREFIX)}
    W["embed_tokens.weight"] = torch.from_numpy(np.concatenate([t["embed_rows"], t["null_embed"][None]]).astype(np.float32))
    W["embed_tokens_per_layer.weight"] = torch.from_numpy(np.concatenate([t["ple_rows"], t["null_ple"][None]]).astype(np.float32))
    assert set(W) == set(G.dense_shapes(cfg)) | {"embed_tokens.weight", "embed_tokens_per_layer.weight"}
    return vocab, W, manifest


def widen_vocab(W, old, new):
    """Re-index the tables from vocabulary `old` to the superset `new`; new ids get the null row."""
    pos = {t: k for k, t in enumerate(old)}
    for n in ("embed_tokens.weight", "embed_tokens_per_layer.weight"):
        tab = W[n]
        null = len(old)
        W[n] = torch.stack([tab[pos.get(t, null)] for t in new] + [tab[null]]).contiguous()


def trainable(cfg, W):
    plan = G.Plan(cfg)
    out = []
    for n, t in W.items():
        unused = any(n == f"layers.{i}.self_attn.{w}" for i in range(cfg["num_hidden_layers"])
                     if plan.shared(i) for w in ("k_proj.weight", "v_proj.weight", "k_norm.weight"))
        if n.endswith("layer_scalar") or unused:
            continue
        t.requires_grad_(True)
        out.append(t)
    return out


def chat_pool(data, rng, n_pairs):
    """Encoded training conversations (held-out verses excluded), grouped by kind, and the
    held-out questions."""
    qs = chat.questions(data)
    train_q = [q for q in qs if not q["held_out"]]
    convs = [[(q["question"], q["answer"])] for q in train_q]
    for _ in range(n_pairs):  # two-turn conversations: the model must end its turn again
        a, b = rng.choice(train_q), rng.choice(train_q)
        convs.append([(a["question"], a["answer"]), (b["question"], b["answer"])])
    enc = chat.encode(convs)
    pool = {"ref": [], "continue": [], "book": [], "continue_focus": [], "book_focus": [], "pair": [],
            "test_verses": []}
    test_refs = {p["ref"] for p in data["prompts"]}
    for k, q in enumerate(train_q):
        pool[q["kind"]].append(enc[k])
        if q["focus"] and q["kind"] != "ref":
            pool[q["kind"] + "_focus"].append(enc[k])
        if q["ref"] in test_refs:  # the verses of the README and the tests, all three kinds
            pool["test_verses"].append(enc[k])
    pool["pair"] = enc[len(train_q):]
    return pool, [q for q in qs if q["held_out"]], qs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=18.0)
    ap.add_argument("--out", default=os.path.join(corpus.ROOT, "build", "default_model"))
    ap.add_argument("--src", default=os.path.join(corpus.ROOT, "models", "default"))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--chat-share", type=float, default=0.5, help="share of each batch that is chat")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--focus", type=float, default=0.7, help="share of raw sequences from FOCUS chapters")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--mix", default="ref=0.25,continue=0.15,continue_focus=0.15,book=0.12,book_focus=0.13,pair=0.2",
                    help="weights of the kinds of chat sample (chat_pool)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/trained.pt (fresh optimizer)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    data = corpus.build()
    cfg = G.default_config()
    old_vocab, W, manifest = load_compact(args.src, cfg)
    pool, held, allq = chat_pool(data, rng, args.pairs)
    chat_ids = {i for k in pool for ids, _ in pool[k] for i in ids}
    vocab = sorted(set(old_vocab) | chat_ids)
    widen_vocab(W, old_vocab, vocab)
    prev = {"steps": manifest["training"]["steps"], "train_seconds": manifest["training"]["train_seconds"], "log": []}
    if args.resume:
        prev = torch.load(os.path.join(args.out, "trained.pt"))
        assert prev["vocab"] == vocab and prev["config"] == cfg
        with torch.no_grad():
            for n, t in W.items():
                t.copy_(prev["weights"][n])
        print(f"resuming after {prev['steps']} steps", flush=True)
    Vc = len(vocab)
    to_c = {t: k for k, t in enumerate(vocab)}
    print(f"vocabulary {len(old_vocab)} -> {Vc} ids; chat pool sizes "
          f"{ {k: len(v) for k, v in pool.items()} }; held-out questions {len(held)}", flush=True)
    with open(os.path.join(args.out, "chat_split.json"), "w") as f:
        json.dump({"held_out": held, "trained": [q for q in allq if not q["held_out"]]}, f)

    stream, starts = [], []
    for v in data["verse_ids"]:
        starts.append(len(stream))
        stream += [to_c[i] for i in v] + [to_c[NL]]
    stream = torch.tensor(stream + stream[:args.seq + 1])
    focus = data["focus"]
    log_unused = math.log(cfg["vocab_size"] - Vc)

    params = trainable(cfg, W)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.0)
    B, T = args.batch, args.seq
    n_chat = round(B * args.chat_share)
    kinds = [(k, float(w)) for k, w in (kw.split("=") for kw in args.mix.split(","))]
    assert all(k in pool for k, _ in kinds), args.mix
    budget = args.minutes * 60.0
    t0 = time.time()
    step0 = prev["steps"]
    step, hist, log = step0, [], list(prev["log"])
    t_base = prev["train_seconds"]
    while time.time() - t0 < budget:
        frac = (time.time() - t0) / budget
        lr = args.lr * min(1.0, (step - step0 + 1) / args.warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gp in opt.param_groups:
            gp["lr"] = lr
        rows = []
        for b in range(B - n_chat):  # raw verses, as train.py
            v = rng.choice(focus) if rng.random() < args.focus else rng.randrange(len(starts))
            s = int(starts[v])
            if rng.random() < 0.85:
                rows.append(([to_c[BOS]] + stream[s:s + T - 1].tolist(), stream[s:s + T].tolist()))
            else:
                rows.append((stream[s:s + T].tolist(), stream[s + 1:s + T + 1].tolist()))
        for b in range(n_chat):
            kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
            ids, tgt = rng.choice(pool[kind])
            rows.append(([to_c[i] for i in ids], [to_c[i] if i >= 0 else -100 for i in tgt]))
        Tm = max(len(r[0]) for r in rows)
        inp = torch.full((B, Tm), to_c[BOS], dtype=torch.long)
        tgt = torch.full((B, Tm), -100, dtype=torch.long)
        for b, (i, t) in enumerate(rows):
            inp[b, :len(i)] = torch.tensor(i)
            tgt[b, :len(t)] = torch.tensor(t)
        logits = G.forward(cfg, W, inp)
        logits = torch.cat([logits[..., :Vc], logits[..., Vc:] + log_unused], -1)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, Vc + 1), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        hist.append(loss.item())
        step += 1
        if step % 10 == 0:
            m = sum(hist[-10:]) / 10
            el = time.time() - t0
            log.append({"step": step, "seconds": round(t_base + el, 1), "loss": round(m, 4), "lr": lr})
            print(f"step {step} t={el:.0f}s loss {m:.4f} lr {lr:.2e}", flush=True)
        if step % 50 == 0:
            train.save(args.out, cfg, W, vocab, data, log, step, t_base + time.time() - t_start, hist, final=False)
    train.save(args.out, cfg, W, vocab, data, log, step, t_base + time.time() - t_start, hist, final=True)


if __name__ == "__main__":
    main()
