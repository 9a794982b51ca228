"""Builtin kernels through the Python SDK against PyTorch on the same GPU, same run (issue 14):

  * add, 64M f32                          GB/s of inputs + output
  * sum, mean, max, min, argmax of 64M f32 (full reductions)   GB/s of input
  * softmax over rows, 4096 x 4096 f32    GB/s of input + output
  * layer_norm (weight, bias) and rms_norm (weight) over rows, 4096 x 4096 f32 and bf16
                                          GB/s of input + output
  * matmul f32 4096^3 (no TF32)           TFLOP/s
  * matmul f32 4096^3 with TF32 allowed   TFLOP/s
  * causal attention (SDPA: causal_attention) bf16 and f16, causal_softmax bf16, GPT-2 shapes
  * sum, mean, max, min, argmax along either axis of 4096 x 16384 f32   GB/s of input
  * batched matmul f16 and bf16, 32 x 1024 x 1024 x 64   TFLOP/s
  * matmul bf16 and f16, 4096^3 and 8192^3 (f32 accumulation, tensor cores)   TFLOP/s
  * add, 64M f16 and bf16; cast f32 -> bf16 and bf16 -> f32, 64M   GB/s of inputs + output
  * --types: add of 64M in every other type, and casts of 64M between every pair of the twelve
    types, each also against torch's device-to-device copy of 64M f32 (the issue's bar:
    elementwise and casts >= 0.9x of copy bandwidth); sum, max, argmax of 64M and along axis 1
    of 4096 x 16384, and softmax over rows of 4096 x 4096, in bf16 and f16

Device time on both sides: cubed's start_profile()/end_profile() (CUDA events on the daemon's
stream) against torch.cuda.Event pairs. Each measurement queues a long filler kernel first, so
that the timed kernels start back to back on a busy device and neither side's launch latency is
counted, then times --batch launches and divides. Medians [min..max] over --repeats after a
warm-up; the ratio is cubed / PyTorch throughput.

  python3 kernels_vs_torch.py CUBED_BINARY [--backend=cuda] [--repeats=7] [--batch=10]
                              [--rows=NAME,...]

Starts the daemon itself on a temporary Unix socket.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np

import cubed_client


def summary(xs):
    return f"{statistics.median(xs):.4g} [{min(xs):.4g}..{max(xs):.4g}]"


def start_daemon(binary, backend, flags=()):
    d = tempfile.mkdtemp(prefix="cubed-kbench-")
    sock, ready = os.path.join(d, "cubed.sock"), os.path.join(d, "ready")
    daemon = subprocess.Popen([binary, f"--listen={sock}", f"--ready_file={ready}",
                               f"--backend={backend}", *flags], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (os.path.exists(ready) and open(ready).read().endswith("\n")):
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            raise RuntimeError("the daemon did not start")
        time.sleep(0.02)
    return daemon, sock


def time_cubed(c, filler, op, batch, repeats):
    """Seconds of device time per op: medians come from the caller."""
    out = []
    for r in range(repeats + 1):
        keep = [filler()]
        c.start_profile()
        for _ in range(batch):
            keep.append(op())
        seconds = c.end_profile()
        del keep
        if r > 0:
            out.append(seconds / batch)
    return out


def time_torch(torch, filler, op, batch, repeats):
    out = []
    for r in range(repeats + 1):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        keep = [filler()]
        start.record()
        for _ in range(batch):
            keep.append(op())
        end.record()
        torch.cuda.synchronize()
        del keep
        if r > 0:
            out.append(start.elapsed_time(end) / 1e3 / batch)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cubed")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--types", action="store_true", help="add the every-type rows (elementwise, "
                    "casts between every pair, half-type reductions and softmax)")
    ap.add_argument("--rows", default="", help="only rows whose name holds one of these "
                    "comma-separated strings (a comma followed by a space is part of a string, "
                    "as in the row name \"copy, 64M f32\")")
    args = ap.parse_args()
    # Split at commas not followed by a space: "copy, 64M f32,fill" is two strings, where a plain
    # split made " 64M f32" of the first, which every row holds (GPU run 95 ran them all).
    wanted = [r for r in re.split(r",(?! )", args.rows) if r] if args.rows else []
    import torch  # Only the baselines need it.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    rng = np.random.default_rng(0)
    n = 64 << 20
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    s = rng.standard_normal((4096, 4096), dtype=np.float32)
    ma = rng.standard_normal((4096, 4096), dtype=np.float32)
    mb = rng.standard_normal((4096, 4096), dtype=np.float32)
    tx, ty, ts = (torch.from_numpy(v).cuda() for v in (x, y, s))
    tma, tmb = torch.from_numpy(ma).cuda(), torch.from_numpy(mb).cuda()

    daemon, sock = start_daemon(args.cubed, args.backend)
    try:
        with cubed_client.connect(f"unix:{sock}") as c:
            cx, cy, cs, cma, cmb = (c.create(v) for v in (x, y, s, ma, mb))
            # Results first: a fast kernel that computes something else is no result.
            got_sum = float(c.read(c.sum(cx)))
            want_sum = float(tx.double().sum())
            sm_err = float(np.abs(c.read(c.softmax(cs)) - torch.softmax(ts, -1).cpu().numpy()).max())
            print(f"sum 64M: cubed {got_sum:.6g}, torch (f64) {want_sum:.6g}; "
                  f"softmax max |diff| {sm_err:.3g}")
            nw = rng.standard_normal(4096, dtype=np.float32)
            nb = rng.standard_normal(4096, dtype=np.float32)
            tnw, tnb = torch.from_numpy(nw).cuda(), torch.from_numpy(nb).cuda()
            norms = {}  # dtype name: cubed (x, weight, bias), torch (x, weight, bias).
            for k, npt, tt in (("f32", np.float32, torch.float32),
                               ("bf16", ml_dtypes.bfloat16, torch.bfloat16)):
                norms[k] = ((c.create(s.astype(npt)), c.create(nw.astype(npt)),
                             c.create(nb.astype(npt))), (ts.to(tt), tnw.to(tt), tnb.to(tt)))
            F = torch.nn.functional
            (cn, cw, cb), (tn, tw, tb) = norms["f32"]
            ln_err = float(np.abs(c.read(c.layer_norm(cn, cw, cb)) -
                                  F.layer_norm(tn, (4096,), tw, tb).cpu().numpy()).max())
            rms_err = float(np.abs(c.read(c.rms_norm(cn, cw, eps=1e-6)) -
                                   F.rms_norm(tn, (4096,), tw, 1e-6).cpu().numpy()).max())
            print(f"layer_norm f32 max |diff| {ln_err:.3g}; rms_norm f32 max |diff| {rms_err:.3g}")
            # Half types: the same values on both sides (ml_dtypes and torch both round to
            # nearest even from f32).
            half = {"f16": (np.float16, torch.float16), "bf16": (ml_dtypes.bfloat16, torch.bfloat16)}
            hx = {k: (c.create(x.astype(npt)), tx.to(tt)) for k, (npt, tt) in half.items()}
            hy = {k: (c.create(y.astype(npt)), ty.to(tt)) for k, (npt, tt) in half.items()}
            mm = {}
            for size in (4096, 8192):
                a32 = rng.standard_normal((size, size), dtype=np.float32)
                b32 = rng.standard_normal((size, size), dtype=np.float32)
                for k, (npt, tt) in half.items():
                    ca, cb = c.create(a32.astype(npt)), c.create(b32.astype(npt))
                    ta = torch.from_numpy(a32).cuda().to(tt)
                    tb = torch.from_numpy(b32).cuda().to(tt)
                    mm[(k, size)] = (ca, cb, ta, tb)
                    if size == 4096:
                        got = c.read(c.matmul(ca, cb)).astype(np.float32)
                        want = torch.matmul(ta, tb).float().cpu().numpy()
                        rel = float(np.abs(got - want).max() / np.abs(want).max())
                        print(f"matmul {k} {size}^3: max |cubed - torch| / max |torch| = {rel:.3g}")
            def tf32_matmul(x, y):
                torch.backends.cuda.matmul.allow_tf32 = True
                try:
                    return torch.matmul(x, y)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = False

            cubed_filler = lambda: c.matmul(cma, cmb)
            torch_filler = lambda: torch.matmul(tma, tmb)
            rows = [
                ("add, 64M f32", "GB/s", 12.0 * n / 1e9,
                 lambda: c.add(cx, cy), lambda: torch.add(tx, ty)),
                ("sum of 64M f32 (full reduction)", "GB/s", 4.0 * n / 1e9,
                 lambda: c.sum(cx), lambda: tx.sum()),
                ("mean of 64M f32 (full reduction)", "GB/s", 4.0 * n / 1e9,
                 lambda: c.mean(cx), lambda: tx.mean()),
                ("max of 64M f32 (full reduction)", "GB/s", 4.0 * n / 1e9,
                 lambda: c.max(cx), lambda: tx.amax()),
                ("min of 64M f32 (full reduction)", "GB/s", 4.0 * n / 1e9,
                 lambda: c.min(cx), lambda: tx.amin()),
                ("argmax of 64M f32 (full reduction)", "GB/s", 4.0 * n / 1e9,
                 lambda: c.argmax(cx), lambda: tx.argmax()),
                ("softmax over rows, 4096 x 4096 f32", "GB/s", 8.0 * 4096 * 4096 / 1e9,
                 lambda: c.softmax(cs), lambda: torch.softmax(ts, -1)),
            ]
            for k, ((cn, cw, cb), (tn, tw, tb)) in norms.items():
                size = (4.0 if k == "f32" else 2.0) * 2 * 4096 * 4096 / 1e9
                rows.append((f"layer_norm over rows, 4096 x 4096 {k}", "GB/s", size,
                             lambda cn=cn, cw=cw, cb=cb: c.layer_norm(cn, cw, cb),
                             lambda tn=tn, tw=tw, tb=tb: F.layer_norm(tn, (4096,), tw, tb)))
                rows.append((f"rms_norm over rows, 4096 x 4096 {k}", "GB/s", size,
                             lambda cn=cn, cw=cw: c.rms_norm(cn, cw, eps=1e-6),
                             lambda tn=tn, tw=tw: F.rms_norm(tn, (4096,), tw, 1e-6)))
            rows += [
                ("matmul f32 4096^3 (no TF32)", "TFLOP/s", 2.0 * 4096 ** 3 / 1e12,
                 lambda: c.matmul(cma, cmb), lambda: torch.matmul(tma, tmb)),
                ("matmul f32 4096^3 (TF32 allowed on both sides)", "TFLOP/s",
                 2.0 * 4096 ** 3 / 1e12, lambda: c.matmul(cma, cmb, allow_tf32=True),
                 lambda: tf32_matmul(tma, tmb)),
            ]
            for (k, size), (ca, cb, ta, tb) in mm.items():
                rows.append((f"matmul {k} {size}^3", "TFLOP/s", 2.0 * size ** 3 / 1e12,
                             lambda ca=ca, cb=cb: c.matmul(ca, cb),
                             lambda ta=ta, tb=tb: torch.matmul(ta, tb)))
            for k in half:
                (ca, ta), (cb, tb) = hx[k], hy[k]
                rows.append((f"add, 64M {k}", "GB/s", 6.0 * n / 1e9,
                             lambda ca=ca, cb=cb: c.add(ca, cb),
                             lambda ta=ta, tb=tb: torch.add(ta, tb)))
            # GPT-2's logits: [8192, 768] x [768, 50257] bf16, rows of 100,514 bytes (not 16-byte
            # aligned): cuBLAS picks a slow kernel for both sides (GPU run 27: 95 TFLOP/s each,
            # padded rows no faster).
            lx = rng.standard_normal((8192, 768), dtype=np.float32)
            lw = rng.standard_normal((50257, 768), dtype=np.float32)
            clx = c.create(lx.astype(ml_dtypes.bfloat16))
            clw = c.create(lw.astype(ml_dtypes.bfloat16)).transpose()
            tlx = torch.from_numpy(lx).cuda().to(torch.bfloat16)
            tlw = torch.from_numpy(lw).cuda().to(torch.bfloat16).T
            rows.append(("matmul bf16 8192x768 @ 768x50257 (GPT-2 logits)", "TFLOP/s",
                         2.0 * 8192 * 768 * 50257 / 1e12, lambda: c.matmul(clx, clw),
                         lambda: torch.matmul(tlx, tlw)))
            # GPT-2 small's attention: batch 8, 12 heads, 1024 positions, head_dim 64, bf16.
            # cubed: causal_attention (flash attention on the tensor cores); torch: flash attention.
            qkv = [rng.standard_normal((8, 12, 1024, 64), dtype=np.float32) for _ in range(3)]
            for name, cdt, tdt in (("bf16", ml_dtypes.bfloat16, torch.bfloat16),
                                   ("f16", np.float16, torch.float16)):
                cq, ck, cv = (c.create(t.astype(cdt)) for t in qkv)
                tq, tk, tv = (torch.from_numpy(t).cuda().to(tdt) for t in qkv)
                if not wanted or any(r in f"causal attention {name}"
                                     for r in wanted):  # Results first.
                    got = c.scaled_dot_product_attention(cq, ck, cv, is_causal=True).read()
                    want = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
                    att_err = float(np.abs(got.astype(np.float32) -
                                           want.float().cpu().numpy()).max())
                    print(f"causal attention {name}: max |diff| from torch {att_err:.3g}")
                rows.append((f"causal attention {name} 8x12x1024x64 (SDPA)", "TFLOP/s",
                             4.0 * 8 * 12 * 1024 * 1024 * 64 / 2 / 1e12,
                             lambda cq=cq, ck=ck, cv=cv:
                                 c.scaled_dot_product_attention(cq, ck, cv, is_causal=True),
                             lambda tq=tq, tk=tk, tv=tv:
                                 F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)))
            cscore = c.create(rng.standard_normal((8, 12, 1024, 1024),
                                                  dtype=np.float32).astype(ml_dtypes.bfloat16))
            tscore = torch.from_numpy(cscore.read().astype(np.float32)).cuda().to(torch.bfloat16)
            # Bytes of the input's visible half and the whole output; torch's softmax of the whole
            # rows (no causal softmax kernel of its own) reads twice as much.
            rows.append(("causal_softmax bf16 8x12x1024x1024 (vs softmax)", "GB/s",
                         1.5 * 2 * 8 * 12 * 1024 * 1024 / 1e9,
                         lambda: c.causal_softmax(cscore, 0.125),
                         lambda: torch.softmax(tscore, -1)))
            # Issue 14's reductions along either axis of a 4096 x 16384 f32 matrix (GB/s of input):
            # x64 viewed as that matrix, so no new 256 MiB buffer.
            cm2, tm2 = cx.reshape(4096, 16384), tx.view(4096, 16384)
            for axis in (0, 1):
                for op in ("sum", "mean", "max", "min", "argmax"):
                    ours = getattr(c, op)
                    theirs = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax,
                              "min": torch.amin, "argmax": torch.argmax}[op]
                    rows.append((f"{op} of 4096 x 16384 f32 along axis {axis}", "GB/s",
                                 4.0 * n / 1e9,
                                 lambda ours=ours, axis=axis: ours(cm2, axis=axis),
                                 lambda theirs=theirs, axis=axis: theirs(tm2, dim=axis)))
            # Batched half matmul, issue 14's example shape: 32 x [1024, 1024] @ [1024, 64].
            bq = rng.standard_normal((32, 1024, 1024), dtype=np.float32)
            bk = rng.standard_normal((32, 1024, 64), dtype=np.float32)
            for k, (npt, tt) in half.items():
                cbq, cbk = c.create(bq.astype(npt)), c.create(bk.astype(npt))
                tbq = torch.from_numpy(bq).cuda().to(tt)
                tbk = torch.from_numpy(bk).cuda().to(tt)
                rows.append((f"batched matmul {k} 32 x 1024 x 1024 x 64", "TFLOP/s",
                             2.0 * 32 * 1024 * 1024 * 64 / 1e12,
                             lambda cbq=cbq, cbk=cbk: c.matmul(cbq, cbk),
                             lambda tbq=tbq, tbk=tbk: torch.matmul(tbq, tbk)))
            cbf, tbf = hx["bf16"]
            rows.append(("cast 64M f32 -> bf16", "GB/s", 6.0 * n / 1e9,
                         lambda: c.cast(cx, ml_dtypes.bfloat16), lambda: tx.to(torch.bfloat16)))
            rows.append(("cast 64M bf16 -> f32", "GB/s", 6.0 * n / 1e9,
                         lambda: c.cast(cbf, np.float32), lambda: tbf.to(torch.float32)))
            if args.types:
                rows += type_rows(c, torch, rng, n)
            table = []
            for name, unit, work, ours, theirs in rows:
                if wanted and not any(r in name for r in wanted):
                    continue
                a = [work / t for t in time_cubed(c, cubed_filler, ours, args.batch, args.repeats)]
                b = [] if theirs is None else [
                    work / t for t in time_torch(torch, torch_filler, theirs, args.batch,
                                                 args.repeats)]
                table.append((name, unit, a, b))
            copy_src = tx
            copy_dst = torch.empty_like(tx)
            copy = [8.0 * n / 1e9 / t for t in
                    time_torch(torch, torch_filler, lambda: copy_dst.copy_(copy_src), args.batch,
                               args.repeats)]
    finally:
        daemon.terminate()
        daemon.wait()

    print(f"\n{time.strftime('%Y-%m-%d')} on {torch.cuda.get_device_name()}; medians [min..max] of "
          f"{args.repeats} after a warm-up, {args.batch} launches each\n")
    print("| kernel | cubed | PyTorch | ratio |")
    print("| --- | --- | --- | --- |")
    for name, unit, a, b in table:
        ratio = statistics.median(a) / statistics.median(b) if b else float("nan")
        theirs = f"{summary(b)} {unit}" if b else "(not in torch)"
        print(f"| {name} | {summary(a)} {unit} | {theirs} | {ratio:.2f}x |")
    bar = statistics.median(copy)
    print(f"\ntorch device-to-device copy of 64M f32: {summary(copy)} GB/s (read + write)\n")
    print("| elementwise or cast | cubed GB/s | / copy bandwidth | goal >= 0.9x |")
    print("| --- | --- | --- | --- |")
    for name, unit, a, b in table:
        if name.startswith(("add, 64M", "cast 64M", "copy, 64M", "fill 64M")):
            r = statistics.median(a) / bar
            print(f"| {name} | {statistics.median(a):.4g} | {r:.2f}x | "
                  f"{'met' if r >= 0.9 else 'MISSED'} |")
    # The casts against torch's copy of the same bytes (rows "copy, N bytes x 64M u8").
    same = {int(name.split()[1]): statistics.median(b) for name, unit, a, b in table
            if name.endswith("(a cast's traffic)") and b}
    if same:
        print("\n| cast | cubed GB/s | / torch's copy of the same bytes | goal >= 0.9x |")
        print("| --- | --- | --- | --- |")
        for name, unit, a, b in table:
            if name.startswith("cast 64M ") and " -> " in name:
                src, dst = name.split()[2], name.split()[4]
                total = TYPE_SIZES[src] + TYPE_SIZES[dst]
                if total in same:
                    r = statistics.median(a) / same[total]
                    print(f"| {name} | {statistics.median(a):.4g} | {r:.2f}x | "
                          f"{'met' if r >= 0.9 else 'MISSED'} |")
    return 0


# numpy dtype, torch dtype name (None: torch has no such CUDA type), short name.
TYPES = (("f64", "float64", "float64"), ("f32", "float32", "float32"),
         ("f16", "float16", "float16"), ("bf16", "bfloat16", "bfloat16"),
         ("i64", "int64", "int64"), ("i32", "int32", "int32"), ("u32", "uint32", "uint32"),
         ("i16", "int16", "int16"), ("u16", "uint16", "uint16"), ("i8", "int8", "int8"),
         ("u8", "uint8", "uint8"), ("bool", "bool", "bool"))


TYPE_SIZES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "u32": 4, "i16": 2,
              "u16": 2, "i8": 1, "u8": 1, "bool": 1}


def type_rows(c, torch, rng, n):
    """The --types rows: every type's add, every pair's cast, half-type reductions/softmax."""
    def np_type(name):
        return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)

    base = rng.integers(0, 100, n, dtype=np.int64)  # Representable in every type but bool.
    made = {}
    for short, npn, tn in TYPES:
        v = (base & 1).astype(np.bool_) if short == "bool" else base.astype(np_type(npn))
        made[short] = (c.create(v), torch.from_numpy(v.view(np.uint16) if short == "bf16" else v)
                       .cuda())
        if short == "bf16":
            made[short] = (made[short][0], made[short][1].view(torch.bfloat16))
    cv, tv = made["f32"]
    copy_dst = torch.empty_like(tv)
    rows = [("copy, 64M f32 (device to device)", "GB/s", 8.0 * n / 1e9,
             lambda cv=cv: c.copy(cv), lambda tv=tv: copy_dst.copy_(tv))]

    # Write-only bandwidth: the bar casts that widen (mostly writes) may be held to.
    for short, npn in (("f64", "float64"), ("f32", "float32"), ("i8", "int8")):
        tbuf = torch.empty(n, dtype=getattr(torch, npn), device="cuda")
        rows.append((f"fill 64M {short} (write only)", "GB/s",
                     1.0 * np.dtype(npn).itemsize * n / 1e9,
                     lambda npn=npn: c.full((n,), 1, np.dtype(npn)),
                     lambda tbuf=tbuf: tbuf.fill_(1)))

    def torch_or_none(fn):
        # None when torch cannot run it on CUDA (uint16/uint32 arithmetic, for example).
        try:
            fn()
            torch.cuda.synchronize()
            return fn
        except (RuntimeError, TypeError):
            return None

    for short, npn, tn in TYPES:
        if short in ("f32", "f16", "bf16"):
            continue  # Rows of their own above.
        cv, tv = made[short]
        size = np.dtype(np_type(npn)).itemsize
        if short == "bool":  # No add of bools: their elementwise op is maximum (logical or).
            rows.append(("add, 64M bool (maximum: logical or)", "GB/s", 3.0 * n / 1e9,
                         lambda cv=cv: c.maximum(cv, cv),
                         torch_or_none(lambda tv=tv: torch.logical_or(tv, tv))))
            continue
        rows.append((f"add, 64M {short}", "GB/s", 3.0 * size * n / 1e9,
                     lambda cv=cv: c.add(cv, cv),
                     torch_or_none(lambda tv=tv: torch.add(tv, tv))))
    for src, snp, _ in TYPES:
        for dst, dnp, dtn in TYPES:
            if src == dst:
                continue
            cv, tv = made[src]
            size = np.dtype(np_type(snp)).itemsize + np.dtype(np_type(dnp)).itemsize
            tdt = getattr(torch, dtn)
            rows.append((f"cast 64M {src} -> {dst}", "GB/s", 1.0 * size * n / 1e9,
                         lambda cv=cv, d=np_type(dnp): c.cast(cv, d),
                         torch_or_none(lambda tv=tv, tdt=tdt: tv.to(tdt))))
    # A copy moving as many bytes as a cast of 64M elements of `total` bytes (input + output): the
    # bar that counts the same launch and ramp costs (a cast from i8 moves a quarter of the f32
    # copy's bytes, so fixed costs weigh four times as much).
    for total in sorted({np.dtype(np_type(a)).itemsize + np.dtype(np_type(b)).itemsize
                         for _, a, _ in TYPES for _, b, _ in TYPES}):
        half_bytes = total * n // 2
        cu = c.create(np.zeros(half_bytes, np.uint8))
        tsrc = torch.zeros(half_bytes, dtype=torch.uint8, device="cuda")
        tdst = torch.empty_like(tsrc)
        rows.append((f"copy, {total} bytes x 64M u8 (a cast's traffic)", "GB/s",
                     1.0 * total * n / 1e9, lambda cu=cu: c.copy(cu),
                     lambda tsrc=tsrc, tdst=tdst: tdst.copy_(tsrc)))
    m = rng.standard_normal((4096, 16384), dtype=np.float32)
    sm = rng.standard_normal((4096, 4096), dtype=np.float32)
    for short, npt, tt in (("bf16", ml_dtypes.bfloat16, torch.bfloat16),
                           ("f16", np.float16, torch.float16)):
        cm, tm = c.create(m.astype(npt)), torch.from_numpy(m).cuda().to(tt)
        cs, ts = c.create(sm.astype(npt)), torch.from_numpy(sm).cuda().to(tt)
        flat_c, flat_t = cm.reshape(4096 * 16384), tm.view(-1)
        for op, theirs in (("sum", torch.sum), ("max", torch.amax), ("argmax", torch.argmax)):
            ours = getattr(c, op)
            rows.append((f"{op} of 64M {short} (full reduction)", "GB/s", 2.0 * n / 1e9,
                         lambda ours=ours, x=flat_c: ours(x),
                         lambda theirs=theirs, x=flat_t: theirs(x)))
            rows.append((f"{op} of 4096 x 16384 {short} along axis 1", "GB/s", 2.0 * n / 1e9,
                         lambda ours=ours, x=cm: ours(x, axis=1),
                         lambda theirs=theirs, x=tm: theirs(x, dim=1)))
        rows.append((f"softmax over rows, 4096 x 4096 {short}", "GB/s", 4.0 * 4096 * 4096 / 1e9,
                     lambda x=cs: c.softmax(x), lambda x=ts: torch.softmax(x, -1)))
    return rows


if __name__ == "__main__":
    sys.exit(main())
