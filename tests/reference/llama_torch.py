"""The LLaMA family (Llama 3 / 3.1 / 3.2, Mistral, Qwen2) in plain PyTorch, computing what Hugging
Face's LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM compute.

Written by us from the architecture for llama_vs_torch.py and llama_train_vs_torch.py (Debian's
python3 has torch 1.13 but not `transformers`); float32 or float64. Built from an HF config.json
dict; parameters carry HF's names and layouts (nn.Linear: weight (out, in), y = x W^T + b):

    model.embed_tokens.weight (V, C)
    model.layers.{i}.input_layernorm.weight (C)
    model.layers.{i}.self_attn.q_proj.weight (NH hs, C), .bias (NH hs) with attention_bias
    model.layers.{i}.self_attn.k_proj.weight (NKV hs, C), .bias (NKV hs) with attention_bias
    model.layers.{i}.self_attn.v_proj.weight (NKV hs, C), .bias (NKV hs) with attention_bias
    model.layers.{i}.self_attn.o_proj.weight (C, NH hs)
    model.layers.{i}.post_attention_layernorm.weight (C)
    model.layers.{i}.mlp.gate_proj.weight (F, C), up_proj.weight (F, C), down_proj.weight (C, F)
    model.norm.weight (C)
    lm_head.weight (V, C)             absent with tie_word_embeddings (the head is embed_tokens)

The forward pass (B, T tokens; hs = head_dim, which need not be C / NH):
    x = embed[idx]                                               (B, T, C)
    per layer: x = x + o_proj(attn(rms(x))); x = x + down(silu(gate(rms(x))) * up(rms(x)))
      rms(x) = w * (x / sqrt(mean(x^2) + eps))                   (eps = rms_norm_eps)
      attn: q (B, NH, T, hs), k, v (B, NKV, T, hs) from the projections; q, k rotated (RoPE);
            query head h uses kv head h // (NH / NKV) (HF's repeat_kv: consecutive query heads
            share one); per head softmax(q k^T / sqrt(hs), causal) v; heads concatenated
      RoPE (HF's rotate_half): channel i pairs with i + hs/2; angle a = t inv_freq[i],
            x' = x cos(a) + rotate_half(x) sin(a), rotate_half(x) = cat(-x[hs/2:], x[:hs/2]);
            inv_freq[i] = 1 / theta^(2i / hs), and with rope_scaling {"rope_type": "llama3"}
            HF's _compute_llama3_parameters (see rope_inv_freq)
    logits = rms_f(x) @ head^T                                   (B, T, V)
    loss = mean cross-entropy over all B*T positions (targets given, no shift inside)
Masked scores are finfo.min before the softmax (exact zeros after it). Unlike HF, the softmax
and RMSNorm run in the model's dtype (HF upcasts to fp32, which in a float64 model would lose
precision, and is the identity in an fp32 one); inv_freq and the angles are computed in float64
and rounded once to the model's dtype (HF computes them in fp32; strata in double, rounded once,
as here). Sliding windows (Mistral) are not modelled: the tests keep T within the window.

The keyword deviations of LlamaConfig (rope, kv_map, use_scaling, causal) exist only so that the tests
can show they tell a correct model from a subtly wrong one; the defaults are HF's model.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


@dataclass
class LlamaConfig:
    architecture: str
    vocab_size: int
    hidden_size: int            # C
    intermediate_size: int      # F
    num_hidden_layers: int      # L
    num_attention_heads: int    # NH
    num_key_value_heads: int    # NKV
    head_dim: int               # hs
    rope_theta: float = 10000.0
    rope_scaling: dict = None   # llama3 only: factor, low/high_freq_factor, original_max_...
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    # Not the architecture: deliberate deviations for the tests' self-checks.
    rope: str = "rotate_half"   # "rotate_half" (HF) or "interleaved" (pairs 2i, 2i+1: Meta's)
    kv_map: str = "repeat"      # "repeat": head h uses kv h // (NH/NKV) (HF); "modulo": h % NKV
    use_scaling: bool = True    # False ignores rope_scaling
    causal: bool = True

    @staticmethod
    def from_hf(j, **deviation):
        """From a config.json dict. Absent keys take the defaults of transformers' classes for
        the keys the tests leave out (NKV = NH, head_dim = C // NH, theta 1e4, eps 1e-6,
        untied); attention_bias is always true for Qwen2, false for Mistral, the key for Llama.
        Refuses what this model does not compute (another rope_type, hidden_act, mlp_bias)."""
        arch = (j.get("architectures") or ["LlamaForCausalLM"])[0]
        if arch not in ARCHITECTURES:
            raise ValueError(f"architecture {arch!r} is none of {ARCHITECTURES}")
        if j.get("hidden_act", "silu") != "silu" or j.get("mlp_bias", False):
            raise ValueError("only hidden_act silu without mlp_bias is modelled")
        scaling = j.get("rope_scaling")
        if scaling is not None and scaling.get("rope_type", scaling.get("type")) != "llama3":
            raise ValueError(f"rope_scaling {scaling} is not llama3")
        C, NH = j["hidden_size"], j["num_attention_heads"]
        bias = {"Qwen2ForCausalLM": True, "MistralForCausalLM": False}.get(
            arch, bool(j.get("attention_bias", False)))
        cfg = LlamaConfig(
            architecture=arch, vocab_size=j["vocab_size"], hidden_size=C,
            intermediate_size=j["intermediate_size"], num_hidden_layers=j["num_hidden_layers"],
            num_attention_heads=NH,
            num_key_value_heads=j.get("num_key_value_heads") or NH,
            head_dim=j.get("head_dim") or C // NH,
            rope_theta=float(j.get("rope_theta", 10000.0)), rope_scaling=scaling,
            rms_norm_eps=float(j.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(j.get("tie_word_embeddings", False)),
            attention_bias=bias)
        for k, v in deviation.items():
            setattr(cfg, k, v)
        if NH % cfg.num_key_value_heads or cfg.head_dim % 2:
            raise ValueError("NH must be a multiple of NKV and head_dim even")
        return cfg


def rope_inv_freq(cfg):
    """The hs/2 rotary frequencies in float64: 1 / theta^(2i / hs), then with llama3 scaling HF's
    _compute_llama3_parameters: wavelen = 2 pi / f; wavelen > orig / low -> f / factor (long
    wavelengths slowed down); wavelen < orig / high -> f (short ones kept); between, the blend
    (1 - s) f / factor + s f with s = (orig / wavelen - low) / (high - low)."""
    hs = cfg.head_dim
    f = 1.0 / cfg.rope_theta ** (np.arange(0, hs, 2, dtype=np.float64) / hs)
    s = cfg.rope_scaling
    if s is None or not cfg.use_scaling:
        return f
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    orig = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    out = np.where(wavelen > orig / low, f / factor, f)
    smooth = (orig / wavelen - low) / (high - low)
    medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
    return np.where(medium, (1 - smooth) * out / factor + smooth * out, out)


def slow_key_bias(cfg, T, min_angle):
    """{k_proj.bias name: bool mask (NKV hs)} of the key-bias entries whose RoPE pair (i,
    i + hs/2) turns less than `min_angle` radians over T tokens ((T - 1) inv_freq[i]); {} without
    biases. Such entries have a gradient only as large as that angle: q . R_s b_k is nearly the
    same for every key s of a softmax row, which the softmax ignores (GPT-2's key bias is the
    limit, angle 0: no gradient at all). Their AdamW steps are then rounding-decided; the tests
    compare them by the size of their steps instead of their values."""
    if not cfg.attention_bias:
        return {}
    slow = np.tile(np.concatenate([rope_inv_freq(cfg) * (T - 1) < min_angle] * 2),
                   cfg.num_key_value_heads)
    return {f"model.layers.{i}.self_attn.k_proj.bias": slow
            for i in range(cfg.num_hidden_layers)}


class RmsNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(C))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate(x, cos, sin, convention):
    """x (B, H, T, hs) rotated; cos, sin (T, hs/2)."""
    if convention == "rotate_half":
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
        return x * c + torch.cat([-x2, x1], -1) * s
    x1, x2 = x[..., 0::2], x[..., 1::2]  # "interleaved": pairs (2i, 2i+1)
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C, NH, NKV, hs = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                          cfg.head_dim)
        self.q_proj = nn.Linear(C, NH * hs, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(C, NKV * hs, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(C, NKV * hs, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(NH * hs, C, bias=False)

    def before_rope(self, q, k):
        """q (B, NH, T, hs), k (B, NKV, T, hs) as projected; the identity here (moe_torch.py's
        Qwen3 attention normalizes each head here)."""
        return q, k

    def after_rope(self, q, k):
        """q, k as rotated; the identity (a hook for the self-checks' deviations)."""
        return q, k

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        cfg = self.cfg
        NH, NKV, hs = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        q = self.q_proj(x).view(B, T, NH, hs).transpose(1, 2)      # (B, NH, T, hs)
        k = self.k_proj(x).view(B, T, NKV, hs).transpose(1, 2)     # (B, NKV, T, hs)
        v = self.v_proj(x).view(B, T, NKV, hs).transpose(1, 2)
        q, k = self.before_rope(q, k)
        q, k = rotate(q, cos, sin, cfg.rope), rotate(k, cos, sin, cfg.rope)
        q, k = self.after_rope(q, k)
        if cfg.kv_map == "repeat":  # HF's repeat_kv: kv head j serves heads j*rep .. j*rep+rep-1
            kv_of = torch.arange(NH) // (NH // NKV)
        else:
            kv_of = torch.arange(NH) % NKV
        k, v = k[:, kv_of], v[:, kv_of]                             # (B, NH, T, hs)
        att = torch.matmul(q, k.transpose(-1, -2))                  # (B, NH, T, T)
        att = att / torch.full([], math.sqrt(hs), dtype=att.dtype)
        keep = torch.ones(T, T, dtype=torch.bool).tril()
        if not cfg.causal:
            keep = torch.ones(T, T, dtype=torch.bool)
        att = torch.where(keep, att, torch.full([], torch.finfo(att.dtype).min, dtype=att.dtype))
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v)                                    # (B, NH, T, hs)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, NH * hs))


class Mlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, Fi = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(C, Fi, bias=False)
        self.up_proj = nn.Linear(C, Fi, bias=False)
        self.down_proj = nn.Linear(Fi, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RmsNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RmsNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Mlp(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """HF's LlamaModel ("model."): embedding, layers, final norm."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RmsNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Llama(nn.Module):
    def __init__(self, cfg, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.dtype = dtype
        self.to(dtype)

    def forward(self, idx, targets=None):
        """idx, targets: (B, T) int64. Returns logits (B, T, V) and the mean loss (or None)."""
        B, T = idx.shape
        angles = np.arange(T, dtype=np.float64)[:, None] * rope_inv_freq(self.cfg)[None, :]
        cos = torch.from_numpy(np.cos(angles)).to(self.dtype)      # (T, hs/2)
        sin = torch.from_numpy(np.sin(angles)).to(self.dtype)
        x = self.model.embed_tokens(idx)                            # (B, T, C)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        head = (self.model.embed_tokens.weight if self.cfg.tie_word_embeddings
                else self.lm_head.weight)
        logits = torch.matmul(x, head.t())                          # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    # ---- numpy in / out, HF names ------------------------------------------------------------

    def load_numpy(self, weights):
        """Set every parameter from {HF name: ndarray}. Every parameter must be present with
        its exact shape; unknown names are refused (lm_head.weight of a tied model included)."""
        own = dict(self.named_parameters())
        for name, a in weights.items():
            if name not in own:
                raise KeyError(f"unknown tensor {name!r} for {self.cfg.architecture}")
            if tuple(a.shape) != tuple(own[name].shape):
                raise ValueError(f"{name}: shape {tuple(a.shape)}, expected "
                                 f"{tuple(own[name].shape)}")
            with torch.no_grad():
                own[name].copy_(torch.from_numpy(np.asarray(a)))
        missing = sorted(set(own) - set(weights))
        if missing:
            raise KeyError(f"missing tensors: {', '.join(missing)}")

    def params_numpy(self):
        return {n: p.detach().numpy().copy() for n, p in self.named_parameters()}

    def grads_numpy(self):
        return {n: p.grad.detach().numpy().copy() for n, p in self.named_parameters()}


def param_shapes(cfg):
    """{HF name: shape}, without building a model."""
    C, V, Fi = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    Q, KV = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (C,)
        for n, rows in (("q", Q), ("k", KV), ("v", KV)):
            shapes[p + f"self_attn.{n}_proj.weight"] = (rows, C)
            if cfg.attention_bias:
                shapes[p + f"self_attn.{n}_proj.bias"] = (rows,)
        shapes[p + "self_attn.o_proj.weight"] = (C, Q)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        shapes[p + "mlp.gate_proj.weight"] = (Fi, C)
        shapes[p + "mlp.up_proj.weight"] = (Fi, C)
        shapes[p + "mlp.down_proj.weight"] = (C, Fi)
    shapes["model.norm.weight"] = (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def random_weights(cfg, seed):
    """Seeded random weights (HF names, float32) with non-trivial activations: RMSNorm weights
    1 + 0.1 N(0,1); q/k/v biases 0.1 N(0,1); q, k, v, gate and up weights N(0, 1/C), so that
    attention scores and SiLU inputs are O(1) (the norms make the layer inputs' rms ~1);
    embed_tokens, o_proj and down_proj 0.05 N(0,1); lm_head 0.02 N(0,1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        noise = rng.standard_normal(shape)
        if "norm" in name:
            a = 1.0 + 0.1 * noise
        elif name.endswith(".bias"):
            a = 0.1 * noise
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight",
                            "gate_proj.weight", "up_proj.weight")):
            a = noise / math.sqrt(cfg.hidden_size)
        elif name == "lm_head.weight":
            a = 0.02 * noise
        else:  # embed_tokens, o_proj, down_proj
            a = 0.05 * noise
        out[name] = a.astype(np.float32)
    return out


def train(cfg, weights, inputs, targets, steps, lr, weight_decay, betas, eps,
          dtype=torch.float32, optimizer="adamw"):
    """What model_reference_driver does (see llama_vs_torch.py): forward + backward at
    `weights`, then `steps` AdamW steps on the same batch (one group, all parameters), then a
    last forward. optimizer="adam" (L2 decay, torch.optim.Adam) is for the self-check.

    Returns {"logits": first forward's logits, "losses": (steps + 1,), "grads": initial
    gradients, "params": parameters after the steps}, numpy in `dtype`, HF names."""
    model = Llama(cfg, dtype)
    model.load_numpy(weights)  # copy_ widens fp32 to `dtype` exactly
    idx = torch.from_numpy(np.asarray(inputs, dtype=np.int64))
    tgt = torch.from_numpy(np.asarray(targets, dtype=np.int64))
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer]
    opt = cls(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    losses, first_logits, first_grads = [], None, None
    for step in range(steps + 1):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(idx, tgt)
        losses.append(loss.item())
        if step == 0:
            first_logits = logits.detach().numpy().copy()
        if step == steps:
            break
        loss.backward()
        if step == 0:
            first_grads = model.grads_numpy()
        opt.step()
    return {"logits": first_logits, "losses": np.array(losses),
            "grads": first_grads, "params": model.params_numpy()}
