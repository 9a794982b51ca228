"""Every builtin kernel on every dtype it supports, against numpy on random inputs."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import cubed_client

BF16 = np.dtype(ml_dtypes.bfloat16)
HALVES = ["float16", BF16]
ALL = ["float32", "float64", "int32", "uint32", "int64", *HALVES, "int8", "uint8", "int16",
       "uint16"]
SIGNED = ["float32", "float64", "int32", "int64", *HALVES, "int8", "int16"]
FLOATS = ["float32", "float64", *HALVES]
RNG = np.random.default_rng(20240601)


def is_float(dtype):
    return np.dtype(dtype).kind == "f" or np.dtype(dtype) == BF16


def is_half(dtype):
    return np.dtype(dtype) in (np.dtype(np.float16), BF16)


def up(x):
    """Half-type inputs as float64, so numpy's reference rounds once, as the kernels do."""
    return x.astype(np.float64) if is_half(x.dtype) else x


def rand(shape, dtype, low=-50, high=50, positive=False):
    dt = np.dtype(dtype)
    if positive:
        low = 1
    if is_float(dt):
        return RNG.uniform(low, high, size=shape).astype(dt)
    if dt.kind == "u":
        low = max(low, 0)
    return RNG.integers(low, high, size=shape).astype(dt)


def check(got, want, dtype):
    assert got.dtype == np.dtype(want.dtype) and got.shape == want.shape
    if is_float(dtype):
        tol = {np.dtype(np.float32): 1e-4, np.dtype(np.float16): 2e-3, BF16: 1.6e-2}.get(
            np.dtype(dtype), 1e-10)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


UNARY = {
    "neg": (SIGNED, np.negative, False), "abs": (SIGNED, np.abs, False),
    "relu": (SIGNED, lambda x: np.maximum(x, 0).astype(x.dtype), False),
    "exp": (FLOATS, lambda x: np.exp(x / 10), False), "log": (FLOATS, np.log, True),
    "sqrt": (FLOATS, np.sqrt, True), "sigmoid": (FLOATS, lambda x: 1 / (1 + np.exp(-x)), False),
    "tanh": (FLOATS, np.tanh, False),
}


def erf(x):
    """math.erf over a float64 array (numpy has no erf)."""
    return np.vectorize(math.erf, otypes=[np.float64])(x)


# PyTorch's formulas (torch.nn.functional.gelu and silu) in float64, with the limits at -inf.
def gelu_ref(x):
    with np.errstate(invalid="ignore"):
        return np.where(x == -np.inf, -0.0, 0.5 * x * (1 + erf(x / np.sqrt(2))))


def gelu_tanh_ref(x):
    with np.errstate(invalid="ignore", over="ignore"):
        u = np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)
        return np.where(x == -np.inf, -0.0, 0.5 * x * (1 + np.tanh(u)))


def silu_ref(x):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(x == -np.inf, -0.0, x / (1 + np.exp(-x)))


ACTIVATIONS = {"gelu": (lambda c, t: c.gelu(t), gelu_ref),
               "gelu_tanh": (lambda c, t: c.gelu(t, approximate="tanh"), gelu_tanh_ref),
               "silu": (lambda c, t: c.silu(t), silu_ref)}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations(client, name, dtype):
    run, ref = ACTIVATIONS[name]
    x = rand((5, 40), dtype, -8, 8)
    x[0, :8] = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1, -1, 1e-3]).astype(dtype)
    t = client.create(x)
    got = client.read(run(client, t))
    want = ref(up(x).astype(np.float64)).astype(dtype)
    check(got, want, dtype)
    v = float(got[0, 2])
    assert v == 0 and math.copysign(1.0, v) < 0  # -inf gives -0.
    # A transposed view reads through its strides.
    check(client.read(run(client, t.T)), want.T, dtype)


def test_activations_refuse_integers_and_unknown_approximations(client):
    t = client.create(np.arange(4, dtype=np.int32))
    with pytest.raises(cubed_client.InvalidArgumentError,
                       match="'gelu' does not support dtype i32"):
        client.read(client.gelu(t))
    with pytest.raises(cubed_client.InvalidArgumentError,
                       match="'silu' does not support dtype i32"):
        client.read(client.silu(t))
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        client.gelu(client.create(np.zeros(2, np.float32)), approximate="erf")


@pytest.mark.parametrize("name,dtype", [(n, d) for n, (ds, _, _) in UNARY.items() for d in ds])
def test_unary(client, name, dtype):
    dtypes, ref, positive = UNARY[name]
    x = rand((7, 33), dtype, positive=positive)
    if name == "exp":
        x = (x / 10).astype(dtype)
        ref = np.exp
    got = client.read(getattr(client, name)(client.create(x)))
    check(got, ref(up(x)).astype(dtype), dtype)


def trunc_div(a, b):
    if a.dtype.kind == "f":
        return a / b
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return (np.sign(a.astype(np.int64)) * np.sign(b.astype(np.int64)) * q).astype(a.dtype)


BINARY = {
    "add": (ALL, np.add), "sub": (ALL, np.subtract), "mul": (ALL, np.multiply),
    "div": (ALL, trunc_div), "maximum": (ALL, np.maximum), "minimum": (ALL, np.minimum),
    "pow": (FLOATS, np.power),
}


@pytest.mark.parametrize("name,dtype", [(n, d) for n, (ds, _) in BINARY.items() for d in ds])
def test_binary_broadcasting(client, name, dtype):
    _, ref = BINARY[name]
    positive = name in ("div", "pow")
    a = rand((4, 1, 5), dtype, 0 if name == "pow" else -50, 3 if name == "pow" else 50,
             positive=name == "div")
    b = rand((3, 1), dtype, positive=positive, high=4 if name == "pow" else 50)
    if name == "pow":  # Through f32: not every numpy/ml_dtypes pair has abs for bfloat16.
        a = (np.abs(a.astype(np.float32)) + 0.5).astype(dtype)
    got = client.read(getattr(client, name)(client.create(a), client.create(b)))
    with np.errstate(all="ignore"):
        check(got, ref(up(a), up(b)).astype(dtype), dtype)


COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("dtype", [*ALL, "bool"])
@pytest.mark.parametrize("name", list(COMPARISONS))
def test_comparisons_broadcast_to_bool(client, name, dtype):
    ref = COMPARISONS[name]
    if dtype == "bool":
        a, b = RNG.integers(0, 2, (4, 1, 5)).astype(bool), RNG.integers(0, 2, (3, 1)).astype(bool)
    else:  # Few distinct values, so that equal pairs are common.
        a, b = rand((4, 1, 5), dtype, 0, 3), rand((3, 1), dtype, 0, 3)
        if is_float(dtype):
            a, b = np.round(up(a)).astype(dtype), np.round(up(b)).astype(dtype)
    ta, tb = client.create(a), client.create(b)
    got = client.read(getattr(client, name)(ta, tb))
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref(up(a), up(b)))
    # Strided views compare through their strides.
    np.testing.assert_array_equal(client.read(getattr(client, name)(ta.swapaxes(0, 2), tb)),
                                  ref(up(a).swapaxes(0, 2), up(b)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_comparisons_of_nan_inf_and_signed_zero_follow_ieee(client, dtype):
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0]).astype(dtype)
    ta, tb = client.create(v[:, None]), client.create(v[None, :])
    for name, ref in COMPARISONS.items():
        with np.errstate(invalid="ignore"):
            want = ref(up(v)[:, None], up(v)[None, :])
        np.testing.assert_array_equal(client.read(getattr(client, name)(ta, tb)), want, name)


def test_comparison_operators_scalars_and_identity(client):
    x = np.array([[1.5, -2.0, np.nan], [0.0, 3.0, 7.0]], np.float32)
    t = client.create(x)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(client.read(t < 1), x < 1)
        np.testing.assert_array_equal(client.read(t <= 3.0), x <= 3.0)
        np.testing.assert_array_equal(client.read(t > x[0]), x > x[0])
        np.testing.assert_array_equal(client.read(t >= t.T.T), x >= x)
        np.testing.assert_array_equal(client.read(2.5 > t), 2.5 > x)  # Reflected: t < 2.5.
        np.testing.assert_array_equal(client.read(x[1] <= t), x[1] <= x)  # ndarray defers.
        np.testing.assert_array_equal(client.read(t.eq(7)), x == 7)
        np.testing.assert_array_equal(client.read(t.ne(t)), x != x)  # Only NaN.
    # == and != stay identity: tensors hash, and membership tests make no kernel call.
    assert t == t and t != t.T and t in [t] and t not in [t.T]
    assert len({t, t, t.T}) == 2
    # An integer tensor refuses a scalar it cannot hold exactly, instead of comparing with 0.
    i = client.create(np.array([0, 1, 2], np.int32))
    np.testing.assert_array_equal(client.read(i < 2.0), [True, True, False])
    with pytest.raises(TypeError, match="0.5 is not exactly representable as int32"):
        i < 0.5
    with pytest.raises(TypeError, match="300 is not exactly representable as uint8"):
        client.eq(client.create(np.zeros(2, np.uint8)), 300)
    with pytest.raises(TypeError, match="dtypes differ"):
        client.lt(i, client.create(np.zeros(3, np.float32)))


@pytest.mark.parametrize("dtype", [*ALL, "bool"])
def test_where_broadcasts_all_three(client, dtype):
    cond = RNG.integers(0, 2, (4, 1, 5)).astype(bool)
    if dtype == "bool":
        x, y = RNG.integers(0, 2, (3, 1)).astype(bool), RNG.integers(0, 2, (5,)).astype(bool)
    else:
        x, y = rand((3, 1), dtype), rand((5,), dtype)
    tc, tx, ty = client.create(cond), client.create(x), client.create(y)
    got = client.read(client.where(tc, tx, ty))
    assert got.dtype == np.dtype(dtype) and got.shape == (4, 3, 5)
    np.testing.assert_array_equal(got.view(np.uint8), np.where(cond, x, y).view(np.uint8))
    # Views: a transposed cond, a transposed x, y as a column.
    x2 = rand((4, 5), dtype, 0, 2)
    got = client.read(client.where(tc[:, 0, :].T, client.create(x2).T, ty[:, None]))
    want = np.ascontiguousarray(np.where(cond[:, 0, :].T, x2.T, y[:, None]))
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_where_masks_with_scalars_and_comparisons(client):
    x = np.array([[1.5, -2.0, np.nan], [0.0, -0.0, 7.0]], np.float32)
    t = client.create(x)
    # Attention-style masking: -inf where the mask is false.
    mask = np.array([True, False, True])
    got = client.read(client.where(mask, t, -np.inf))
    np.testing.assert_array_equal(got, np.where(mask, x, np.float32(-np.inf)))
    with np.errstate(invalid="ignore"):
        relu = client.read(client.where(t > 0, t, 0.0))
        np.testing.assert_array_equal(relu, np.where(x > 0, x, 0).astype(np.float32))
        # NaN payloads and -0 are copied as they are.
        same = client.read(client.where(t.ne(t), t, t))
    np.testing.assert_array_equal(same.view(np.uint32), x.view(np.uint32))
    i = client.create(np.arange(6, dtype=np.int16).reshape(2, 3))
    np.testing.assert_array_equal(client.read(client.where(i >= 3, 100, i)),
                                  np.where(np.arange(6).reshape(2, 3) >= 3, 100, np.arange(6)
                                           .reshape(2, 3)).astype(np.int16))
    with pytest.raises(TypeError, match="cond must be bool, got float32"):
        client.where(t, t, t)
    with pytest.raises(TypeError, match="x or y must be a Tensor"):
        client.where(t > 0, 1.0, 2.0)
    with pytest.raises(TypeError, match="0.5 is not exactly representable as int16"):
        client.where(i > 0, i, 0.5)
    with pytest.raises(TypeError, match="dtypes of x and y differ"):
        client.where(i > 0, i, t)
    with pytest.raises(cubed_client.InvalidArgumentError, match="do not broadcast"):
        client.where(np.ones(4, bool), t, t)


def test_integer_arithmetic_wraps(client):
    a = np.array([np.iinfo(np.int32).max, np.iinfo(np.int32).min, 7], dtype=np.int32)
    ta = client.create(a)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(client.read(ta + ta), a + a)
        np.testing.assert_array_equal(client.read(-ta), -a)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["sum", "max", "min", "argmax", "mean"])
def test_reductions(client, name, dtype):
    if name == "mean" and dtype not in FLOATS:
        pytest.skip("mean is float-only (the daemon refuses it: see test_errors)")
    x = rand((5, 6, 7), dtype, 0 if np.dtype(dtype).kind == "u" else -50, 50)
    t = client.create(x)
    ref = getattr(np, name)
    for axis in (0, 1, 2, -1, None) if name == "argmax" else (0, 1, 2, -1, (0, 2), None):
        for keepdims in (False, True):
            got = client.read(getattr(client, name)(t, axis=axis, keepdims=keepdims))
            want = np.asarray(ref(up(x), axis=axis, keepdims=keepdims))
            want = want.astype(np.int64 if name == "argmax" else dtype)
            check(got, want, dtype)


@pytest.mark.parametrize("dtype", ALL)
def test_matmul(client, dtype):
    a, b = rand((2, 9, 17), dtype, 0, 9), rand((17, 5), dtype, 0, 9)
    ta, tb = client.create(a), client.create(b)
    with np.errstate(all="ignore"):  # Integer products wrap.
        a, b = up(a), up(b)
        check(client.read(ta @ tb), (a @ b).astype(dtype), dtype)
        check(client.read(client.matmul(ta[1], tb)), (a[1] @ b).astype(dtype), dtype)
        v = rand((17,), dtype, 0, 9)
        check(client.read(client.matmul(ta, client.create(v))), (a @ up(v)).astype(dtype), dtype)
        check(client.read(client.matmul(tb.T, ta[0].T)), (b.T @ a[0].T).astype(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax(client, dtype):
    x = rand((3, 4, 6), dtype)
    t = client.create(x)
    for axis in (-1, 0, 1):
        e = np.exp(up(x) - up(x).max(axis=axis, keepdims=True))
        check(client.read(client.softmax(t, axis=axis)),
              (e / e.sum(axis=axis, keepdims=True)).astype(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_causal_softmax(client, dtype):
    for shape in ((2, 5, 5), (3, 7), (7, 3), (1, 1)):
        x = rand(shape, dtype)
        queries, keys = shape[-2:]
        visible = np.arange(keys)[None, :] <= np.arange(queries)[:, None]
        s = np.where(visible, up(x) * 0.25, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        got = client.read(client.causal_softmax(client.create(x), 0.25))
        check(got, (e / e.sum(axis=-1, keepdims=True)).astype(dtype), dtype)
        assert np.all(got[..., ~visible] == 0)
    t = client.create(rand((4, 4), dtype))
    check(client.read(client.causal_softmax(t.T)), client.read(client.causal_softmax(
        client.create(client.read(t).T))), dtype)  # A transposed view, as its copy.
    with pytest.raises(cubed_client.InvalidArgumentError, match="at least two dimensions"):
        client.causal_softmax(client.create(rand((4,), dtype)))
    with pytest.raises(ValueError, match="scale must be finite"):
        client.causal_softmax(t, float("nan"))


def norm_ref(x, weight, bias, eps, center):
    """torch's layer_norm (center) or rms_norm over the last axis, in float64."""
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True) if center else 0.0
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(client, dtype):
    x = rand((3, 4, 40), dtype, -3, 5)
    w, b = rand((40,), dtype, -2, 2), rand((40,), dtype, -1, 1)
    t = client.create(x)
    for weight, bias in ((None, None), (w, None), (w, b), (None, b)):
        got = client.read(client.layer_norm(t, weight, bias))
        check(got, norm_ref(x, weight, bias, 1e-5, True).astype(dtype), dtype)
    # A transposed view normalizes its own last axis; weight and bias as Tensors, eps given.
    view = t.swapaxes(0, 2)  # (40, 4, 3): rows of 3 strided elements.
    tw, tb = client.create(w[:3]), client.create(b[:3])
    got = client.read(client.layer_norm(view, tw, tb, eps=0.5))
    check(got, norm_ref(x.swapaxes(0, 2), w[:3], b[:3], 0.5, True).astype(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(client, dtype):
    x = rand((5, 33), dtype, -3, 3)
    w = rand((33,), dtype, -2, 2)
    t = client.create(x)
    finfo_eps = {np.dtype(np.float32): 2.0 ** -23, np.dtype(np.float64): 2.0 ** -52,
                 np.dtype(np.float16): 2.0 ** -10, BF16: 2.0 ** -7}[np.dtype(dtype)]
    check(client.read(client.rms_norm(t)), norm_ref(x, None, None, finfo_eps, False).astype(dtype),
          dtype)
    check(client.read(client.rms_norm(t, w, eps=1e-6)),
          norm_ref(x, w, None, 1e-6, False).astype(dtype), dtype)
    check(client.read(client.rms_norm(t.T, w[:5])), norm_ref(x.T, w[:5], None, finfo_eps,
                                                               False).astype(dtype), dtype)


def test_norm_edge_rows(client):
    x = np.array([[1, np.nan, 2, 3], [2.5, 2.5, 2.5, 2.5]], np.float32)
    b = np.array([0.5, 1.5, 2.5, 3.5], np.float32)
    got = client.read(client.layer_norm(client.create(x), np.full(4, 2, np.float32), b))
    assert np.isnan(got[0]).all()
    np.testing.assert_array_equal(got[1], b)  # A constant row: variance 0 exactly, out = bias.
    one = client.read(client.layer_norm(client.create(np.array([[7.0], [-1.0]])), bias=[0.25]))
    np.testing.assert_array_equal(one, [[0.25], [0.25]])  # Size-1 rows give the bias.
    assert client.read(client.rms_norm(client.create(np.zeros((0, 6), np.float32)))).shape == (0, 6)
    assert client.read(client.layer_norm(client.create(np.zeros((2, 0))))).shape == (2, 0)


def test_norm_errors(client):
    t = client.create(rand((2, 8), "float32"))
    with pytest.raises(cubed_client.InvalidArgumentError,
                       match="'layer_norm' does not support dtype i32"):
        client.read(client.layer_norm(client.create(np.ones((2, 8), np.int32))))
    with pytest.raises(cubed_client.InvalidArgumentError, match=r"weight shape \(7,\) must be"):
        client.rms_norm(t, np.ones(7, np.float32))
    with pytest.raises(TypeError, match="bias dtype float64 differs"):
        client.layer_norm(t, np.ones(8, np.float32), client.create(np.ones(8, np.float64)))
    with pytest.raises(cubed_client.InvalidArgumentError, match="eps is -1; it must be finite"):
        client.read(client.layer_norm(t, eps=-1.0))
    # The daemon's own checks, through a raw launch: a short weight and a wrong buffer count.
    # (Each launch its own output: on the stream a failed launch poisons its output.)
    eps = [cubed_client.Scalars(np.float32, [1e-5])]
    out = client.empty((2, 8), np.float32)
    with pytest.raises(cubed_client.InvalidArgumentError,
                       match=r"weight shape \[7\] must be \[8\]"):
        client.execute(cubed_client.BuiltinKernel("rms_norm", np.float32), None,
                       [t, client.create(np.ones(7, np.float32)), out], scalars=eps)
        client.read(out)
    out = client.empty((2, 8), np.float32)
    with pytest.raises(cubed_client.InvalidArgumentError,
                       match=r"'rms_norm' takes 2 buffers \(in, out\) or 3 buffers"):
        client.execute(cubed_client.BuiltinKernel("rms_norm", np.float32), None,
                       [t, t, t, out], scalars=eps)
        client.read(out)


@pytest.mark.parametrize("src", [*ALL, "bool"])
@pytest.mark.parametrize("dst", [*ALL, "bool"])
def test_cast(client, src, dst):
    x = rand((11,), src, 0, 100)
    check(client.read(client.create(x).astype(dst)), x.astype(dst), dst)


@pytest.mark.parametrize("dtype", [*ALL, "bool"])
def test_fill_and_copy(client, dtype):
    check(client.read(client.full((3, 5), 7, dtype)), np.full((3, 5), 7, dtype), dtype)
    check(client.read(client.zeros(4, dtype)), np.zeros(4, dtype), dtype)
    x = rand((6, 8), dtype, 0, 50)
    view = client.create(x)[1::2, ::3].T
    copied = view.copy()
    assert copied.is_contiguous and not view.is_contiguous
    check(client.read(copied), x[1::2, ::3].T.copy(), dtype)


def test_bool_max_min_are_or_and_any_all(client):
    a = np.array([[False, True, False, True], [False, False, False, True]])
    b = np.array([False, False, True, True])
    ta, tb = client.create(a), client.create(b)
    np.testing.assert_array_equal(client.read(client.maximum(ta, tb)), a | b)
    np.testing.assert_array_equal(client.read(client.minimum(ta, tb)), a & b)
    np.testing.assert_array_equal(client.read(client.max(ta, axis=1)), a.any(axis=1))
    np.testing.assert_array_equal(client.read(client.min(ta, axis=1)), a.all(axis=1))
    with pytest.raises(cubed_client.InvalidArgumentError, match="'add' does not support dtype bool"):
        client.read(client.add(ta, tb))
    with pytest.raises(cubed_client.InvalidArgumentError, match="'exp' does not support dtype i8"):
        client.read(client.exp(client.create(np.zeros(3, np.int8))))


def test_half_edge_values_round_to_nearest_even(client):
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-8, 65519.0, 65520.0, 1 + 2 ** -11,
                  5.960464477539063e-08, 2.0 ** -25], dtype=np.float64)
    h = client.read(client.create(x).astype(np.float16))
    np.testing.assert_array_equal(h.view(np.uint16), x.astype(np.float16).view(np.uint16))
    b = client.read(client.create(x.astype(np.float32)).astype(BF16))
    want = x.astype(np.float32).astype(BF16)
    np.testing.assert_array_equal(b.view(np.uint16)[1:], want.view(np.uint16)[1:])
    assert np.isnan(b[0].astype(np.float32))
    # Sums of halves accumulate in f32: 4096 ones reach 4096 (an f16 accumulator stops at 2048).
    assert float(client.read(client.sum(client.create(np.ones(4096, np.float16))))) == 4096.0


def test_info_lists_element_and_matmul_types(client):
    info = client.info()
    for dt in [*ALL, "bool"]:
        assert np.dtype(dt) in info.dtypes
    assert "bf16*bf16+f32" in info.matmul_types and "f16*f16+f32" in info.matmul_types
    assert "f32*f32+f32" in info.matmul_types


def test_tf32_is_a_permission_for_float32_matmul(client):
    # 1 + 2^-12 needs 13 significant bits: TF32 keeps 11, so a product that ran on TF32 sums
    # ones; in f32 every partial sum k (1 + 2^-12) is exact.
    a = np.full((64, 64), 1 + 2.0 ** -12, np.float32)
    b = np.ones((64, 64), np.float32)
    ta, tb = client.create(a), client.create(b)
    exact = np.float32(64 + 2.0 ** -6)
    np.testing.assert_array_equal(client.matmul(ta, tb).read(), np.full((64, 64), exact))
    allowed = client.matmul(ta, tb, allow_tf32=True).read()
    if "tf32*tf32+f32" in client.info().matmul_types:
        np.testing.assert_array_equal(allowed, np.full((64, 64), np.float32(64)))
    else:  # The CPU backend: the permission is not used.
        np.testing.assert_array_equal(allowed, np.full((64, 64), exact))
    # The client-wide switch, as torch's; other dtypes ignore it.
    client.allow_tf32 = True
    try:
        np.testing.assert_array_equal((ta @ tb).read(), allowed)
        h = client.create(a.astype(np.float16))
        np.testing.assert_array_equal((h @ h).read(), (a.astype(np.float16).astype(np.float32) @
                                                       a.astype(np.float16).astype(np.float32)
                                                       ).astype(np.float16))
    finally:
        client.allow_tf32 = False


def test_allow_tf32_on_the_wire_is_refused_outside_float32_matmul(client):
    t = client.create(np.ones(4, np.float32))
    out = client.empty((4,), np.float32)
    kernel = cubed_client.BuiltinKernel("add", np.float32, allow_tf32=True)
    with pytest.raises(cubed_client.InvalidArgumentError, match="allow_tf32"):
        client.execute(kernel, bindings=[t, t, out])
        client.sync()


def test_builtin_kernels_all_covered(client):
    covered = {"neg", "abs", "relu", "exp", "log", "sqrt", "sigmoid", "tanh", "add", "sub", "mul",
               "div", "max", "min", "pow", "sum", "mean", "argmax", "matmul", "softmax", "cast",
               "fill", "copy", "gather", "gelu", "gelu_tanh", "silu", "eq", "ne", "lt", "le", "gt",
               "ge", "where", "layer_norm", "rms_norm", "causal_softmax",
               "causal_attention"}  # test_attention.py
    assert set(client.info().builtin_kernels) <= covered


def test_raw_execute_matches_wrapper(client):
    a, b = rand((2, 3), "float32"), rand((1, 3), "float32")
    ta, tb, out = client.create(a), client.create(b), client.empty((2, 3), np.float32)
    client.execute(cubed_client.BuiltinKernel("add", np.float32), (1, 1, 1), [ta, tb, out])
    check(client.read(out), a + b, "float32")
    words = cubed_client.encode_metadata([6, 3, 6], [((2, 3), (3, 1)), ((1, 3), (3, 1)),
                                                      ((2, 3), (3, 1))])
    assert words == [6, 3, 6, 6, 3, 6, 2, 2, 2, 15, 17, 19, 21, 23, 25, 2, 3, 1, 3, 2, 3,
                     3, 1, 3, 1, 3, 1]


def take_ref(table, indices, axis):
    """numpy.take, with indices in [-n, 0) from the end and any other outside [0, n) giving 0."""
    axis %= table.ndim
    n = table.shape[axis]
    k = np.asarray(indices).astype(np.int64)
    k = np.where(k < 0, k + n, k)
    valid = (k >= 0) & (k < n)
    shape = table.shape[:axis] + k.shape + table.shape[axis + 1:]
    if n == 0:
        return np.zeros(shape, table.dtype)
    got = np.take(table, np.where(valid, k, 0), axis=axis)
    mask = np.broadcast_to(valid.reshape((1,) * axis + k.shape + (1,) * (table.ndim - axis - 1)),
                           shape)
    got[~mask] = 0
    return got


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", [*ALL, "bool"])
def test_gather(client, dtype, index_dtype):
    table = rand((6, 5, 3), dtype, 0, 50)
    t = client.create(table)
    for axis in (0, 1, 2, -1):
        n = table.shape[axis]
        idx = RNG.integers(-n - 3, n + 3, size=(4, 2)).astype(index_dtype)
        got = client.read(client.gather(t, client.create(idx), axis=axis))
        check(got, take_ref(table, idx, axis), dtype)


def test_gather_embedding_views_and_numpy_indices(client):
    emb = rand((50, 16), "float32")
    table = client.create(emb)
    tokens = RNG.integers(0, 50, size=(2, 7))
    check(client.read(client.gather(table, tokens)), emb[tokens], "float32")  # [B, S, D]
    check(client.read(client.gather(table, [3, -1, 60, -51])),
          take_ref(emb, [3, -1, 60, -51], 0), "float32")
    check(client.read(client.gather(table, 4)), emb[4], "float32")  # A scalar index.
    check(client.read(client.gather(table, [])), emb[:0], "float32")
    huge = np.array([2 ** 64 - 1, 1], dtype=np.uint64)  # Out of range, not -1 after a wrap.
    check(client.read(client.gather(table, huge)), take_ref(emb, [50, 1], 0), "float32")
    idx32 = np.array([[1, 0], [15, -16]], dtype=np.int32)
    view = table[1::3, ::2].T  # Strided [8, 17] view of the table.
    check(client.read(client.gather(view, idx32, axis=1)),
          take_ref(emb[1::3, ::2].T, idx32, 1), "float32")
    steps = client.create(np.arange(12, dtype=np.int64))[::3]  # A stepped index view.
    check(client.read(client.gather(table, steps)), emb[0:12:3], "float32")


def test_gather_errors(client):
    table = client.create(rand((4, 3), "float32"))
    with pytest.raises(cubed_client.InvalidArgumentError, match="axis 2 is out of bounds"):
        client.gather(table, [0], axis=2)
    with pytest.raises(cubed_client.InvalidArgumentError, match="index_dtype f32 is not an index"):
        client.read(client.gather(table, client.create(np.zeros(2, np.float32))))
    with pytest.raises(TypeError, match="indices must be integers"):
        client.gather(table, np.array([0.5]))


@pytest.mark.parametrize("dtype", [*ALL, "bool"])
def test_concat(client, dtype):
    a, b, c = rand((2, 3, 4), dtype, 0, 50), rand((2, 1, 4), dtype, 0, 50), rand((2, 5, 4), dtype,
                                                                                0, 50)
    ta, tb, tc = client.create(a), client.create(b), client.create(c)
    check(client.read(client.concat([ta, tb, tc], axis=1)), np.concatenate([a, b, c], 1), dtype)
    check(client.read(client.concat([ta, ta], axis=0)), np.concatenate([a, a], 0), dtype)
    check(client.read(client.concat([ta, ta[:, :, :1]], axis=-1)),
          np.concatenate([a, a[:, :, :1]], -1), dtype)


def test_concat_views_arrays_and_edge_cases(client):
    x = rand((6, 4), "float32")
    t = client.create(x)
    parts = [t.T, t[::2].T, client.create(x[:0]).T]  # Transposed and stepped views, an empty one.
    check(client.read(client.concat(parts, axis=1)), np.concatenate([x.T, x[::2].T, x[:0].T], 1),
          "float32")
    check(client.read(client.concat([t, x[:1]])), np.concatenate([x, x[:1]]), "float32")
    check(client.read(client.concat([t])), x, "float32")
    with pytest.raises(TypeError, match="tensors\\[1\\] has dtype float64"):
        client.concat([t, client.create(x.astype(np.float64))])
    with pytest.raises(cubed_client.InvalidArgumentError, match="all dimensions but axis 0"):
        client.concat([t, client.create(x[:, :3])])
    with pytest.raises(cubed_client.InvalidArgumentError, match="at least one tensor"):
        client.concat([])
    with pytest.raises(cubed_client.InvalidArgumentError, match="axis 2 is out of bounds"):
        client.concat([t, t], axis=2)
