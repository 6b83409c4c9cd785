#!/usr/bin/python3
"""Trains g4's default model: a tiny Gemma-4 text decoder (gemma4_tiny.py) that memorises KJV
Genesis, Psalms and John (Debian bible-kjv), tokenized with the real Gemma-4 tokenizer.

usage: /usr/bin/python3 tools/default_model/train.py [--minutes 25] [--out build/default_model]
Writes OUT/trained.pt (float32 weights + config + vocabulary + log). Then run export.py.

Training uses one CPU thread. The softmax is restricted to the corpus tokens plus one "null"
row that stands for every other vocabulary entry (all unused rows of the exported embedding are
this same row); the null logit gets + log(number of unused ids), so the loss is exactly the
cross-entropy of the full 262,144-token softmax.
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
import corpus  # noqa: E402
import gemma4_tiny as G  # noqa: E402

BOS, NL = 2, 107


def layer_scalars(L):
    # Fixed buffers (like HF's), far from 1.0 so that an engine that skips the multiply fails.
    return [G.bf16_scalar(0.9 - 0.3 * ((i * 7) % L) / (L - 1)) for i in range(L)]


def init_weights(cfg, Vc, seed):
    g = torch.Generator().manual_seed(seed)
    plan = G.Plan(cfg)
    H, L, P = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"]
    W = {}
    scal = layer_scalars(L)
    for n, s in G.dense_shapes(cfg).items():
        if n.endswith("layer_scalar"):
            W[n] = torch.tensor([scal[int(n.split(".")[1])]])
        elif n.endswith("q_norm.weight") or n.endswith("k_norm.weight"):
            W[n] = torch.full(s, s[0] ** -0.25)
        elif len(s) == 1:
            W[n] = torch.ones(s)
        else:
            W[n] = torch.randn(*s, generator=g) / math.sqrt(s[1])
    W["embed_tokens.weight"] = torch.randn(Vc + 1, H, generator=g) / math.sqrt(H)
    W["embed_tokens_per_layer.weight"] = torch.randn(Vc + 1, L * P, generator=g) * 0.1
    W["embed_tokens_per_layer.weight"][Vc] = 0.0
    trainable = []
    for n, t in W.items():
        unused = any(n == f"layers.{i}.self_attn.{w}" for i in range(L) if plan.shared(i)
                     for w in ("k_proj.weight", "v_proj.weight", "k_norm.weight"))
        if n.endswith("layer_scalar") or unused:
            continue
        t.requires_grad_(True)
        trainable.append(t)
    return W, trainable


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=25.0)
    ap.add_argument("--out", default=os.path.join(corpus.ROOT, "build", "default_model"))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--focus", type=float, default=0.5, help="share of sequences from FOCUS chapters")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--resume", action="store_true", help="continue from OUT/trained.pt (fresh optimizer)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)

    t_start = time.time()
    data = corpus.build()
    cfg = G.default_config()
    vocab = sorted({BOS, NL} | {i for v in data["verse_ids"] for i in v})
    Vc = len(vocab)
    to_c = {t: k for k, t in enumerate(vocab)}
    stream, starts = [], []
    for v in data["verse_ids"]:
        starts.append(len(stream))
        stream += [to_c[i] for i in v] + [to_c[NL]]
    stream = torch.tensor(stream + stream[:args.seq + 1])  # wrap around
    starts = np.array(starts)
    focus = data["focus"]
    n_unused = cfg["vocab_size"] - Vc
    log_unused = math.log(n_unused)
    print(f"corpus: {len(data['verses'])} verses, {len(stream) - args.seq - 1} tokens, "
          f"{Vc} distinct ids; focus verses {len(focus)}", flush=True)

    W, params = init_weights(cfg, Vc, args.seed)
    prev = {"steps": 0, "train_seconds": 0.0, "log": []}
    if args.resume:
        prev = torch.load(os.path.join(args.out, "trained.pt"))
        assert prev["vocab"] == vocab and prev["config"] == cfg
        with torch.no_grad():
            for n, t in W.items():
                t.copy_(prev["weights"][n])
        rng.seed(args.seed + prev["steps"])
        print(f"resuming after {prev['steps']} steps", flush=True)
    print(f"trainable params: {sum(p.numel() for p in params)}", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.0)
    bos_c = to_c[BOS]
    B, T = args.batch, args.seq
    budget = args.minutes * 60.0
    t0 = time.time()
    step, hist, log = prev["steps"], [], list(prev["log"])
    t_base = prev["train_seconds"]
    warm = args.warmup
    while True:
        frac = (time.time() - t0) / budget
        if frac >= 1.0:
            break
        lr = args.lr * min(1.0, (step - prev['steps'] + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        inp = torch.empty(B, T, dtype=torch.long)
        tgt = torch.empty(B, T, dtype=torch.long)
        for b in range(B):
            v = rng.choice(focus) if rng.random() < args.focus else rng.randrange(len(starts))
            s = int(starts[v])
            if rng.random() < 0.85:  # most sequences start with <bos> and a verse
                inp[b, 0] = bos_c
                inp[b, 1:] = stream[s:s + T - 1]
                tgt[b] = stream[s:s + T]
            else:
                inp[b] = stream[s:s + T]
                tgt[b] = stream[s + 1:s + T + 1]
        logits = G.forward(cfg, W, inp)  # [B, T, Vc+1], last column = null row
        logits = torch.cat([logits[..., :Vc], logits[..., Vc:] + log_unused], -1)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, Vc + 1), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        hist.append(loss.item())
        step += 1
        if step % 25 == 0:
            m = sum(hist[-25:]) / 25
            el = time.time() - t0
            log.append({"step": step, "seconds": round(t_base + el, 1), "loss": round(m, 4), "lr": lr})
            print(f"step {step} t={el:.0f}s loss {m:.4f} lr {lr:.2e}", flush=True)
        if step % 250 == 0:
            save(args.out, cfg, W, vocab, data, log, step, t_base + time.time() - t_start, hist, final=False)
    save(args.out, cfg, W, vocab, data, log, step, t_base + time.time() - t_start, hist, final=True)


def save(out, cfg, W, vocab, data, log, step, seconds, hist, final):
    # Final loss: mean of the last 50 steps (training batches, half of them from FOCUS chapters).
    state = {
        "config": cfg,
        "weights": {n: t.detach().clone() for n, t in W.items()},
        "vocab": vocab,
        "prompts": data["prompts"],
        "log": log,
        "steps": step,
        "train_seconds": seconds,
        "final_loss": sum(hist[-50:]) / max(1, len(hist[-50:])),
        "final": final,
        "argv": sys.argv,
    }
    torch.save(state, os.path.join(out, "trained.pt.tmp"))
    os.replace(os.path.join(out, "trained.pt.tmp"), os.path.join(out, "trained.pt"))
    if final:
        print(json.dumps({"steps": step, "seconds": round(seconds), "final_loss": state["final_loss"]}),
              flush=True)


if __name__ == "__main__":
    main()
