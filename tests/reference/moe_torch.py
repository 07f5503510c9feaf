"""Qwen3, Mixtral and Qwen3-MoE in plain PyTorch, computing what Hugging Face's Qwen3ForCausalLM,
MixtralForCausalLM and Qwen3MoeForCausalLM compute (float32 or float64), for moe_vs_torch.py,
moe_train_vs_torch.py and generate_moe_vs_torch.py. Written by us from the architecture; the
attention, RoPE, RMSNorm and dense SwiGLU MLP are llama_torch.py's (see its docstring for the
conventions: softmax and RMSNorm in the model's dtype, angles in float64 rounded once, targets
given without a shift inside, mean cross-entropy over all B*T positions).

Parameters (HF names; nn.Linear weights (out, in)), beyond llama_torch.py's:
  Qwen3 and Qwen3-MoE attention, per-head RMSNorm of q and k over head_dim, BEFORE RoPE:
    model.layers.{i}.self_attn.q_norm.weight (hs), k_norm.weight (hs)
  Mixtral, every layer sparse (E = num_local_experts, F = intermediate_size):
    model.layers.{i}.block_sparse_moe.gate.weight (E, C)                     the router
    model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight (F, C)           gate proj
    model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight (F, C)           up proj
    model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight (C, F)           down proj
  Qwen3-MoE, sparse layer (E = num_experts, F = moe_intermediate_size):
    model.layers.{i}.mlp.gate.weight (E, C)
    model.layers.{i}.mlp.experts.{e}.gate_proj.weight (F, C), up_proj (F, C), down_proj (C, F)
  Qwen3-MoE, dense layer: llama's model.layers.{i}.mlp.gate_proj/up_proj/down_proj with
    intermediate_size. Layer i is sparse iff
      i not in mlp_only_layers and num_experts > 0 and (i + 1) % decoder_sparse_step == 0
    (HF's Qwen3MoeDecoderLayer; decoder_sparse_step 2 makes layers 1, 3, ... sparse).

A sparse MLP on the N = B*T rows h (N, C) of its input:
    logits = h gate^T (N, E); p = softmax(logits) (HF: in fp32; here the model's dtype)
    (w, idx) = top-k of p (k = num_experts_per_tok), w renormalised to sum 1 -- always in
    Mixtral, only with norm_topk_prob in Qwen3-MoE (default false there)
    out[n] = sum_j w[n, j] expert_{idx[n, j]}(h[n]),  expert(x) = down(silu(gate x) * up x)
Every expert runs on its rows, an expert that no row picked on zero rows: its gradient is then
zeros, not None, so that AdamW still decays it (and its moments) as strata's optimizer does
every parameter of its one group; torch.optim would skip a parameter whose .grad is None.

Loss: ce = mean cross-entropy; with output_router_logits (config key, default false) and targets
    loss = ce + router_aux_loss_coef * aux,
    aux = load_balancing_loss(router logits of the SPARSE layers, concatenated row-wise)
        = E * sum_{j < k, e < E} f[j, e] P[e],   over the R = (sparse layers) * N rows:
          P = mean over rows of softmax(logits) (E); f[j, e] = fraction of rows whose j-th
          choice (top-k of the softmax) is e (k, E; no gradient: a one-hot count)
    so aux = k for perfectly balanced routing. This is transformers' load_balancing_loss_func
    without an attention mask, shared verbatim by Mixtral and Qwen3-MoE (checked against
    modeling_mixtral.py / modeling_qwen3_moe.py, 4.5x and v5): the rows of all layers are
    pooled BEFORE f and P are formed (not a sum of per-layer losses), the gradient reaches the
    routers through P only, dense Qwen3-MoE layers contribute no rows (their MLP has no router;
    v5 records router_logits from the router modules only), and the loss is added only when
    labels are given. Qwen3 (dense) has no aux. (transformers 4.51 appends None for a dense
    Qwen3-MoE layer and its load_balancing_loss_func then fails on it: output_router_logits with
    dense layers only works in v5, which pools the sparse layers, as here.)

HF facts this follows (read from transformers' source, not copied): softmax, then topk, then
(optionally) the renormalisation; topk's order among the chosen does not matter (a sum), and
ties at the k-th place are excluded by the tests (SparseMoe logs each forward's margin).
router_jitter_noise must be 0 (Mixtral multiplies the input by uniform noise while training
otherwise). v5 stores the
experts fused (gate_up_proj (E, 2F, C) = cat(w1, w3) rows, down_proj (E, C, F)) but converts
from and to the per-expert checkpoint names above, which remain the on-disk contract. head_dim
defaults: Qwen3 128 (Qwen3Config), Qwen3-MoE and Mixtral C / NH; num_key_value_heads defaults
(absent key): Qwen3 32, Qwen3-MoE 4, Mixtral 8 -- not NH; rope_theta: Qwen3 / Qwen3-MoE 1e4,
Mixtral 1e6; the tests always give all of them.
In HF's Qwen3 / Qwen3-MoE attention_bias also gives o_proj a bias (llama_torch models none), so
attention_bias is refused here. Sliding windows are not modelled: forward refuses T past one.

Checked once by hand against transformers 4.51.3 itself (its Qwen3 / Mixtral / Qwen3-MoE
ForCausalLM in float64 with eager attention, on torch 1.13 with a few import shims, not part of
the tests; the aux term added to the cross-entropy of the same unshifted targets): on the five
moe_vs_torch.py cases the logits agree to <= 1.2e-7, the losses (aux included) to 1.7e-9 and
every gradient to <= 9e-7 (rel) -- HF's fp32 upcasts in RMSNorm and the router softmax are the
difference --, while top-k renormalisation flipped or q/k norm after RoPE move the logits by
1.5e-2..2.8e-2.

The deviations (renormalize "flip", aux "off" / "per_layer", qk_norm_at "after_rope", and
llama_torch.py's rope / kv_map / causal) exist only for the tests' self-checks; the defaults are
HF's model.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import llama_torch
from llama_torch import RmsNorm

ARCHITECTURES = ("Qwen3ForCausalLM", "MixtralForCausalLM", "Qwen3MoeForCausalLM")
EXPERT_NAMES = {"MixtralForCausalLM": ("w1", "w3", "w2"),          # (gate, up, down)
                "Qwen3MoeForCausalLM": ("gate_proj", "up_proj", "down_proj")}
NKV_DEFAULT = {"Qwen3ForCausalLM": 32, "MixtralForCausalLM": 8,  # HF's, when the key is absent
               "Qwen3MoeForCausalLM": 4}
MOE_ATTR = {"MixtralForCausalLM": "block_sparse_moe", "Qwen3MoeForCausalLM": "mlp"}


@dataclass
class MoeConfig(llama_torch.LlamaConfig):
    qk_norm: bool = False           # Qwen3 / Qwen3-MoE
    num_experts: int = 0            # E
    num_experts_per_tok: int = 0    # k
    moe_intermediate_size: int = 0  # F of an expert
    renormalize_topk: bool = True   # Mixtral always; Qwen3-MoE norm_topk_prob
    sparse: tuple = ()              # per layer: True where the MLP is the sparse MoE
    output_router_logits: bool = False
    router_aux_loss_coef: float = 0.001
    sliding_window: int = None
    # Not the architecture: deliberate deviations for the tests' self-checks.
    renormalize: str = "hf"         # "flip": the opposite of renormalize_topk
    aux: str = "concat"             # "off": no aux term; "per_layer": sum of per-layer losses
    qk_norm_at: str = "before_rope"  # "after_rope"

    @staticmethod
    def from_hf(j, **deviation):
        """From a config.json dict (HF's defaults for absent keys; see the module docstring).
        Refuses what this model does not compute: another hidden_act, attention_bias, rope
        scaling, router jitter, a rope_type other than the default."""
        arch = (j.get("architectures") or [None])[0]
        if arch not in ARCHITECTURES:
            raise ValueError(f"architecture {arch!r} is none of {ARCHITECTURES}")
        if j.get("hidden_act", "silu") != "silu" or j.get("mlp_bias", False):
            raise ValueError("only hidden_act silu without mlp_bias is modelled")
        if j.get("attention_bias", False):
            raise ValueError("attention_bias (q/k/v and o_proj biases in Qwen3) is not modelled")
        if j.get("rope_scaling") is not None:
            raise ValueError("rope_scaling is not modelled")
        rope = j.get("rope_parameters") or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope_parameters {rope} is not the default rope")
        if float(j.get("router_jitter_noise", 0.0)) != 0.0:
            raise ValueError("router_jitter_noise must be 0 (the noise is random)")
        C, NH, L = j["hidden_size"], j["num_attention_heads"], j["num_hidden_layers"]
        theta = rope.get("rope_theta", j.get("rope_theta",
                                             1e6 if arch == "MixtralForCausalLM" else 10000.0))
        window = j.get("sliding_window")
        if arch != "MixtralForCausalLM" and not j.get("use_sliding_window", False):
            window = None
        kw = dict(architecture=arch, vocab_size=j["vocab_size"], hidden_size=C,
                  intermediate_size=j["intermediate_size"], num_hidden_layers=L,
                  num_attention_heads=NH,
                  num_key_value_heads=j.get("num_key_value_heads") or NKV_DEFAULT[arch],
                  head_dim=j.get("head_dim") or (128 if arch == "Qwen3ForCausalLM" else C // NH),
                  rope_theta=float(theta), rms_norm_eps=float(j.get("rms_norm_eps", 1e-6)),
                  tie_word_embeddings=bool(j.get("tie_word_embeddings", False)),
                  qk_norm=arch != "MixtralForCausalLM", sliding_window=window,
                  output_router_logits=bool(j.get("output_router_logits", False)),
                  router_aux_loss_coef=float(j.get("router_aux_loss_coef", 0.001)))
        if arch == "MixtralForCausalLM":
            kw.update(num_experts=j.get("num_local_experts", 8),
                      num_experts_per_tok=j.get("num_experts_per_tok", 2),
                      moe_intermediate_size=j["intermediate_size"], renormalize_topk=True,
                      sparse=(True,) * L)
        elif arch == "Qwen3MoeForCausalLM":
            E, step = j.get("num_experts", 128), j.get("decoder_sparse_step", 1)
            only = set(j.get("mlp_only_layers") or [])
            kw.update(num_experts=E, num_experts_per_tok=j.get("num_experts_per_tok", 8),
                      moe_intermediate_size=j.get("moe_intermediate_size", 768),
                      renormalize_topk=bool(j.get("norm_topk_prob", False)),
                      sparse=tuple(i not in only and E > 0 and (i + 1) % step == 0
                                   for i in range(L)))
        else:
            kw.update(sparse=(False,) * L)
        cfg = MoeConfig(**kw)
        for k, v in deviation.items():
            setattr(cfg, k, v)
        if NH % cfg.num_key_value_heads or cfg.head_dim % 2:
            raise ValueError("NH must be a multiple of NKV and head_dim even")
        if any(cfg.sparse) and not 0 < cfg.num_experts_per_tok <= cfg.num_experts:
            raise ValueError("num_experts_per_tok must be in 1..E")
        return cfg

    @property
    def renorm(self):
        return self.renormalize_topk != (self.renormalize == "flip")


# ---- modules ----------------------------------------------------------------------------------

class QkNormAttention(llama_torch.Attention):
    """llama_torch's attention with Qwen3's per-head RMSNorm of q and k (over hs) before RoPE."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.q_norm = RmsNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RmsNorm(cfg.head_dim, cfg.rms_norm_eps)

    def before_rope(self, q, k):  # (B, NH, T, hs), (B, NKV, T, hs)
        if self.cfg.qk_norm_at == "before_rope":
            return self.q_norm(q), self.k_norm(k)
        return q, k

    def after_rope(self, q, k):
        if self.cfg.qk_norm_at == "after_rope":
            return self.q_norm(q), self.k_norm(k)
        return q, k


class Expert(nn.Module):
    """down(silu(gate x) * up x), the three weights under `names` (gate, up, down)."""

    def __init__(self, C, Fi, names):
        super().__init__()
        self.names = names
        for n, (i, o) in zip(names, ((C, Fi), (C, Fi), (Fi, C))):
            setattr(self, n, nn.Linear(i, o, bias=False))

    def forward(self, x):
        gate, up, down = (getattr(self, n) for n in self.names)
        return down(F.silu(gate(x)) * up(x))


class SparseMoe(nn.Module):
    """The router ("gate") and E experts; forward returns (out (B, T, C), router logits (N, E))
    and appends what it routed to `log` (a list, when set): the tokens per expert ("counts"),
    the smallest relative margin (p_k - p_k+1) / p_k between the k-th and (k+1)-th probability
    ("margin"), and each row's chosen experts, ascending ("chosen", (N, k))."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C, E = cfg.hidden_size, cfg.num_experts
        self.gate = nn.Linear(C, E, bias=False)
        names = EXPERT_NAMES[cfg.architecture]
        self.experts = nn.ModuleList(Expert(C, cfg.moe_intermediate_size, names)
                                     for _ in range(E))
        self.log = None

    def forward(self, x):
        B, T, C = x.shape
        k, E = self.cfg.num_experts_per_tok, self.cfg.num_experts
        h = x.reshape(B * T, C)                                      # (N, C)
        logits = self.gate(h)                                        # (N, E)
        probs = F.softmax(logits, dim=-1)
        ordered, order = torch.sort(probs, dim=-1, descending=True)
        w, idx = ordered[:, :k], order[:, :k]                        # (N, k)
        if self.cfg.renorm:
            w = w / w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        counts = []
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(idx == e)                       # the rows routed to e
            counts.append(len(rows))
            out = out.index_add(0, rows, expert(h[rows]) * w[rows, slot, None])
        if self.log is not None:
            d = ordered.detach()
            margin = (float(torch.min((d[:, k - 1] - d[:, k]) / d[:, k - 1])) if k < E
                      else float("inf"))
            chosen = np.sort(idx.detach().numpy(), axis=-1)
            self.log.append({"counts": counts, "margin": margin, "chosen": chosen})
        return out.view(B, T, C), logits


class MoeLayer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        self.sparse = cfg.sparse[i]
        self.input_layernorm = RmsNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = QkNormAttention(cfg) if cfg.qk_norm else llama_torch.Attention(cfg)
        self.post_attention_layernorm = RmsNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.ffn_name = MOE_ATTR[cfg.architecture] if self.sparse else "mlp"
        setattr(self, self.ffn_name, SparseMoe(cfg) if self.sparse else llama_torch.Mlp(cfg))

    def forward(self, x, cos, sin, router_logits):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        y = getattr(self, self.ffn_name)(self.post_attention_layernorm(x))
        if self.sparse:
            y, logits = y
            router_logits.append(logits)
        return x + y


class MoeBody(nn.Module):
    """HF's "model.": embedding, layers, final norm."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(MoeLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RmsNorm(cfg.hidden_size, cfg.rms_norm_eps)


def load_balancing_loss(router_logits, E, k):
    """transformers' load_balancing_loss_func without a mask: the rows of every layer pooled."""
    cat = torch.cat(router_logits, dim=0)                            # (R, E)
    probs = F.softmax(cat, dim=-1)
    chosen = torch.topk(probs, k, dim=-1).indices                    # (R, k)
    f = F.one_hot(chosen, E).to(probs.dtype).mean(dim=0)             # (k, E)
    P = probs.mean(dim=0)                                            # (E)
    return E * torch.sum(f * P[None, :])


class MoeLm(llama_torch.Llama):
    """The *ForCausalLM; load_numpy / params_numpy are llama_torch.Llama's."""

    def __init__(self, cfg, dtype=torch.float32):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.model = MoeBody(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.dtype = dtype
        self.to(dtype)
        self.aux = None

    def routing_log(self, log):
        """Make every sparse layer append its routing to `log` (None: stop)."""
        for layer in self.model.layers:
            if layer.sparse:
                getattr(layer, layer.ffn_name).log = log

    def forward(self, idx, targets=None):
        """idx, targets (B, T) int64 -> logits (B, T, V) and the loss (see the docstring);
        self.aux is the load-balancing loss of this pass (None without sparse layers)."""
        B, T = idx.shape
        cfg = self.cfg
        if cfg.sliding_window is not None and T > cfg.sliding_window:
            raise ValueError(f"T {T} exceeds the sliding window {cfg.sliding_window}")
        angles = np.arange(T, dtype=np.float64)[:, None] * llama_torch.rope_inv_freq(cfg)[None, :]
        cos = torch.from_numpy(np.cos(angles)).to(self.dtype)
        sin = torch.from_numpy(np.sin(angles)).to(self.dtype)
        x = self.model.embed_tokens(idx)
        router_logits = []
        for layer in self.model.layers:
            x = layer(x, cos, sin, router_logits)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if cfg.tie_word_embeddings else self.lm_head.weight
        logits = torch.matmul(x, head.t())
        self.aux = None
        if router_logits:
            E, k = cfg.num_experts, cfg.num_experts_per_tok
            if cfg.aux == "per_layer":
                self.aux = sum(load_balancing_loss([r], E, k) for r in router_logits)
            else:
                self.aux = load_balancing_loss(router_logits, E, k)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
            if cfg.output_router_logits and self.aux is not None and cfg.aux != "off":
                loss = loss + cfg.router_aux_loss_coef * self.aux
        return logits, loss

    def grads_numpy(self):
        return {n: (np.zeros(tuple(p.shape)) if p.grad is None else p.grad.detach().numpy().copy())
                for n, p in self.named_parameters()}


# ---- shapes, weights, training, generation ------------------------------------------------------

def param_shapes(cfg):
    """{HF name: shape}, without building a model."""
    C, V, hs = cfg.hidden_size, cfg.vocab_size, cfg.head_dim
    Q, KV = cfg.num_attention_heads * hs, cfg.num_key_value_heads * hs
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (C,)
        for n, rows in (("q", Q), ("k", KV), ("v", KV)):
            shapes[p + f"self_attn.{n}_proj.weight"] = (rows, C)
        shapes[p + "self_attn.o_proj.weight"] = (C, Q)
        if cfg.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (hs,)
            shapes[p + "self_attn.k_norm.weight"] = (hs,)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        if cfg.sparse[i]:
            m = p + MOE_ATTR[cfg.architecture] + "."
            Fm = cfg.moe_intermediate_size
            shapes[m + "gate.weight"] = (cfg.num_experts, C)
            gate, up, down = EXPERT_NAMES[cfg.architecture]
            for e in range(cfg.num_experts):
                shapes[m + f"experts.{e}.{gate}.weight"] = (Fm, C)
                shapes[m + f"experts.{e}.{up}.weight"] = (Fm, C)
                shapes[m + f"experts.{e}.{down}.weight"] = (C, Fm)
        else:
            Fi = cfg.intermediate_size
            shapes[p + "mlp.gate_proj.weight"] = (Fi, C)
            shapes[p + "mlp.up_proj.weight"] = (Fi, C)
            shapes[p + "mlp.down_proj.weight"] = (C, Fi)
    shapes["model.norm.weight"] = (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def bias_channel(cfg):
    """The channel that random_weights makes a constant ("massive") activation in MoE models."""
    return cfg.hidden_size // 3


def starved(cfg, layer, starve):
    """The experts of sparse `layer` that random_weights(..., starve) pushes out of every top-k."""
    E = cfg.num_experts
    return [(E - 1 - layer - j) % E for j in range(starve)]


def random_weights(cfg, seed, router_scale=2.0, starve=1, starve_logit=-2.5):
    """Seeded random weights (HF names, float32) as llama_torch.random_weights (norm weights
    1 + 0.1 N(0,1); q/k/v, gate/up projections and the experts' gate/up N(0, 1/C); embed_tokens,
    o_proj, down projections 0.05 N(0,1); lm_head 0.02 N(0,1)), and for models with sparse
    layers:
      - routers N(0, router_scale^2 / C): router logits O(router_scale), routing neither uniform
        nor one-hot;
      - a bias channel c0 = C // 3: embed_tokens[:, c0] = 3 (1 + 0.1 N(0,1)) for every token
        (a "massive activation", as real LLMs have), about 4 after every RMSNorm for every
        token; the other projections' column c0 is scaled by 0.1, so that the channel feeds
        the routers and little else (the residual stream keeps its token-to-token variety),
        and model.norm.weight[c0] by 0.1 (a tied head's logits would otherwise get ~12 from
        the channel, nearly the same for every token: a gradient of norm.weight[c0] that is a
        cancellation, rounding-decided);
        each router's column c0 then acts as a per-expert bias, and `starve` experts per sparse
        layer (starved()) get router[e, c0] = starve_logit, about 4 starve_logit below the others
        for every token: they receive no token at all (while B*T is small), the case where an
        expert has a zero gradient and only its weight decay moves it."""
    rng = np.random.default_rng(seed)
    C = cfg.hidden_size
    out = {}
    for name, shape in param_shapes(cfg).items():
        noise = rng.standard_normal(shape)
        if "norm" in name:
            a = 1.0 + 0.1 * noise
        elif name.endswith((".gate.weight",)):
            a = router_scale * noise / math.sqrt(C)
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
                            "up_proj.weight", "w1.weight", "w3.weight")):
            a = noise / math.sqrt(C)
        elif name == "lm_head.weight":
            a = 0.02 * noise
        else:  # embed_tokens, o_proj, down_proj, w2
            a = 0.05 * noise
        out[name] = a
    if any(cfg.sparse):
        c0 = bias_channel(cfg)
        V = cfg.vocab_size  # 3 (1 + 0.1 N(0,1)): not one constant, which a tied head ignores
        out["model.embed_tokens.weight"][:, c0] = 3.0 * (1.0 + 0.1 * rng.standard_normal(V))
        out["model.norm.weight"][c0] *= 0.1  # the head sees the channel weakly
        for name, a in out.items():  # the channel feeds the routers, hardly anything else
            if a.ndim == 2 and name != "model.embed_tokens.weight" and a.shape[1] == C:
                a[:, c0] *= 0.1
        for i in range(cfg.num_hidden_layers):
            if cfg.sparse[i]:
                g = out[f"model.layers.{i}.{MOE_ATTR[cfg.architecture]}.gate.weight"]
                for e in starved(cfg, i, starve):
                    g[e, c0] = starve_logit
    return {n: a.astype(np.float32) for n, a in out.items()}


def train(cfg, weights, inputs, targets, steps, lr, weight_decay, betas, eps,
          dtype=torch.float32, optimizer="adamw"):
    """llama_torch.train for these models (what model_reference_driver does): forward + backward
    at `weights`, `steps` AdamW steps on the same batch, a last forward. Returns its dict plus
    "aux" (the first forward's load-balancing loss, or None) and "routing": every sparse layer's
    log over all steps + 1 forwards (SparseMoe's dicts, in order)."""
    model = MoeLm(cfg, dtype)
    model.load_numpy(weights)
    log = []
    model.routing_log(log)
    idx = torch.from_numpy(np.asarray(inputs, dtype=np.int64))
    tgt = torch.from_numpy(np.asarray(targets, dtype=np.int64))
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer]
    opt = cls(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    losses, first = [], {}
    for step in range(steps + 1):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(idx, tgt)
        losses.append(loss.item())
        if step == 0:
            first["logits"] = logits.detach().numpy().copy()
            first["aux"] = None if model.aux is None else model.aux.item()
        if step == steps:
            break
        loss.backward()
        if step == 0:
            first["grads"] = model.grads_numpy()
        opt.step()
    return {"logits": first["logits"], "losses": np.array(losses), "grads": first["grads"],
            "params": model.params_numpy(), "aux": first["aux"], "routing": log}


def routing_summary(log, cfg):
    """(smallest margin over `log`, {sparse layer: tokens per expert summed over the log})."""
    layers = [i for i, s in enumerate(cfg.sparse) if s]
    counts = {i: np.zeros(cfg.num_experts, dtype=np.int64) for i in layers}
    for n, rec in enumerate(log):
        counts[layers[n % len(layers)]] += np.array(rec["counts"])
    return min((r["margin"] for r in log), default=float("inf")), counts


def first_routing_difference(log_a, log_b):
    """None when two runs' logs (train's "routing") chose the same experts for every row of
    every sparse layer at every forward; else (record index, row) of the first difference."""
    if len(log_a) != len(log_b):
        return (min(len(log_a), len(log_b)), None)
    for n, (a, b) in enumerate(zip(log_a, log_b)):
        rows = np.flatnonzero(np.any(a["chosen"] != b["chosen"], axis=-1))
        if len(rows):
            return (n, int(rows[0]))
    return None


def unrouted_params(cfg, counts):
    """The expert tensor names of the experts that `counts` (routing_summary's) saw no token."""
    names = []
    for i, c in counts.items():
        for e in np.flatnonzero(c == 0):
            base = f"model.layers.{i}.{MOE_ATTR[cfg.architecture]}.experts.{e}."
            names += [base + n + ".weight" for n in EXPERT_NAMES[cfg.architecture]]
    return names


def greedy(model, prompt, new_tokens):
    """argmax of the last position's logits, `new_tokens` times (a full forward each). Returns
    (ids, the smallest gap between the two best logits met)."""
    ids = list(prompt)
    gap = float("inf")
    with torch.no_grad():
        for _ in range(new_tokens):
            logits, _ = model(torch.tensor([ids], dtype=torch.long))
            top = torch.topk(logits[0, -1], 2).values
            gap = min(gap, float(top[0] - top[1]))
            ids.append(int(torch.argmax(logits[0, -1])))
    return ids[len(prompt):], gap
