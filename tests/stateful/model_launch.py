"""The stateful fuzzer's model of executes (model.py has the rest, and the header on what it
checks exactly): builtin launches, their request checks and validation as the daemon does them
(docs/kernel-abi.md), their results on the CPU backend, and the recorded graphs that hold them."""

import itertools
import struct

from model import (ELEM, FP, IA, KERNELS, MAX_BINDINGS, MAX_BUFFERS, MAX_CUBE_COUNT,
                   MAX_METADATA_WORDS, MAX_MODELLED_ELEMENTS, MAX_RANK, NF, PD, RE, UNIMPLEMENTED,
                   Ambiguous, Fail, Graph, prod, span_elements)


class Launch:
    """An execute as the fuzzer sends it (the fields of ExecuteRequest / Command.Execute)."""

    def __init__(self, kind, name="", dtype=0, out_dtype=0, axis=0, allow_tf32=False,
                 count=None, dynamic=None, buffers=(), metadata=(), scalars=(), mode=0,
                 code="x", entry="k", cube_dim=(1, 1, 1)):
        self.kind = kind            # "builtin", "ptx" or "none"
        self.name, self.dtype, self.out_dtype, self.axis = name, dtype, out_dtype, axis
        self.allow_tf32 = allow_tf32
        self.count = count          # (x, y, z) static, or None
        self.dynamic = dynamic      # (hid, start, end) or None
        self.buffers = list(buffers)  # [(hid, start, end)]
        self.metadata = list(metadata)
        self.scalars = list(scalars)  # [(elem, floats, ints, uints)]
        self.mode = mode
        self.code, self.entry, self.cube_dim = code, entry, cube_dim


def scalar_bytes(elem, floats, ints, uints):
    """ToScalarGroup: the group's bytes, or INVALID_ARGUMENT."""
    if elem not in ELEM:
        raise Fail(IA)
    name, size, fmt, kind = ELEM[elem]
    wants_floats = kind == "float"
    wants_uints = kind in ("uint", "bool")
    wants_ints = not wants_floats and not wants_uints
    if ((not wants_floats and floats) or (not wants_ints and ints)
            or (not wants_uints and uints)):
        raise Fail(IA)
    out = b""
    for v in ints:
        if size < 8 and not -(2**(8 * size - 1)) <= v < 2**(8 * size - 1):
            raise Fail(IA)
        out += (v % 2**64).to_bytes(8, "little")[:size]
    for v in uints:
        hi = 1 if kind == "bool" else 2**(8 * size) - 1
        if v > hi:
            raise Fail(IA)
        out += v.to_bytes(8, "little")[:size]
    if floats:
        if fmt is None or any(abs(f) > 3e38 for f in floats if f == f) and size == 4:
            return None  # Bytes not modelled (half types, f32 overflow): valid, content unknown.
        for f in floats:
            out += struct.pack(fmt, f)
    return out


def check_launch_request(launch):
    """ToExecuteCommand: every request-level check, all INVALID_ARGUMENT."""
    if launch.kind == "none":
        raise Fail(IA)
    if launch.kind == "builtin":
        if not 1 <= len(launch.name) <= 64:
            raise Fail(IA)
        if launch.dtype not in ELEM:
            raise Fail(IA)
        if launch.out_dtype != 0 and launch.out_dtype not in ELEM:
            raise Fail(IA)
    else:
        x, y, z = launch.cube_dim
        if not launch.code or not launch.entry:
            raise Fail(IA)
        if not (1 <= x <= 1024 and 1 <= y <= 1024 and 1 <= z <= 64 and x * y * z <= 1024):
            raise Fail(IA)
    if launch.count is None and launch.dynamic is None:
        raise Fail(IA)
    if launch.mode not in (0, 1, 2):
        raise Fail(IA)
    if len(launch.buffers) > MAX_BUFFERS or len(launch.metadata) > MAX_METADATA_WORDS:
        raise Fail(IA)
    groups = set()
    for (elem, floats, ints, uints) in launch.scalars:
        scalar_bytes(elem, floats, ints, uints)
        if elem in groups:
            raise Fail(IA)
        groups.add(elem)


def launch_request_failure(launch):
    """check_launch_request's Fail for `launch`, or None when the request passes: what a stream
    command carries to its turn (a failed command fails in its place in the order)."""
    try:
        check_launch_request(launch)
    except Fail as f:
        return f
    return None


def decode_metadata(words, n):
    """DecodeKernelMetadata for n buffers, all tensors: [(shape, strides)] and buffer_len."""
    static = 5 * n
    if len(words) < static:
        raise Fail(IA)
    tensors = []
    for i in range(n):
        rank, sat, tat = words[2 * n + i], words[3 * n + i], words[4 * n + i]
        if rank > MAX_RANK:
            raise Fail(IA)
        if sat < static or sat + rank > len(words) or tat < static or tat + rank > len(words):
            raise Fail(IA)
        shape = list(words[sat:sat + rank])
        strides = list(words[tat:tat + rank])
        if prod(shape) != words[n + i]:
            raise Fail(IA)
        tensors.append((shape, strides))
    return list(words[:n]), tensors


def may_overlap_itself(shape, strides):
    if any(d == 0 for d in shape):
        return False
    dims = sorted((st, d) for d, st in zip(shape, strides) if d > 1)
    span = 1
    for st, d in dims:
        if st < span:
            return True
        span += (d - 1) * st
    return False


def validate_builtin(launch, views, host=True):
    """ValidateCall + CheckHostBuffers (unless not `host`: a graph's recording checks only
    ValidateBuiltin) for a known kernel with the right buffer count.
    views: [(handle, start, length)]. Returns the decoded tensors."""
    n, dtypes, rule, min_rank, takes_fill, in_place = KERNELS[launch.name]
    if launch.dtype not in dtypes or launch.allow_tf32:
        raise Fail(IA)
    es = ELEM[launch.dtype][1]
    if takes_fill:
        if len(launch.scalars) != 1:
            raise Fail(IA)
        elem, floats, ints, uints = launch.scalars[0]
        if elem != launch.dtype or len(floats) + len(ints) + len(uints) != 1:
            raise Fail(IA)
    elif launch.scalars:
        raise Fail(IA)
    buffer_len, tensors = decode_metadata(launch.metadata, n)
    spans = []
    for i, (shape, strides) in enumerate(tensors):
        span = span_elements(shape, strides)
        if span * es > views[i][2] or buffer_len[i] * es > views[i][2]:
            raise Fail(IA)
        spans.append(span * es)
    if any(len(shape) < min_rank for shape, _ in tensors):
        raise Fail(IA)
    out_shape, out_strides = tensors[-1]
    if may_overlap_itself(out_shape, out_strides):
        raise Fail(IA)
    if rule in ("same", "broadcast", "reduce"):
        if any(len(t[0]) != len(out_shape) for t in tensors):
            raise Fail(IA)
    if rule == "same" and tensors[0][0] != out_shape:
        raise Fail(IA)
    if rule == "broadcast":
        for shape, _ in tensors[:-1]:
            if any(a != b and a != 1 for a, b in zip(shape, out_shape)):
                raise Fail(IA)
    if rule == "reduce":
        in_shape = tensors[0][0]
        if launch.axis >= len(in_shape):
            raise Fail(IA)
        want = [1 if d == launch.axis else x for d, x in enumerate(in_shape)]
        if out_shape != want:
            raise Fail(IA)
        held = views[0][2] // es
        if prod(in_shape) > max(held, prod(out_shape)):
            raise Fail(IA)
    if not host:
        return tensors
    # CheckHostBuffers: alignment (slices are 64-byte aligned), then the output overlapping an
    # input (only possible within one handle).
    for i in range(n):
        if spans[i] and views[i][1] % es:
            raise Fail(IA)
    o = n - 1
    for i in range(o):
        if not spans[i] or not spans[o] or views[i][0] is not views[o][0]:
            continue
        p, q = views[i][1], views[o][1]
        if p >= q + spans[o] or q >= p + spans[i]:
            continue
        identical = in_place and p == q and spans[i] == spans[o] and tensors[i] == tensors[o]
        if not identical:
            raise Fail(IA)
    return tensors


def launch_views(m, s, launch):
    """What an execute and a recorded execute check first, in the daemon's order: the mode
    (unchecked: PERMISSION_DENIED), the cube count (a dynamic count's binding must hold 12 bytes;
    a static one within MAX_CUBE_COUNT), the buffers' handles. Returns the dynamic count's
    resolved binding (None for a static count) and the buffers' resolved views."""
    dynamic = None
    if launch.mode == 2:
        raise Fail(PD)
    if launch.dynamic is not None:
        dynamic = m.resolve(s, *launch.dynamic)
        if dynamic[2] < 12:
            raise Fail(IA)
    else:
        x, y, z = launch.count
        if not all(1 <= v <= hi for v, hi in zip((x, y, z), MAX_CUBE_COUNT)):
            raise Fail(IA)
    return dynamic, [m.resolve(s, *b) for b in launch.buffers]


def predict_execute(m, s, launch, dynamic_ok=False):
    """Device::Execute after the request checks and the session lookup. Returns a function that
    applies the launch's effect on the model's contents. Raises Ambiguous when the dynamic
    count's bytes are unknown (call again with dynamic_ok=True for the other branch)."""
    dynamic, views = launch_views(m, s, launch)
    if launch.kind == "ptx":
        raise Fail(UNIMPLEMENTED)
    if launch.dynamic is not None and not dynamic_ok:
        h, vs, _ = dynamic
        if h.content is None:
            raise Ambiguous(IA)
        xyz = struct.unpack("<3I", bytes(h.content[vs:vs + 12]))
        if not all(1 <= v <= hi for v, hi in zip(xyz, MAX_CUBE_COUNT)):
            raise Fail(IA)
    if launch.name not in KERNELS:
        raise Fail(NF)
    if KERNELS[launch.name][0] != len(views):
        raise Fail(IA)
    tensors = validate_builtin(launch, views)
    return lambda: run_builtin(launch, views, tensors)


# ---- recorded graphs (Note [Recorded graphs], server/channel/graph.h) ----

def graph_outputs(launch):
    """The ids an execute writes (what its failure poisons): a builtin's last buffer, a client
    kernel's every buffer, nothing without a kernel (stream_command_conversion.cc)."""
    if launch.kind == "builtin":
        return [launch.buffers[-1][0]] if launch.buffers else []
    if launch.kind == "none":
        return []
    return [b[0] for b in launch.buffers]


def new_graph(s, gid, params):
    """Device::NewGraph: the Graph begin_graph starts, or its failure."""
    if gid == 0:
        raise Fail(IA)
    if gid in s.graphs:
        raise Fail(FP)
    if len(s.graphs) >= 1024:
        raise Fail(RE)
    if len(params) > MAX_BINDINGS:
        raise Fail(IA)
    seen, sizes = set(), []
    for hid in params:
        poison = s.poison_of(hid)
        if poison is not None:
            raise poison
        if hid not in s.handles:
            raise Fail(NF)
        if hid in seen:
            raise Fail(IA)
        seen.add(hid)
        sizes.append(s.handles[hid].size)
    return Graph(gid, params, sizes)


def predict_record(m, s, launch):
    """Device::RecordExecute after the request checks: PrepareLaunch (mode, cube count, bindings
    resolved) and, for builtins, ValidateBuiltin. Nothing runs. Returns (views, tensors).

    Known finding (docs/reliability.md, "Stateful fuzzing", 2026-12-03): docs/api.md says each
    recorded execute is "checked as if it ran", but the daemon leaves out what the backend checks
    when a launch runs: CheckHostBuffers (a binding misaligned for its elements, an output
    overlapping an input), a client kernel on the CPU backend (UNIMPLEMENTED) and a dynamic cube
    count's bytes. Such an execute is recorded, and every replay fails at that step. The model
    predicts what the daemon does (predict_replay), so that the run stays green; the fuzzer
    records dynamic counts as static ones (their bytes are not modelled at replay)."""
    _, views = launch_views(m, s, launch)
    if launch.kind != "builtin":
        return views, None
    if launch.name not in KERNELS:
        raise Fail(NF)
    if KERNELS[launch.name][0] != len(views):
        raise Fail(IA)
    return views, validate_builtin(launch, views, host=False)


def record_step(m, s, graph, launch, views, tensors):
    """Appends a recorded execute: parameter bindings noted, every other handle held."""
    refs = []
    for (hid, _, _), (h, start, length) in zip(launch.buffers, views):
        if hid in graph.params:
            refs.append(("p", graph.params.index(hid), start, length))
        else:
            refs.append(("h", h, start, length))
            if not any(x is h for x in graph.held):
                graph.held.append(h)
                h.holds += 1
    for hid in graph_outputs(launch):
        if hid in graph.params:
            graph.writes.add(graph.params.index(hid))
    graph.steps.append((launch, refs, tensors))


def predict_replay(m, s, gid, bindings):
    """Device::ReplayGraph: (written ids, failure or None). The steps before a failing step ran
    (their effects are applied here); a step fails as CpuServer::Execute would: a client kernel
    UNIMPLEMENTED, a builtin whose buffers are misaligned or overlap (CheckHostBuffers, checked
    only now) INVALID_ARGUMENT. The failure's Fail has no prefix: the caller adds it."""
    if s.recording is not None:
        return [], Fail(FP)
    g = s.graphs.get(gid)
    if g is None:
        return [], Fail(NF)
    if len(bindings) != len(g.params):
        return [], Fail(IA)
    written = [bindings[i] for i in sorted(g.writes)]
    for i, hid in enumerate(bindings):
        poison = s.poison_of(hid)
        if poison is not None:
            return written, poison
        h = s.handles.get(hid)
        if h is None:
            return written, Fail(NF)
        if h.size != g.sizes[i]:
            return written, Fail(IA)
    for n, (launch, refs, tensors) in enumerate(g.steps):
        views = [(s.handles[bindings[r[1]]] if r[0] == "p" else r[1], r[2], r[3]) for r in refs]
        if launch.kind != "builtin":
            return written, Fail(UNIMPLEMENTED, prefix=f"graph {gid} step {n}: ")
        try:
            validate_builtin(launch, views)
        except Fail as f:
            return written, Fail(f.code, prefix=f"graph {gid} step {n}: ")
        run_builtin(launch, views, tensors)
    return written, None


def _elements(view, layout, es):
    h, start, _ = view
    shape, strides = layout
    for idx in itertools.product(*[range(d) for d in shape]):
        yield idx, start + es * sum(i * st for i, st in zip(idx, strides))


def run_builtin(launch, views, tensors):
    """The launch's effect on the output handle's modelled bytes."""
    out_h = views[-1][0]
    name, (_, es, fmt, kind) = launch.name, ELEM[launch.dtype]
    out_shape, out_strides = tensors[-1]
    if prod(out_shape) == 0:
        return
    too_big = any(prod(t[0]) > MAX_MODELLED_ELEMENTS for t in tensors)
    inputs_known = all(v[0].content is not None for v in views[:-1])
    exact = kind in ("int", "uint") or name in ("fill", "copy") or (name == "neg" and es in (4, 8)
                                                                   and kind == "float")
    if too_big or not inputs_known or out_h.content is None or not exact:
        out_h.content = None
        return
    if name == "fill":
        value = scalar_bytes(*launch.scalars[0])
        if value is None:
            out_h.content = None
            return
    mask = 2**(8 * es) - 1

    def read(v, off):
        return int.from_bytes(v[0].content[off:off + es], "little")

    writes = []
    for idx, off in _elements(views[-1], tensors[-1], es):
        if name == "fill":
            val = int.from_bytes(value, "little")
        elif name == "copy":
            val = read(views[0], views[0][1] + es * sum(
                i * st for i, st in zip(idx, tensors[0][1])))
        elif name == "neg":
            x = read(views[0], views[0][1] + es * sum(i * st for i, st in zip(idx, tensors[0][1])))
            val = x ^ (1 << (8 * es - 1)) if kind == "float" else (-x) & mask
        elif name == "add":
            total = 0
            for v, (shape, strides) in zip(views[:-1], tensors[:-1]):
                src = [i if d == od else 0 for i, d, od in zip(idx, shape, out_shape)]
                total += read(v, v[1] + es * sum(i * st for i, st in zip(src, strides)))
            val = total & mask
        else:  # sum along the axis
            in_shape, in_strides = tensors[0]
            total = 0
            for k in range(in_shape[launch.axis]):
                src = list(idx)
                src[launch.axis] = k
                total += read(views[0], views[0][1] + es * sum(
                    i * st for i, st in zip(src, in_strides)))
            val = total & mask
        writes.append((off, val))
    for off, val in writes:
        out_h.content[off:off + es] = val.to_bytes(es, "little")
