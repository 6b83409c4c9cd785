"""A Gemma-4 text decoder in plain PyTorch (torch 1.13, no SDPA), following
docs/gemma4.md sections 1-4 (E2B-style: PLE, KV sharing, 4:1
sliding:full layers, per-type head dims, proportional RoPE on full layers, q/k norms, weightless
v norm, attention scale 1.0, GELU-tanh MLP, double-wide MLP on shared layers, layer_scalar,
final softcap, tied embeddings scaled by bf16(sqrt(H))).

The same module serves training (float32, restricted vocabulary) and checking (float32 or
float64 activations, weights rounded to bf16, full 262,144-token vocabulary).
Weights are held in a flat dict name -> tensor using the Hugging Face tensor names without the
`model.language_model.` prefix.
"""
import math

import torch

PREFIX = "model.language_model."


def default_config():
    L = 10
    types = (["sliding_attention"] * 4 + ["full_attention"]) * (L // 5)
    return {
        "vocab_size": 262144,
        "hidden_size": 128,
        "intermediate_size": 320,
        "num_hidden_layers": L,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "global_head_dim": 64,
        "num_global_key_value_heads": None,
        "attention_k_eq_v": False,
        "use_double_wide_mlp": True,
        "layer_types": types,
        "sliding_window": 16,
        "num_kv_shared_layers": 4,
        "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": 262144,
        "final_logit_softcapping": 30.0,
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0},
        },
        "attention_bias": False,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "pad_token_id": 0,
    }


def bf16_round(t):
    return t.to(torch.bfloat16).to(t.dtype)


def bf16_scalar(x):
    return float(torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).float())


class Plan:
    """Per-layer geometry derived from the config exactly as HF does (spec 1.2, 4)."""

    def __init__(self, cfg):
        self.cfg = cfg
        L = cfg["num_hidden_layers"]
        self.L = L
        self.types = list(cfg["layer_types"])
        self.first_shared = L - cfg["num_kv_shared_layers"]
        self.head_dim = []
        self.nkv = []
        self.mlp = []
        self.source = []  # layer whose K/V this layer uses (itself when not shared)
        for i, t in enumerate(self.types):
            full = t == "full_attention"
            self.head_dim.append(cfg["global_head_dim"] if full else cfg["head_dim"])
            if full and cfg["attention_k_eq_v"] and cfg["num_global_key_value_heads"]:
                self.nkv.append(cfg["num_global_key_value_heads"])
            else:
                self.nkv.append(cfg["num_key_value_heads"])
            shared = cfg["num_kv_shared_layers"] > 0 and i >= self.first_shared
            wide = cfg["use_double_wide_mlp"] and shared
            self.mlp.append(cfg["intermediate_size"] * (2 if wide else 1))
            if shared:
                src = max(j for j in range(self.first_shared) if self.types[j] == t)
            else:
                src = i
            self.source.append(src)

    def shared(self, i):
        return self.source[i] != i


def rope_inv_freq(cfg, layer_type, hd):
    p = cfg["rope_parameters"][layer_type]
    theta = p["rope_theta"]
    inv = torch.zeros(hd // 2, dtype=torch.float64)
    if p.get("rope_type", "default") == "proportional":
        n_rope = int(p["partial_rotary_factor"] * hd // 2)
    else:
        n_rope = hd // 2
    for j in range(n_rope):
        inv[j] = 1.0 / (theta ** (2.0 * j / hd))
    return inv


def apply_rope(x, pos, inv_freq):
    """x: [..., T, heads, hd]; rotate pairs (j, j+hd/2) (rotate_half / NEOX layout)."""
    ang = pos.to(torch.float64)[:, None] * inv_freq[None, :]  # [T, hd/2]
    # HF computes cos/sin in fp32; we compute in float64 then cast to the activation dtype.
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)[:, None, :]
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def rms_norm(x, w, eps):
    y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    return y * w if w is not None else y


def gelu_tanh(x):
    # = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), fused
    return torch.nn.functional.gelu(x, approximate="tanh")


def attention_mask(T, window, dtype, device=None):
    q = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    vis = k <= q
    if window is not None:
        vis = vis & (q - k < window)
    m = torch.zeros(T, T, dtype=dtype)
    m[~vis] = float("-inf")
    return m


def forward(cfg, W, ids, embed=None, ple=None, out_embed=None, dtype=torch.float32, last_only=False, hidden=False, kv_out=None):
    """ids: LongTensor [B, T] of row indices into `embed`/`ple` (defaults: W's full tables).
    out_embed: the matrix the logits are computed against (defaults to `embed`; tied).
    Returns softcapped logits [B, T, V_out] ([B, 1, V_out] with last_only); with hidden, the
    final-normed hidden states instead. kv_out (a dict) receives layer -> (K, V) of the KV owners
    (K normed and roped, V normed; [B, T, nkv, hd]): the assistant drafter reads them."""
    plan = Plan(cfg)
    H = cfg["hidden_size"]
    L = cfg["num_hidden_layers"]
    P = cfg["hidden_size_per_layer_input"]
    nh = cfg["num_attention_heads"]
    eps = cfg["rms_norm_eps"]
    if embed is None:
        embed = W["embed_tokens.weight"]
    if ple is None:
        ple = W["embed_tokens_per_layer.weight"]
    if out_embed is None:
        out_embed = embed
    g = lambda n: W[n].to(dtype)
    B, T = ids.shape
    pos = torch.arange(T)

    # 3.1 embedding, scaled by bf16(sqrt(H))
    e = embed[ids].to(dtype) * bf16_scalar(math.sqrt(H))
    # 3.2 PLE
    t = (ple[ids].to(dtype) * bf16_scalar(math.sqrt(P))).reshape(B, T, L, P)
    c = (e @ g("per_layer_model_projection.weight").t()) * float(torch.tensor(H ** -0.5, dtype=torch.float32))
    c = rms_norm(c.reshape(B, T, L, P), g("per_layer_projection_norm.weight"), eps)
    pli = (c + t) * float(torch.tensor(2 ** -0.5, dtype=torch.float32))

    masks = {
        "sliding_attention": attention_mask(T, cfg["sliding_window"], dtype),
        "full_attention": attention_mask(T, None, dtype),
    }
    x = e
    kv = {}
    for i in range(L):
        p = f"layers.{i}."
        typ = plan.types[i]
        hd = plan.head_dim[i]
        nkv = plan.nkv[i]
        inv = rope_inv_freq(cfg, typ, hd)
        a = rms_norm(x, g(p + "input_layernorm.weight"), eps)
        q = (a @ g(p + "self_attn.q_proj.weight").t()).reshape(B, T, nh, hd)
        q = apply_rope(rms_norm(q, g(p + "self_attn.q_norm.weight"), eps), pos, inv)
        if not plan.shared(i):
            k = (a @ g(p + "self_attn.k_proj.weight").t()).reshape(B, T, nkv, hd)
            v = (a @ g(p + "self_attn.v_proj.weight").t()).reshape(B, T, nkv, hd)
            k = apply_rope(rms_norm(k, g(p + "self_attn.k_norm.weight"), eps), pos, inv)
            v = rms_norm(v, None, eps)
            kv[i] = (k, v)
        else:
            k, v = kv[plan.source[i]]
        rep = nh // nkv
        kk = k.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)  # [B, nh, T, hd]
        vv = v.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)
        qq = q.permute(0, 2, 1, 3)
        s = qq @ kk.transpose(-1, -2) + masks[typ]  # scale 1.0
        pr = torch.softmax(s, dim=-1)
        o = (pr @ vv).permute(0, 2, 1, 3).reshape(B, T, nh * hd)
        y = o @ g(p + "self_attn.o_proj.weight").t()
        x = x + rms_norm(y, g(p + "post_attention_layernorm.weight"), eps)
        m = rms_norm(x, g(p + "pre_feedforward_layernorm.weight"), eps)
        m = (gelu_tanh(m @ g(p + "mlp.gate_proj.weight").t()) * (m @ g(p + "mlp.up_proj.weight").t())) @ g(p + "mlp.down_proj.weight").t()
        x = x + rms_norm(m, g(p + "post_feedforward_layernorm.weight"), eps)
        gg = gelu_tanh(x @ g(p + "per_layer_input_gate.weight").t()) * pli[:, :, i, :]
        z = gg @ g(p + "per_layer_projection.weight").t()
        x = x + rms_norm(z, g(p + "post_per_layer_input_norm.weight"), eps)
        x = x * g(p + "layer_scalar")
    if kv_out is not None:
        kv_out.update(kv)
    if last_only:
        x = x[:, -1:]
    h = rms_norm(x, g("norm.weight"), eps)
    if hidden:
        return h
    logits = h @ out_embed.to(dtype).t()
    cap = cfg["final_logit_softcapping"]
    return torch.tanh(logits / cap) * cap


def dense_shapes(cfg):
    """name -> shape for every tensor except the two vocabulary tables."""
    plan = Plan(cfg)
    H = cfg["hidden_size"]
    L = cfg["num_hidden_layers"]
    P = cfg["hidden_size_per_layer_input"]
    nh = cfg["num_attention_heads"]
    s = {
        "per_layer_model_projection.weight": (L * P, H),
        "per_layer_projection_norm.weight": (P,),
        "norm.weight": (H,),
    }
    for i in range(L):
        p = f"layers.{i}."
        hd, nkv, I = plan.head_dim[i], plan.nkv[i], plan.mlp[i]
        s.update({
            p + "input_layernorm.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
            p + "pre_feedforward_layernorm.weight": (H,),
            p + "post_feedforward_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (nh * hd, H),
            p + "self_attn.k_proj.weight": (nkv * hd, H),
            p + "self_attn.v_proj.weight": (nkv * hd, H),
            p + "self_attn.o_proj.weight": (H, nh * hd),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (I, H),
            p + "mlp.up_proj.weight": (I, H),
            p + "mlp.down_proj.weight": (H, I),
            p + "per_layer_input_gate.weight": (P, H),
            p + "per_layer_projection.weight": (H, P),
            p + "post_per_layer_input_norm.weight": (H,),
            p + "layer_scalar": (1,),
        })
    return s
