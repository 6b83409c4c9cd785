#!/usr/bin/python3
"""Trains the default model's assistant (MTP) drafter (assistant_tiny.py) the way Google made
theirs: the frozen default model (the tracked weights in models/default/) runs over training
verses; its final-normed hidden states, the K/V of its last KV-owner layers and its own greedy
next tokens are the data; the assistant learns to predict the target's next tokens, chained:
step k (k = 0..K-1) feeds its own previous argmax and recurrent hidden back, at the same
position, as g4's drafter does, and is scored against the target's argmax k tokens ahead.

The chat held-out split (every 17th verse, chat.py) stays out of training: those verses are the
held-out text the drafter is measured on. With --generated N, N more sequences are the target's
own greedy text after training verse openings, written by g4 (build/g4 and the expanded default
model: tools/quickstart.sh builds both) and kept in OUT/generated.json for later runs.

usage: /usr/bin/python3 tools/default_model/train_assistant.py [--minutes 22] [--generated 2000]
           [--out build/default_assistant]
Writes OUT/trained.pt (float32 weights, config, vocabulary, ordering, log).
"""
import argparse
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import assistant_tiny as A  # noqa: E402
import corpus  # noqa: E402
import gemma4_tiny as G  # noqa: E402
from train_chat import load_compact  # noqa: E402

BOS, NL = 2, 107
HOLD_OUT_EVERY, HOLD_OUT_AT = 17, 5  # chat.py's held-out verses
LAYER_SCALARS = [0.9, 0.8, 0.85, 0.75]  # fixed, != 1 so that an engine that skips them fails


def split(data):
    n = len(data["verse_ids"])
    held = [i for i in range(n) if i % HOLD_OUT_EVERY == HOLD_OUT_AT]
    hs = set(held)
    return [i for i in range(n) if i not in hs], held


def sequences(data, verse_idx, n, T, rng):
    """n sequences of T full ids starting at verses of verse_idx (85% with <bos>), over the
    running text of those verses only."""
    stream, starts = [], []
    for i in verse_idx:
        starts.append(len(stream))
        stream += data["verse_ids"][i] + [NL]
    stream += stream[:T + 1]
    out = []
    for _ in range(n):
        s = starts[rng.randrange(len(starts))]
        out.append(([BOS] + stream[s:s + T - 1]) if rng.random() < 0.85 else stream[s:s + T])
    return out, stream


def generated(g4, model, data, verse_idx, n, T, rng, procs):
    """n sequences of T full ids in the target's own words: <bos>, the opening of a training verse
    (2 tokens to half the verse), then the target's greedy continuation (g4 run, --ignore-eos).
    In use the drafter reads the target's output, not the corpus: the target's next token there
    is its argmax over its own text, which corpus sequences alone under-represent."""
    jobs = []
    for _ in range(n):
        v = data["verse_ids"][verse_idx[rng.randrange(len(verse_idx))]]
        jobs.append([BOS] + v[:rng.randint(2, max(2, len(v) // 2))])

    def run(prompt):
        cmd = [g4, "run", "--model", model, "--ids", ",".join(map(str, prompt)), "-n",
               str(T - len(prompt)), "--ignore-eos", "--json", "--threads", "1"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        seq = prompt + json.loads(out.strip().splitlines()[-1])["ids"]
        assert len(seq) == T, f"g4 run gave {len(seq) - len(prompt)} tokens, asked for {T - len(prompt)}"
        return seq

    with concurrent.futures.ThreadPoolExecutor(procs) as pool:
        return list(pool.map(run, jobs))


@torch.no_grad()
def precompute(tcfg, TW, to_c, seqs, chunk=64):
    """The frozen target over the sequences: compact ids, hidden, argmax labels, source K/V."""
    ids = to_c[torch.tensor(seqs)]
    hs, labs, kvs = [], [], {t: ([], []) for t in A.SOURCE_LAYERS}
    for a in range(0, len(seqs), chunk):
        h, logits, kv = A.target_state(tcfg, TW, ids[a:a + chunk])
        hs.append(h)
        labs.append(logits[..., :-1].argmax(-1))  # an unused id never wins (docs/default-model.md)
        for t in kv:
            kvs[t][0].append(kv[t][0])
            kvs[t][1].append(kv[t][1])
    return {"ids": ids, "h": torch.cat(hs), "label": torch.cat(labs),
            "kv": {t: (torch.cat(k), torch.cat(v)) for t, (k, v) in kvs.items()}}


def init_weights(acfg, Hb, TW, Vc, n_used_clusters, cluster_of, seed):
    g = torch.Generator().manual_seed(seed)
    W = {}
    for n, s in A.dense_shapes(acfg, Hb).items():
        if n.endswith("layer_scalar"):
            W[n] = torch.tensor([G.bf16_scalar(LAYER_SCALARS[int(n.split(".")[2])])])
        elif n.endswith("q_norm.weight"):
            W[n] = torch.full(s, s[0] ** -0.25)
        elif len(s) == 1:
            W[n] = torch.ones(s)
        else:
            W[n] = torch.randn(*s, generator=g) / math.sqrt(s[1])
    # The head starts from the target's tied table (same width), the centroids from their
    # clusters' mean rows.
    E = TW["embed_tokens.weight"].clone()
    assert E.shape == (Vc + 1, acfg["hidden_size"])
    W["model.embed_tokens.weight"] = E
    C = torch.zeros(n_used_clusters + 1, E.shape[1])
    C.index_add_(0, cluster_of[:Vc], E[:Vc])
    C[:n_used_clusters] /= torch.bincount(cluster_of[:Vc], minlength=n_used_clusters + 1)[:n_used_clusters, None]
    C[n_used_clusters] = E[Vc]
    W["masked_embedding.centroids.weight"] = C
    params = [t.requires_grad_(True) for n, t in W.items() if not n.endswith("layer_scalar")]
    return W, params


def chained_loss(acfg, W, TW, tcfg, batch, K, log_unused, log_unused_clusters, cluster_of, Vc,
                 pos=None, negatives=None):
    """Loss over the anchors `pos` (default: every p in [1, T-K]) and draft steps k < K: CE of
    the token + 0.5 CE of its cluster (both softmaxes include the null row / null cluster with
    + log(count), so they are full-vocabulary softmaxes). With `negatives` (compact ids), the
    token softmax covers only those ids, the batch's labels and the null row (a sampled softmax:
    the full one over 5,501 rows dominated the cost on this CPU). The chain feeds each step's
    argmax (over the same rows) to the next. Returns (loss, per-step prefix accuracy)."""
    ids, h, lab, kv = batch["ids"], batch["h"], batch["label"], batch["kv"]
    B, T = ids.shape
    if pos is None:
        pos = torch.arange(1, T - K + 1)
    Q = len(pos)
    tok = ids[:, pos]
    hh = h[:, pos - 1]
    E = W["model.embed_tokens.weight"]
    C = W["masked_embedding.centroids.weight"]
    nu = C.shape[0] - 1
    targets = [lab[:, pos + k] for k in range(K)]
    if negatives is not None:
        rows = torch.unique(torch.cat([negatives] + [t.reshape(-1) for t in targets]))
        remap = torch.full((Vc + 1,), -1, dtype=torch.long)
        remap[rows] = torch.arange(len(rows))
    else:
        rows = torch.arange(Vc)
        remap = torch.arange(Vc + 1)
    Er = torch.cat([E[rows], E[Vc:]])
    total, accs, alive = 0.0, [], torch.ones(B, Q, dtype=torch.bool)
    for k in range(K):
        e = A.target_embed(tcfg, TW, tok, torch.float32)
        z, hh = A.step(acfg, W, e, hh, pos, kv, torch.float32)
        target = targets[k]
        logits = z @ Er.t()
        n = len(rows)
        logits = torch.cat([logits[..., :n], logits[..., n:] + log_unused], -1)
        ct = cluster_of[target]
        cl = z @ C.t()
        cl = torch.cat([cl[..., :nu], cl[..., nu:] + log_unused_clusters], -1)
        total = total + torch.nn.functional.cross_entropy(logits.reshape(-1, n + 1), remap[target].reshape(-1)) \
            + 0.5 * torch.nn.functional.cross_entropy(cl.reshape(-1, nu + 1), ct.reshape(-1))
        pred = rows[logits[..., :n].detach().argmax(-1)]
        alive = alive & (pred == target)
        accs.append(float(alive.float().mean()))  # all steps <= k right: the acceptance of k+1 drafts
        tok = pred
    return total / K, accs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=22.0)
    ap.add_argument("--out", default=os.path.join(corpus.ROOT, "build", "default_assistant"))
    ap.add_argument("--src", default=os.path.join(corpus.ROOT, "models", "default"))
    ap.add_argument("--sequences", type=int, default=1000)
    ap.add_argument("--generated", type=int, default=0,
                    help="sequences of the target's own greedy text, from training verse openings")
    ap.add_argument("--g4", default=os.path.join(corpus.ROOT, "build", "g4"),
                    help="the engine that writes --generated's text")
    ap.add_argument("--g4-model", default=os.path.join(os.environ.get("G4_ASSETS", os.path.join(
        corpus.ROOT, "assets")), "models", "default"), help="the default model, expanded")
    ap.add_argument("--gen-procs", type=int, default=1, help="g4 processes writing --generated at once")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--anchors", type=int, default=16, help="draft positions per sequence and batch")
    ap.add_argument("--negatives", type=int, default=768, help="random ids in the sampled softmax")
    ap.add_argument("--steps-ahead", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=4321)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    data = corpus.build()
    tcfg = G.default_config()
    vocab, TW, _ = load_compact(args.src, tcfg)
    for t in TW.values():
        t.requires_grad_(False)
    Vc = len(vocab)
    to_c = torch.full((tcfg["vocab_size"],), Vc, dtype=torch.long)
    to_c[torch.tensor(vocab)] = torch.arange(Vc)
    train_idx, held_idx = split(data)
    seqs, stream = sequences(data, train_idx, args.sequences, args.seq, rng)
    held_seqs, _ = sequences(data, held_idx, 100, args.seq, random.Random(7))
    if args.generated:
        t0 = time.time()
        gen_path = os.path.join(args.out, "generated.json")
        key = {"n": args.generated, "seq": args.seq, "seed": args.seed}
        cached = json.load(open(gen_path)) if os.path.exists(gen_path) else {}
        if cached.get("key") == key:
            gen = cached["sequences"]
        else:
            gen = generated(args.g4, args.g4_model, data, train_idx, args.generated, args.seq,
                            random.Random(args.seed + 1), args.gen_procs)
            json.dump({"key": key, "sequences": gen}, open(gen_path, "w"))
        seqs += gen
        print(f"{len(gen)} sequences of the target's own text: {time.time() - t0:.0f}s", flush=True)
    freq = {}
    for t in stream:
        freq[t] = freq.get(t, 0) + 1
    ordering = A.build_ordering(vocab, freq, tcfg["vocab_size"])
    cs = tcfg["vocab_size"] // A.NUM_CENTROIDS
    n_used = (Vc + cs - 1) // cs
    # compact id -> used cluster index; the null row (Vc) -> the null cluster.
    cluster_of = torch.full((Vc + 1,), n_used, dtype=torch.long)
    cluster_of[to_c[ordering[:Vc]]] = torch.arange(Vc) // cs
    log_unused = math.log(tcfg["vocab_size"] - Vc)
    log_unused_clusters = math.log(A.NUM_CENTROIDS - n_used)

    acfg = A.text_config(tcfg, args.hidden, args.intermediate)
    print(f"train verses {len(train_idx)}, held-out verses {len(held_idx)}; vocabulary {Vc} ids in "
          f"{n_used} clusters; corpus build {time.time() - t_start:.0f}s", flush=True)
    t0 = time.time()
    pre = precompute(tcfg, TW, to_c, seqs)
    held = precompute(tcfg, TW, to_c, held_seqs)
    print(f"target states for {len(seqs)} + {len(held_seqs)} sequences: {time.time() - t0:.0f}s", flush=True)

    W, params = init_weights(acfg, tcfg["hidden_size"], TW, Vc, n_used, cluster_of, args.seed)
    print(f"trainable params: {sum(p.numel() for p in params)}", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.0)
    budget = args.minutes * 60.0
    t0 = time.time()
    step, hist, log = 0, [], []
    K, B, N = args.steps_ahead, args.batch, len(seqs)
    order = list(range(N))
    rng.shuffle(order)
    cursor = 0

    def take(src, idx):
        return {"ids": src["ids"][idx], "h": src["h"][idx], "label": src["label"][idx],
                "kv": {t: (k[idx], v[idx]) for t, (k, v) in src["kv"].items()}}

    while time.time() - t0 < budget:
        frac = (time.time() - t0) / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gp in opt.param_groups:
            gp["lr"] = lr
        if cursor + B > N:
            rng.shuffle(order)
            cursor = 0
        idx = torch.tensor(order[cursor:cursor + B])
        cursor += B
        pos = torch.randperm(args.seq - K - 1)[:args.anchors] + 1  # anchors in [1, T-K]
        negatives = torch.randint(0, Vc, (args.negatives,))
        loss, accs = chained_loss(acfg, W, TW, tcfg, take(pre, idx), K, log_unused,
                                  log_unused_clusters, cluster_of, Vc, pos, negatives)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        hist.append((loss.item(), accs))
        step += 1
        if step % 10 == 0:
            m = sum(x[0] for x in hist[-10:]) / 10
            acc = [round(sum(x[1][k] for x in hist[-10:]) / 10, 3) for k in range(K)]
            el = time.time() - t0
            log.append({"step": step, "seconds": round(el, 1), "loss": round(m, 4), "prefix_acc": acc, "lr": lr})
            print(f"step {step} t={el:.0f}s loss {m:.4f} prefix acc {acc} lr {lr:.2e}", flush=True)
    train_seconds = time.time() - t0
    with torch.no_grad():
        hl, hacc = chained_loss(acfg, W, TW, tcfg, held, K, log_unused, log_unused_clusters, cluster_of, Vc)
    final = {"steps": step, "train_seconds": round(train_seconds), "total_seconds": round(time.time() - t_start),
             "final_loss": round(sum(x[0] for x in hist[-50:]) / max(1, len(hist[-50:])), 4),
             "heldout_loss": round(float(hl), 4), "heldout_prefix_acc": [round(a, 3) for a in hacc]}
    print(json.dumps(final), flush=True)
    state = {"config": acfg, "target_config": tcfg, "weights": {n: t.detach().clone() for n, t in W.items()},
             "vocab": vocab, "ordering": ordering, "log": log, "summary": final, "argv": sys.argv}
    torch.save(state, os.path.join(args.out, "trained.pt"))


if __name__ == "__main__":
    main()
