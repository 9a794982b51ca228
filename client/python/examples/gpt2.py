#!/usr/bin/env python3
"""A GPT-2-shaped decoder forward pass written with cubed's builtins, beside a numpy reference of
the same model. Weights come from a fixed seed (nothing is downloaded).

    python3 examples/gpt2.py                                  # tiny model, checks against numpy
    python3 examples/gpt2.py --size=small --batch=8 --seq=1024 --dtype=bfloat16 --no-check

The model is GPT-2's: token and position embeddings, then per layer a pre-norm causal
self-attention block and a pre-norm MLP (gelu, tanh form) with residual adds, a final layer norm
and logits from the tied token embedding. Every step on the daemon is a builtin: gather
(embeddings), layer_norm, matmul, add, gelu, and the SDK's scaled_dot_product_attention (matmul
batched over heads, mul, a causal where, softmax, matmul).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import time
from typing import Dict, Optional

import numpy as np

import cubed_client


@dataclasses.dataclass(frozen=True)
class Config:
    n_layer: int
    d_model: int
    n_head: int
    vocab: int
    n_ctx: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


SIZES = {
    # GPT-2 small's shape.
    "small": Config(n_layer=12, d_model=768, n_head=12, vocab=50257, n_ctx=1024),
    # The same structure at a size the CPU backend runs in a test.
    "tiny": Config(n_layer=2, d_model=64, n_head=4, vocab=257, n_ctx=32),
}

LN_EPS = 1e-5


def make_weights(cfg: Config, seed: int = 0) -> Dict[str, np.ndarray]:
    """GPT-2's parameter layout in float32 from `seed`: N(0, 0.02) matrices (the residual
    projections scaled by 1/sqrt(2 n_layer), as GPT-2 initializes them), and layer-norm gains and
    all biases perturbed so that no parameter is an identity or zero."""
    rng = np.random.default_rng(seed)
    d, f = cfg.d_model, 4 * cfg.d_model

    def normal(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w: Dict[str, np.ndarray] = {
        "wte": normal(cfg.vocab, d),
        "wpe": normal(cfg.n_ctx, d, std=0.01),
        "ln_f.g": 1 + normal(d, std=0.1),
        "ln_f.b": normal(d),
    }
    proj_std = 0.02 / math.sqrt(2 * cfg.n_layer)
    for i in range(cfg.n_layer):
        p = f"h{i}."
        w[p + "ln_1.g"] = 1 + normal(d, std=0.1)
        w[p + "ln_1.b"] = normal(d)
        w[p + "attn.w"] = normal(d, 3 * d)
        w[p + "attn.b"] = normal(3 * d)
        w[p + "proj.w"] = normal(d, d, std=proj_std)
        w[p + "proj.b"] = normal(d)
        w[p + "ln_2.g"] = 1 + normal(d, std=0.1)
        w[p + "ln_2.b"] = normal(d)
        w[p + "fc.w"] = normal(d, f)
        w[p + "fc.b"] = normal(f)
        w[p + "mlp_proj.w"] = normal(f, d, std=proj_std)
        w[p + "mlp_proj.b"] = normal(d)
    return w


def make_tokens(cfg: Config, batch: int, seq: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, cfg.vocab, size=(batch, seq), dtype=np.int64)


# ---- numpy reference (float64 throughout) ----

def _layer_norm_np(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LN_EPS) * g + b


def _gelu_tanh_np(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def forward_numpy(cfg: Config, w: Dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    """Logits [batch, seq, vocab] in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    batch, seq = tokens.shape
    h, hd = cfg.n_head, cfg.head_dim
    x = w["wte"][tokens] + w["wpe"][:seq]
    mask = np.triu(np.full((seq, seq), -np.inf), k=1)
    for i in range(cfg.n_layer):
        p = f"h{i}."
        a = _layer_norm_np(x, w[p + "ln_1.g"], w[p + "ln_1.b"])
        qkv = a @ w[p + "attn.w"] + w[p + "attn.b"]
        q, k, v = (qkv[..., j * cfg.d_model:(j + 1) * cfg.d_model]
                   .reshape(batch, seq, h, hd).transpose(0, 2, 1, 3) for j in range(3))
        att = _softmax_np(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + mask)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(batch, seq, cfg.d_model)
        x = x + y @ w[p + "proj.w"] + w[p + "proj.b"]
        m = _layer_norm_np(x, w[p + "ln_2.g"], w[p + "ln_2.b"])
        m = _gelu_tanh_np(m @ w[p + "fc.w"] + w[p + "fc.b"])
        x = x + m @ w[p + "mlp_proj.w"] + w[p + "mlp_proj.b"]
    x = _layer_norm_np(x, w["ln_f.g"], w["ln_f.b"])
    return x @ w["wte"].T


# ---- the same model through cubed ----

class CubedGPT2:
    """The model's weights on a daemon, in `dtype` (float32, float16 or ml_dtypes.bfloat16), and
    its forward pass as builtins. Tensors live as long as this object (close() frees them)."""

    def __init__(self, client: cubed_client.Client, cfg: Config, weights: Dict[str, np.ndarray],
                 dtype: np.dtype = np.dtype(np.float32)) -> None:
        self.client, self.cfg, self.dtype = client, cfg, np.dtype(dtype)
        self.w = {k: client.create(v.astype(self.dtype)) for k, v in weights.items()}

    def close(self) -> None:
        for t in self.w.values():
            t.close()
        self.w.clear()

    def forward(self, tokens: np.ndarray) -> cubed_client.Tensor:
        """Logits [batch, seq, vocab] in the model's dtype, on the daemon (read() fetches them).
        Queued asynchronously: the daemon runs the commands in order."""
        c, cfg, w = self.client, self.cfg, self.w
        batch, seq = tokens.shape
        if seq > cfg.n_ctx:
            raise ValueError(f"sequence of {seq} tokens is longer than n_ctx={cfg.n_ctx}")
        h, hd, d = cfg.n_head, cfg.head_dim, cfg.d_model
        toks = c.create(np.ascontiguousarray(tokens, dtype=np.int64))
        x = c.gather(w["wte"], toks, axis=0) + w["wpe"][:seq]
        for i in range(cfg.n_layer):
            p = f"h{i}."
            a = c.layer_norm(x, w[p + "ln_1.g"], w[p + "ln_1.b"], eps=LN_EPS)
            qkv = a @ w[p + "attn.w"] + w[p + "attn.b"]
            q, k, v = (qkv[..., j * d:(j + 1) * d].reshape(batch, seq, h, hd)
                       .transpose(0, 2, 1, 3) for j in range(3))
            y = c.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(0, 2, 1, 3).reshape(batch, seq, d)
            x = x + (y @ w[p + "proj.w"] + w[p + "proj.b"])
            m = c.layer_norm(x, w[p + "ln_2.g"], w[p + "ln_2.b"], eps=LN_EPS)
            m = c.gelu(m @ w[p + "fc.w"] + w[p + "fc.b"], approximate="tanh")
            x = x + (m @ w[p + "mlp_proj.w"] + w[p + "mlp_proj.b"])
        x = c.layer_norm(x, w["ln_f.g"], w["ln_f.b"], eps=LN_EPS)
        return x @ w["wte"].transpose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=None, help="daemon address (default: its socket)")
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--repeats", type=int, default=3, help="timed forward passes")
    ap.add_argument("--trace", default=None, metavar="FILE",
                    help="write the last forward's daemon trace (Chrome trace-event JSON)")
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="skip the numpy reference (slow at the small size)")
    args = ap.parse_args()

    cfg = SIZES[args.size]
    dtype = np.dtype(args.dtype) if args.dtype != "bfloat16" else np.dtype(_bfloat16())
    weights = make_weights(cfg)
    tokens = make_tokens(cfg, args.batch, args.seq)
    with cubed_client.connect(args.address) as client:
        model = CubedGPT2(client, cfg, weights, dtype)
        logits: Optional[np.ndarray] = None
        times = []
        repeats = max(1, args.repeats)
        for i in range(repeats):
            traced = args.trace is not None and i == repeats - 1
            with client.trace() if traced else contextlib.nullcontext() as trace:
                t0 = time.perf_counter()
                out = model.forward(tokens)
                logits = out.read()
                times.append(time.perf_counter() - t0)
            out.close()
            if traced:
                trace.save(args.trace)
                print(f"trace of the last forward: {len(trace.events)} commands -> {args.trace}")
        model.close()
    print(f"{args.size} model, batch {args.batch}, seq {args.seq}, {args.dtype}: forward "
          f"median {sorted(times)[len(times) // 2] * 1e3:.1f} ms over {len(times)}")
    if args.check:
        ref = forward_numpy(cfg, weights, tokens)
        err = np.abs(logits.astype(np.float64) - ref).max()
        print(f"max |logits - numpy| = {err:.3g} (logits span {np.ptp(ref):.3g})")


def _bfloat16() -> type:
    import ml_dtypes  # The SDK's bfloat16 (a dependency of cubed_client).
    return ml_dtypes.bfloat16


if __name__ == "__main__":
    main()
