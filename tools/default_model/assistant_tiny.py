"""The assistant (MTP) drafter of the default model in plain PyTorch: the math g4 implements in
src/model/assistant.cc (docs/gemma4.md §10), at the default model's size.

One draft step takes the token t at position p (not yet in the target's cache), the hidden h
(the target's post-final-norm hidden at p-1 on the first step, the previous step's
post_projection output after), and the target's K/V of its last KV-owner layer of each type
(layer 5 sliding, layer 4 full):
  x = pre_projection([target_embed(t) * bf16(sqrt(Hb)), h]); 4 Gemma-4 layers whose queries
  (q_norm, RoPE at p, scale 1) attend over the target keys strictly before p (sliding: the W-1
  before p); z = norm(x); logits = E_a z (centroid head); h_next = post_projection(z).

Centroid head (E2B-style, use_ordered_embeddings): 2048 clusters of 128 ids (token_ordering);
the top 32 clusters by centroids . z give 4,096 candidates whose logits are E_a[id] . z, every
other id gets min(candidates) - 1. At this size only 43 clusters hold ids the target can
predict; the rest hold unused ids and share one centroid row.

Weights: a dict with the checkpoint's tensor names. The two tables are compact here, as in
gemma4_tiny.py: `model.embed_tokens.weight` [Vc+1, Ha] (the target's vocabulary ids, then one
null row shared by every other id) and `masked_embedding.centroids.weight` [Nu+1, Ha] (the used
clusters, then one null row shared by the unused clusters).
"""
import math

import torch

import gemma4_tiny as G

NUM_CENTROIDS, TOP_K = 2048, 32
SOURCE_LAYERS = {"sliding_attention": 5, "full_attention": 4}  # the target's last KV owners


def text_config(target_cfg, hidden=128, intermediate=256, heads=4):
    t = target_cfg
    return {
        "model_type": "gemma4_text",
        "vocab_size": t["vocab_size"],
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": 4,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        "num_attention_heads": heads,
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": t["head_dim"],
        "global_head_dim": t["global_head_dim"],
        "num_global_key_value_heads": None,
        "attention_k_eq_v": False,
        "num_kv_shared_layers": 4,
        "hidden_size_per_layer_input": 0,
        "use_double_wide_mlp": False,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": t["rms_norm_eps"],
        "sliding_window": t["sliding_window"],
        "max_position_embeddings": t["max_position_embeddings"],
        "final_logit_softcapping": None,
        "rope_parameters": t["rope_parameters"],
        "tie_word_embeddings": True,
    }


def hf_config(target_cfg, text):
    return {
        "architectures": ["Gemma4AssistantForCausalLM"],
        "model_type": "gemma4_assistant",
        "backbone_hidden_size": target_cfg["hidden_size"],
        "use_ordered_embeddings": True,
        "num_centroids": NUM_CENTROIDS,
        "centroid_intermediate_top_k": TOP_K,
        "tie_word_embeddings": True,
        "text_config": text,
        "dtype": "bfloat16",
    }


def head_dim(cfg, i):
    return cfg["global_head_dim"] if cfg["layer_types"][i] == "full_attention" else cfg["head_dim"]


def dense_shapes(cfg, Hb):
    Ha, I, nh = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    s = {"model.norm.weight": (Ha,), "pre_projection.weight": (Ha, 2 * Hb),
         "post_projection.weight": (Hb, Ha)}
    for i in range(cfg["num_hidden_layers"]):
        p, hd = f"model.layers.{i}.", head_dim(cfg, i)
        s.update({
            p + "input_layernorm.weight": (Ha,), p + "post_attention_layernorm.weight": (Ha,),
            p + "pre_feedforward_layernorm.weight": (Ha,), p + "post_feedforward_layernorm.weight": (Ha,),
            p + "layer_scalar": (1,),
            p + "self_attn.q_proj.weight": (nh * hd, Ha), p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.o_proj.weight": (Ha, nh * hd),
            p + "mlp.gate_proj.weight": (I, Ha), p + "mlp.up_proj.weight": (I, Ha),
            p + "mlp.down_proj.weight": (Ha, I),
        })
    return s


def visible(Tq, Tk, pos, window):
    """[Tq, Tk] bool: query at pos[i] sees key j when j < pos[i] (and pos[i] - j < window)."""
    k = torch.arange(Tk)[None, :]
    q = pos[:, None]
    vis = k < q
    if window:
        vis = vis & (q - k < window)
    return vis


def step(cfg, W, e, h, pos, kv, dtype):
    """One draft step for a batch of queries.
    e: [B, Q, Hb] scaled target embeddings of the input tokens; h: [B, Q, Hb];
    pos: [Q] positions (each >= 1); kv: type -> (K [B, Tk, nkv, hd], V [B, Tk, nkv, hd]).
    Returns z [B, Q, Ha] (normed, the head's input) and h_next [B, Q, Hb]."""
    g = lambda n: W[n].to(dtype)
    eps = cfg["rms_norm_eps"]
    nh = cfg["num_attention_heads"]
    x = torch.cat([e, h], -1) @ g("pre_projection.weight").t()
    B, Q = x.shape[:2]
    for i, typ in enumerate(cfg["layer_types"]):
        p, hd = f"model.layers.{i}.", head_dim(cfg, i)
        inv = G.rope_inv_freq(cfg, typ, hd)
        a = G.rms_norm(x, g(p + "input_layernorm.weight"), eps)
        q = (a @ g(p + "self_attn.q_proj.weight").t()).reshape(B, Q, nh, hd)
        q = G.apply_rope(G.rms_norm(q, g(p + "self_attn.q_norm.weight"), eps), pos, inv)
        K, V = kv[typ]
        K, V = K.to(dtype), V.to(dtype)
        rep = nh // K.shape[2]
        kk = K.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)  # [B, nh, Tk, hd]
        vv = V.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)
        vis = visible(Q, K.shape[1], pos, cfg["sliding_window"] if typ == "sliding_attention" else None)
        s = q.permute(0, 2, 1, 3) @ kk.transpose(-1, -2)  # scale 1.0
        s = s.masked_fill(~vis, float("-inf"))
        o = (torch.softmax(s, -1) @ vv).permute(0, 2, 1, 3).reshape(B, Q, nh * hd)
        x = x + G.rms_norm(o @ g(p + "self_attn.o_proj.weight").t(), g(p + "post_attention_layernorm.weight"), eps)
        m = G.rms_norm(x, g(p + "pre_feedforward_layernorm.weight"), eps)
        m = (G.gelu_tanh(m @ g(p + "mlp.gate_proj.weight").t()) * (m @ g(p + "mlp.up_proj.weight").t())) \
            @ g(p + "mlp.down_proj.weight").t()
        x = (x + G.rms_norm(m, g(p + "post_feedforward_layernorm.weight"), eps)) * g(p + "layer_scalar")
    z = G.rms_norm(x, g("model.norm.weight"), eps)
    return z, z @ g("post_projection.weight").t()


def target_state(tcfg, TW, c_ids, dtype=torch.float32):
    """The frozen target over compact ids [B, T]: (hidden [B, T, Hb] after the final norm,
    logits over the compact vocabulary [B, T, Vc+1] (not softcapped: same argmax),
    kv: type -> (K, V) of the source layers)."""
    kv = {}
    h = G.forward(tcfg, TW, c_ids, dtype=dtype, hidden=True, kv_out=kv)
    logits = h @ TW["embed_tokens.weight"].to(dtype).t()
    return h, logits, {t: kv[l] for t, l in SOURCE_LAYERS.items()}


def target_embed(tcfg, TW, c_ids, dtype):
    return TW["embed_tokens.weight"][c_ids].to(dtype) * G.bf16_scalar(math.sqrt(tcfg["hidden_size"]))


class Drafter:
    """The exported assistant over the full vocabulary (float64 by default), for checking:
    the centroid head exactly as g4 computes it."""

    def __init__(self, acfg, AW, vocab, ordering, tcfg, TW, tvocab):
        self.cfg, self.W, self.tcfg, self.TW = acfg, AW, tcfg, TW
        V = tcfg["vocab_size"]
        self.V = V
        self.vocab = torch.tensor(vocab)
        self.to_c = torch.full((V,), len(vocab), dtype=torch.long)
        self.to_c[self.vocab] = torch.arange(len(vocab))
        tv = torch.tensor(tvocab)
        self.to_tc = torch.full((V,), len(tvocab), dtype=torch.long)
        self.to_tc[tv] = torch.arange(len(tvocab))
        self.ordering = torch.as_tensor(ordering).reshape(NUM_CENTROIDS, -1)
        self.cluster_row = ordering_centroid_rows(self.ordering, self.to_c, len(vocab))

    def head(self, z):
        """z [Ha] float64 -> full [V] logits through the centroid head (g4's fill and ties)."""
        C = self.W["masked_embedding.centroids.weight"].to(z.dtype)
        scores = C[self.cluster_row] @ z  # [2048]
        order = sorted(range(NUM_CENTROIDS), key=lambda c: (-float(scores[c]), c))[:TOP_K]
        ids = self.ordering[order].reshape(-1)
        E = self.W["model.embed_tokens.weight"].to(z.dtype)
        cand = E[self.to_c[ids]] @ z
        out = torch.full((self.V,), float(cand.min()) - 1, dtype=z.dtype)
        out[ids] = cand
        return out

    def draft(self, ids, n, dtype=torch.float64):
        """Chained greedy drafting after the prompt `ids` (full ids): the target holds
        ids[:-1], the assistant drafts from ids[-1] at position len(ids)-1.
        Returns (tokens, per-step full logits)."""
        p = len(ids) - 1
        c = self.to_tc[torch.tensor(ids)][None]
        h, _, kv = target_state(self.tcfg, self.TW, c[:, :p], dtype=dtype)
        hh = h[:, p - 1:p]
        tok = ids[-1]
        toks, logits = [], []
        for _ in range(n):
            e = target_embed(self.tcfg, self.TW, self.to_tc[torch.tensor([[tok]])], dtype)
            z, hh = step(self.cfg, self.W, e, hh, torch.tensor([p]), kv, dtype)
            full = self.head(z[0, 0])
            tok = int(torch.argmax(full))  # first maximum: the lowest id, as g4's ArgMax
            toks.append(tok)
            logits.append(full)
        return toks, logits


def ordering_centroid_rows(ordering, to_c, Vc):
    """cluster k -> its row in the compact centroid table: the used clusters in order, then the
    null row for every cluster that holds only unused ids."""
    rows, n = [], 0
    for k in range(ordering.shape[0]):
        if bool((to_c[ordering[k]] < Vc).any()):
            rows.append(n)
            n += 1
        else:
            rows.append(-1)
    return torch.tensor([r if r >= 0 else n for r in rows])


def build_ordering(vocab, freq, V):
    """token_ordering [V] (a permutation): the used ids by falling frequency fill the first
    clusters (128 each), then every other id in increasing order."""
    used = sorted(vocab, key=lambda t: (-freq.get(t, 0), t))
    s = set(vocab)
    rest = [i for i in range(V) if i not in s]
    return torch.tensor(used + rest, dtype=torch.long)
