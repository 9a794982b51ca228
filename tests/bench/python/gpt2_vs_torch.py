"""The GPT-2-shaped forward of client/python/examples/gpt2.py through cubed against the same model
in PyTorch eager on the same GPU, same weights, same run (issue 14's end-to-end goal: cubed
>= 0.7x PyTorch's speed in device time, logits within the dtype's tolerance of PyTorch's).

Device time on both sides: cubed's start_profile()/end_profile() around one forward (CUDA events
on the daemon's stream), torch.cuda.Event pairs around the same forward. Medians [min..max] over
--repeats after a warm-up. The ratio is PyTorch time / cubed time (above 1: cubed is faster).

  python3 gpt2_vs_torch.py CUBED_BINARY [--size=small] [--batch=8] [--seq=1024]
                           [--dtype=bfloat16] [--repeats=5] [--backend=cuda] [--breakdown]

--breakdown also runs one forward with each launch timed alone (its own profile), and prints the
launches by total device time, grouped by kernel, dtype and shapes, beside the forward's host
time (how long queuing its commands takes, the device's floor when it is busy for less).

Starts the daemon itself on a temporary Unix socket. Without torch (or without a GPU) it times
cubed alone and says so: `--backend=cpu --size=tiny --batch=2 --seq=16` runs anywhere.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import cubed_client

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "client", "python", "examples"))
sys.path.insert(0, HERE)
import gpt2  # noqa: E402
from kernels_vs_torch import start_daemon, summary  # noqa: E402


def torch_forward(torch, cfg, w, tokens):
    """The same model in PyTorch eager: w holds torch tensors on the GPU, tokens an int64 one."""
    F = torch.nn.functional
    batch, seq = tokens.shape
    h, hd, d = cfg.n_head, cfg.head_dim, cfg.d_model
    x = F.embedding(tokens, w["wte"]) + w["wpe"][:seq]
    for i in range(cfg.n_layer):
        p = f"h{i}."
        a = F.layer_norm(x, (d,), w[p + "ln_1.g"], w[p + "ln_1.b"], gpt2.LN_EPS)
        qkv = a @ w[p + "attn.w"] + w[p + "attn.b"]
        q, k, v = (qkv[..., j * d:(j + 1) * d].reshape(batch, seq, h, hd).transpose(1, 2)
                   for j in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(batch, seq, d)
        x = x + (y @ w[p + "proj.w"] + w[p + "proj.b"])
        m = F.layer_norm(x, (d,), w[p + "ln_2.g"], w[p + "ln_2.b"], gpt2.LN_EPS)
        m = F.gelu(m @ w[p + "fc.w"] + w[p + "fc.b"], approximate="tanh")
        x = x + (m @ w[p + "mlp_proj.w"] + w[p + "mlp_proj.b"])
    x = F.layer_norm(x, (d,), w["ln_f.g"], w["ln_f.b"], gpt2.LN_EPS)
    return x @ w["wte"].T


def breakdown(c, model, tokens) -> None:
    """One forward with every launch timed alone: device time by kernel and shapes, and the host
    time of queuing a whole forward."""
    import cProfile
    import pstats
    import threading
    out = model.forward(tokens)  # Warm: every kernel compiled and loaded.
    c.sync()
    out.close()
    # Time the queuing thread spends waiting for room in the command ring (the daemon behind).
    ring = getattr(getattr(c._transport, "_call", None), "_ring", None)
    waited = [0.0, 0]
    if ring is not None:
        plain_wait = ring._wait

        def timed_wait(*args, **kw):
            if threading.current_thread() is not threading.main_thread():
                return plain_wait(*args, **kw)  # The reply reader.
            t0 = time.perf_counter()
            try:
                return plain_wait(*args, **kw)
            finally:
                waited[0] += time.perf_counter() - t0
                waited[1] += 1

        ring._wait = timed_wait
    start = time.perf_counter()
    out = model.forward(tokens)
    queued = time.perf_counter() - start
    c.sync()
    total = time.perf_counter() - start
    out.close()
    if ring is not None:
        del ring._wait
    profiler = cProfile.Profile()
    profiler.enable()
    model.forward(tokens).close()
    profiler.disable()
    c.sync()
    groups = {}
    plain_launch = c._launch  # Every builtin wrapper's launch (cubed_client/_client.py).

    def timed_launch(name, inputs, out, **kw):
        c.start_profile()
        plain_launch(name, inputs, out, **kw)
        seconds = c.end_profile()
        tensors = [*inputs, out]
        shapes = " ".join("x".join(map(str, t.shape)) or "scalar" for t in tensors)
        dense = all(t.is_contiguous for t in tensors)
        key = (name, str(kw.get("dtype") or (inputs[0] if inputs else out).dtype),
               shapes + ("" if dense else " (strided)"))
        n, t = groups.get(key, (0, 0.0))
        groups[key] = (n + 1, t + seconds)
        return out

    c._launch = timed_launch
    try:
        model.forward(tokens).close()
    finally:
        del c._launch
    device = sum(t for _, t in groups.values())
    launches = sum(n for n, _ in groups.values())
    print(f"breakdown: {launches} launches, {device * 1e3:.2f} ms of device time timed alone; "
          f"one forward queues in {queued * 1e3:.2f} ms of host time, {total * 1e3:.2f} ms to its "
          "sync")
    print(f"of the host time, {waited[0] * 1e3:.2f} ms in {waited[1]} waits for ring room; the "
          "queuing's own profile (cProfile, inflated by it):")
    entries = pstats.Stats(profiler).stats  # (file, line, name): (cc, calls, own, cumulative, _)
    for (path, line, fn), (_, calls, own, cum, _) in sorted(entries.items(),
                                                            key=lambda kv: -kv[1][2])[:12]:
        print(f"  {own * 1e3:7.2f} ms own, {cum * 1e3:7.2f} ms with callees, {calls:5d} calls: "
              f"{os.path.basename(path)}:{line} {fn}")
    print("| kernel | dtype | shapes | launches | ms | share |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (name, dt, shapes), (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"| {name} | {dt} | {shapes} | {n} | {t * 1e3:.3f} | {t / device:.1%} |")


def load_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cubed")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--size", default="small", choices=sorted(gpt2.SIZES))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--daemon_flag", action="append", default=[],
                    help="a flag for the daemon (repeatable): --daemon_flag=--ring_spin_us=200")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time every launch of one forward alone (see the docstring)")
    args = ap.parse_args()

    cfg = gpt2.SIZES[args.size]
    weights = gpt2.make_weights(cfg)
    tokens = gpt2.make_tokens(cfg, args.batch, args.seq)
    dtype = np.dtype(gpt2._bfloat16()) if args.dtype == "bfloat16" else np.dtype(args.dtype)
    flops = 2 * args.batch * args.seq * (12 * cfg.n_layer * cfg.d_model ** 2 +
                                         cfg.d_model * cfg.vocab)  # Matmuls, attention aside.

    torch = load_torch()
    daemon, sock = start_daemon(args.cubed, args.backend, args.daemon_flag)
    try:
        with cubed_client.connect(f"unix:{sock}") as c:
            model = gpt2.CubedGPT2(c, cfg, weights, dtype)
            cubed_s, host_s, logits = [], [], None
            for r in range(args.repeats + 1):
                c.start_profile()
                t0 = time.perf_counter()
                out = model.forward(tokens)
                queued = time.perf_counter() - t0
                seconds = c.end_profile()
                if r == 0:
                    logits = out.read().astype(np.float32)
                else:
                    cubed_s.append(seconds)
                    host_s.append(queued)
                out.close()
            if args.breakdown:
                breakdown(c, model, tokens)
            model.close()
    finally:
        daemon.terminate()
        daemon.wait()
    med = statistics.median(cubed_s)
    print(f"{args.size} ({cfg.n_layer} layers, d {cfg.d_model}, vocab {cfg.vocab}), batch "
          f"{args.batch}, seq {args.seq}, {args.dtype}")
    print(f"cubed   forward {summary([s * 1e3 for s in cubed_s])} ms  "
          f"({flops / med / 1e12:.1f} TFLOP/s of matmul); its host queuing "
          f"{summary([s * 1e3 for s in host_s])} ms")
    if torch is None:
        print("torch with CUDA not available: no baseline this run")
        return 0

    tt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[
        args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    # The same bytes: the weights rounded to the dtype once, in numpy, as cubed's were.
    tw = {k: torch.from_numpy(v.astype(dtype).astype(np.float32)).cuda().to(tt)
          for k, v in weights.items()}
    ttok = torch.from_numpy(tokens).cuda()
    torch_s, ref = [], None
    with torch.no_grad():
        for r in range(args.repeats + 1):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = torch_forward(torch, cfg, tw, ttok)
            end.record()
            torch.cuda.synchronize()
            if r == 0:
                ref = out.float().cpu().numpy()
            else:
                torch_s.append(start.elapsed_time(end) / 1e3)
    tmed = statistics.median(torch_s)
    print(f"PyTorch forward {summary([s * 1e3 for s in torch_s])} ms  "
          f"({flops / tmed / 1e12:.1f} TFLOP/s of matmul)")
    span = float(np.ptp(ref))
    err = float(np.abs(logits - ref).max())
    agree = float((logits.argmax(-1) == ref.argmax(-1)).mean())
    print(f"ratio (PyTorch time / cubed time) {tmed / med:.3f}x  (goal >= 0.7x)")
    print(f"logits: max |cubed - PyTorch| {err:.3g} of a span of {span:.3g} "
          f"({err / span:.2%}); argmax agrees at {agree:.2%} of positions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
