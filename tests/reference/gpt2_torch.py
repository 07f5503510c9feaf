"""GPT-2 in plain PyTorch, computing what Hugging Face's GPT2LMHeadModel computes.

Written by us for the comparison in gpt_vs_torch.py (Debian's python3 has torch 1.13 but not
`transformers`). Parameters carry HF's names and layouts, so named_parameters() reads like a
GPT-2 checkpoint:

    wte.weight (V, C)            token embedding; the LM head is tied to it (logits = x @ wte^T)
    wpe.weight (P, C)            learned position embedding
    h.{i}.ln_1.weight/bias (C)
    h.{i}.attn.c_attn.weight (C, 3C), bias (3C)    Conv1D: stored (in, out), y = x @ W + b;
                                                   output columns are [q | k | v], heads
                                                   contiguous inside each (head h: h*hs..)
    h.{i}.attn.c_proj.weight (C, C), bias (C)
    h.{i}.ln_2.weight/bias (C)
    h.{i}.mlp.c_fc.weight (C, 4C), bias (4C)
    h.{i}.mlp.c_proj.weight (4C, C), bias (C)
    ln_f.weight/bias (C)

The forward pass (B, T tokens, hs = C / NH):
    x = wte[idx] + wpe[0..T)                                  (B, T, C)
    per block: x = x + c_proj(attn(ln_1(x))); x = x + mlp(ln_2(x))
      attn: q, k, v = split(c_attn(.)); per head softmax(q k^T / sqrt(hs), causal) v
      mlp:  c_proj(gelu_tanh(c_fc(.)))      (HF's "gelu_new")
    logits = ln_f(x) @ wte^T                                  (B, T, V)
    loss = mean cross-entropy over all B*T positions (targets given, no shift inside)
Dropout is absent (HF in eval mode / p = 0). The masked scores are set to finfo.min before
the softmax, as HF does, so they contribute exact zeros.

`gelu`, `causal` and `attn_scale` exist only so that the test can show that it tells a
correct model from a subtly wrong one; the defaults are GPT-2.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HF_PREFIX = "transformer."


@dataclass
class GptConfig:
    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    layer_norm_epsilon: float = 1e-5
    # Not GPT-2: deliberate deviations for the test's self-checks.
    gelu: str = "tanh"          # "tanh" (GPT-2) or "none" (exact erf GELU)
    causal: bool = True
    attn_scale: str = "head"    # "head": 1/sqrt(hs) (GPT-2); "embd": 1/sqrt(C)

    def hf_json(self):
        """The HF config.json keys the driver reads."""
        return {"vocab_size": self.vocab_size, "n_positions": self.n_positions,
                "n_embd": self.n_embd, "n_layer": self.n_layer, "n_head": self.n_head,
                "layer_norm_epsilon": self.layer_norm_epsilon}


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer whose weight is stored (in, out)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.c_attn = Conv1D(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        nh = self.cfg.n_head
        hs = C // nh
        q, k, v = self.c_attn(x).split(C, dim=2)                  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
        att = torch.matmul(q, k.transpose(-1, -2))                # (B, NH, T, T)
        scale_dim = hs if self.cfg.attn_scale == "head" else C
        att = att / torch.full([], math.sqrt(scale_dim), dtype=att.dtype)
        if self.cfg.causal:
            keep = torch.ones(T, T, dtype=torch.bool).tril()
            att = torch.where(keep, att, torch.full([], torch.finfo(att.dtype).min,
                                                    dtype=att.dtype))
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v)                                  # (B, NH, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.c_fc = Conv1D(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = Conv1D(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.cfg.gelu))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = Mlp(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    def __init__(self, cfg, dtype=torch.float32):
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd {cfg.n_embd} does not divide by n_head {cfg.n_head}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.to(dtype)

    def forward(self, idx, targets=None):
        """idx, targets: (B, T) int64. Returns logits (B, T, V) and the mean loss (or None)."""
        B, T = idx.shape
        if T > self.cfg.n_positions:
            raise ValueError(f"T {T} > n_positions {self.cfg.n_positions}")
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)                          # (B, T, C)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = torch.matmul(x, self.wte.weight.t())             # (B, T, V), tied head
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    # ---- numpy in / out, HF names ------------------------------------------------------------

    def load_numpy(self, weights):
        """Set every parameter from {name: ndarray}; names with or without "transformer.".
        Every parameter must be present with its exact shape; unknown names are refused."""
        own = dict(self.named_parameters())
        seen = set()
        for name, a in weights.items():
            key = name[len(HF_PREFIX):] if name.startswith(HF_PREFIX) else name
            if key not in own:
                raise KeyError(f"unknown GPT-2 tensor {name!r}")
            if key in seen:
                raise KeyError(f"{key!r} given twice (with and without {HF_PREFIX!r})")
            if tuple(a.shape) != tuple(own[key].shape):
                raise ValueError(f"{name}: shape {tuple(a.shape)}, expected "
                                 f"{tuple(own[key].shape)}")
            seen.add(key)
            with torch.no_grad():
                own[key].copy_(torch.from_numpy(np.asarray(a)))
        missing = sorted(set(own) - seen)
        if missing:
            raise KeyError(f"missing GPT-2 tensors: {', '.join(missing)}")

    def params_numpy(self):
        """{name: ndarray} of the parameters (HF names, no prefix), copied."""
        return {n: p.detach().numpy().copy() for n, p in self.named_parameters()}

    def grads_numpy(self):
        return {n: p.grad.detach().numpy().copy() for n, p in self.named_parameters()}


def param_shapes(cfg):
    """{name: shape} in HF layout, without building a model."""
    C, V, P = cfg.n_embd, cfg.vocab_size, cfg.n_positions
    shapes = {"wte.weight": (V, C), "wpe.weight": (P, C)}
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def train(cfg, weights, inputs, targets, steps, lr, weight_decay, betas, eps,
          dtype=torch.float32, optimizer="adamw"):
    """What the driver does (see gpt_vs_torch.py): forward + backward at `weights`, then `steps`
    AdamW steps on the same batch (one group, all parameters), then a last forward.
    optimizer="adam" (L2 weight decay, torch.optim.Adam) exists for the test's self-check.

    Returns {"logits": first forward's logits, "losses": (steps + 1,) array, "grads": initial
    gradients, "params": parameters after the steps}, all numpy in `dtype`, HF names."""
    model = Gpt2(cfg, dtype)
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
    if first_grads is None:  # steps == 0: the gradients still come from the first forward
        loss.backward()
        first_grads = model.grads_numpy()
    return {"logits": first_logits, "losses": np.array(losses),
            "grads": first_grads, "params": model.params_numpy()}
