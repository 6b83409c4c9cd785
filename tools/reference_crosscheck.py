# Third derivation of the Gemma-4 forward pass, in pure Python and shaped like the HF modeling code
# (shared K/V keyed by layer type, rotate_half with concat(freqs, freqs), an explicit mask), to
# cross-check src/reference. Needs a bf16 single-file checkpoint with a small vocabulary:
#   build/g4 synth --preset e2b --vocab 512 --out /tmp/e2b512
#   python3 tools/reference_crosscheck.py /tmp/e2b512 2 17 300 45 9 511 128 77 3 260 199 41 8
# It runs $G4_REFERENCE_DUMP (default build/reference_dump, see tools/reference_dump.cc).
# Measured at commit time: max |python - C++| ~2e-13 on all three tiny presets, 20 tokens.
import json, math, os, struct, subprocess, sys

d = sys.argv[1]
ids = [int(x) for x in sys.argv[2:]]
cfg = json.load(open(d + "/config.json"))
tc = cfg.get("text_config", cfg)

f = open(d + "/model.safetensors", "rb")
n = struct.unpack("<Q", f.read(8))[0]
hdr = json.loads(f.read(n))
base = 8 + n

def T(name):
    e = hdr["model.language_model." + name]
    f.seek(base + e["data_offsets"][0]); b = f.read(e["data_offsets"][1] - e["data_offsets"][0])
    assert e["dtype"] == "BF16"
    vals = [struct.unpack("<f", b"\0\0" + b[i:i+2])[0] for i in range(0, len(b), 2)]
    shape = e["shape"]
    if len(shape) == 2:
        r, c = shape
        return [vals[i*c:(i+1)*c] for i in range(r)]
    return vals

def bf16(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b = (b + 0x7fff + ((b >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]

def mv(W, x): return [sum(wi * xi for wi, xi in zip(row, x)) for row in W]
def rms(x, w=None, eps=tc["rms_norm_eps"]):
    s = (sum(v*v for v in x) / len(x) + eps) ** -0.5
    return [v * s * (w[i] if w else 1.0) for i, v in enumerate(x)]
def gelu(x): return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

H = tc["hidden_size"]; L = tc["num_hidden_layers"]; P = tc.get("hidden_size_per_layer_input") or 0
types = tc["layer_types"]; nh = tc["num_attention_heads"]
plc = tc.get("per_layer_config") or {}
def hd_of(i):
    if plc: return plc.get(str(i), {}).get("head_dim", tc["head_dim"])
    return tc["global_head_dim"] if types[i] == "full_attention" else tc["head_dim"]
def kv_of(i):
    if plc: return plc.get(str(i), {}).get("num_key_value_heads", tc["num_key_value_heads"])
    if types[i] == "full_attention" and tc["attention_k_eq_v"] and tc.get("num_global_key_value_heads"):
        return tc["num_global_key_value_heads"]
    return tc["num_key_value_heads"]

E = T("embed_tokens.weight")
x = [[v * bf16(math.sqrt(H)) for v in E[t]] for t in ids]
nt = len(ids)
if P:
    PT = T("embed_tokens_per_layer.weight"); Wpm = T("per_layer_model_projection.weight"); pn = T("per_layer_projection_norm.weight")
    pli = []
    for t in range(nt):
        proj = [v * H ** -0.5 for v in mv(Wpm, x[t])]
        tok = [v * bf16(math.sqrt(P)) for v in PT[ids[t]]]
        row = []
        for l in range(L):
            c = rms(proj[l*P:(l+1)*P], pn)
            row.append([(c[k] + tok[l*P + k]) * 2 ** -0.5 for k in range(P)])
        pli.append(row)

first_shared = L - (tc.get("num_kv_shared_layers") or 0)
shared_kv = {}
def rope(v, hd, i, pos):
    rp = tc["rope_parameters"][types[i]]
    theta = rp["rope_theta"]
    if rp.get("rope_type") == "proportional":
        na = int(rp["partial_rotary_factor"] * hd // 2)
        inv = [1 / theta ** (2 * j / hd) for j in range(na)] + [0.0] * (hd // 2 - na)
    else:
        inv = [1 / theta ** (2 * j / hd) for j in range(hd // 2)]
    fr = [pos * a for a in inv]; emb = fr + fr
    rot = [-v[k + hd // 2] for k in range(hd // 2)] + [v[k] for k in range(hd // 2)]
    return [v[k] * math.cos(emb[k]) + rot[k] * math.sin(emb[k]) for k in range(hd)]

for i in range(L):
    p = f"layers.{i}."
    hd = hd_of(i); nkv = kv_of(i)
    a = [rms(x[t], T(p + "input_layernorm.weight")) for t in range(nt)]
    Wq = T(p + "self_attn.q_proj.weight"); qn = T(p + "self_attn.q_norm.weight")
    q = [[rope(rms(mv(Wq, a[t])[h*hd:(h+1)*hd], qn), hd, i, t) for h in range(nh)] for t in range(nt)]
    if i < first_shared:
        Wk = T(p + "self_attn.k_proj.weight"); kn = T(p + "self_attn.k_norm.weight")
        has_v = ("model.language_model." + p + "self_attn.v_proj.weight") in hdr
        Wv = T(p + "self_attn.v_proj.weight") if has_v else None
        K, V = [], []
        for t in range(nt):
            kr = mv(Wk, a[t]); vr = mv(Wv, a[t]) if has_v else kr
            K.append([rope(rms(kr[g*hd:(g+1)*hd], kn), hd, i, t) for g in range(nkv)])
            V.append([rms(vr[g*hd:(g+1)*hd]) for g in range(nkv)])
        shared_kv[types[i]] = (K, V)  # the last non-shared layer of each type wins
    else:
        K, V = shared_kv[types[i]]
    W = tc["sliding_window"]
    out = []
    for t in range(nt):
        o = []
        for h in range(nh):
            g = h // (nh // nkv)
            sc = []
            for j in range(nt):
                vis = j <= t and (types[i] == "full_attention" or t - j < W)
                sc.append(sum(qa * kb for qa, kb in zip(q[t][h], K[j][g])) if vis else -math.inf)
            m = max(sc); e = [math.exp(s - m) for s in sc]; z = sum(e)
            o += [sum(e[j] / z * V[j][g][dd] for j in range(nt)) for dd in range(hd)]
        out.append(o)
    Wo = T(p + "self_attn.o_proj.weight")
    pa = T(p + "post_attention_layernorm.weight"); pf = T(p + "pre_feedforward_layernorm.weight"); pof = T(p + "post_feedforward_layernorm.weight")
    Wg = T(p + "mlp.gate_proj.weight"); Wu = T(p + "mlp.up_proj.weight"); Wd = T(p + "mlp.down_proj.weight")
    if P:
        Wpg = T(p + "per_layer_input_gate.weight"); Wpp = T(p + "per_layer_projection.weight"); ppn = T(p + "post_per_layer_input_norm.weight")
    ls = T(p + "layer_scalar")[0]
    for t in range(nt):
        y = rms(mv(Wo, out[t]), pa); x[t] = [u + v for u, v in zip(x[t], y)]
        m = rms(x[t], pf)
        gg = [gelu(u) * v for u, v in zip(mv(Wg, m), mv(Wu, m))]
        y = rms(mv(Wd, gg), pof); x[t] = [u + v for u, v in zip(x[t], y)]
        if P:
            gg = [gelu(u) * v for u, v in zip(mv(Wpg, x[t]), pli[t][i])]
            y = rms(mv(Wpp, gg), ppn); x[t] = [u + v for u, v in zip(x[t], y)]
        x[t] = [u * ls for u in x[t]]

fn = T("norm.weight"); cap = tc["final_logit_softcapping"]
ref = subprocess.run([os.environ.get("G4_REFERENCE_DUMP", "build/reference_dump"), d] + [str(i) for i in ids], capture_output=True, text=True, check=True).stdout.split("\n")
worst = 0
for t in range(nt):
    hv = rms(x[t], fn)
    lg = [cap * math.tanh(sum(a * b for a, b in zip(row, hv)) / cap) for row in E]
    r = [float(v) for v in ref[t].split()]
    worst = max(worst, max(abs(a - b) for a, b in zip(lg, r)))
print(d, "max |python - C++ reference| =", worst)
