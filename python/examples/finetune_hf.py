"""Fine-tune a causal LM with strata's optimizers, states on NVMe.

    python finetune_hf.py                                  # a small nn.TransformerEncoder LM
    python finetune_hf.py --model /path/to/hf-model        # a Hugging Face causal LM folder
    python finetune_hf.py --optimizer cpuadam              # DeepSpeedCPUAdam's drop-in instead

The Hugging Face path needs transformers and a model folder on disk (nothing is downloaded).
The user code a training script needs is the block between the two "---" comments.
"""
import argparse
import os
import tempfile

import torch

import strata
from strata.offload import OffloadOptimizer
from strata.optim import CPUAdam


class TinyCausalLM(torch.nn.Module):
    """A byte-level transformer LM built from torch.nn (used when no --model is given)."""

    def __init__(self, vocab=256, d=128, layers=2, heads=4, seq=64):
        super().__init__()
        self.emb, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        block = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.body, self.head = torch.nn.TransformerEncoder(block, layers), torch.nn.Linear(d, vocab)

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        x = self.emb(input_ids) + self.pos(torch.arange(t))
        logits = self.head(self.body(x, mask=mask))
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 labels[:, 1:].reshape(-1))
        return argparse.Namespace(loss=loss, logits=logits)


def load_model(path):
    if path is None:
        torch.manual_seed(0)
        return TinyCausalLM(), lambda text: list(text.encode())
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415
    tok = AutoTokenizer.from_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path), lambda text: tok(text)["input_ids"]


def batches(ids, batch, seq, steps):
    ids = torch.tensor(ids)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq, (batch,), generator=g)
        x = torch.stack([ids[s:s + seq] for s in starts])
        yield {"input_ids": x, "labels": x}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="a Hugging Face causal LM folder")
    ap.add_argument("--optimizer", choices=["offload", "cpuadam"], default="offload")
    ap.add_argument("--states", choices=["cpu", "nvme"], default="nvme")
    ap.add_argument("--nvme-path", default=None, help="default: a temporary folder")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    model, tokenize = load_model(a.model)
    ids = tokenize(open(__file__).read() * 4)  # this file as the training text
    nvme = a.nvme_path or tempfile.mkdtemp(prefix="strata-nvme-")

    # --- the user code: swap the optimizer, keep the loop ---------------------------------
    if a.optimizer == "offload":
        opt = OffloadOptimizer(model.parameters(), lr=a.lr, weight_decay=0.01,
                               states=a.states, nvme_path=nvme, clip_grad_norm=1.0)
    else:
        opt = CPUAdam(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5))
    model.train()
    for step, batch in enumerate(batches(ids, batch=4, seq=64, steps=a.steps)):
        loss = model(**batch).loss
        loss.backward()
        if a.optimizer == "cpuadam":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    # --- end of the user code ----------------------------------------------------------------

    if a.optimizer == "offload":
        print(opt.describe())
        opt.save(os.path.join(nvme, "checkpoint"))
        print(f"optimizer checkpoint: {os.path.join(nvme, 'checkpoint')}")
        opt.close()
    print(f"strata {strata.__version__} ({strata.simd_level()})")


if __name__ == "__main__":
    main()
