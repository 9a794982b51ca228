"""Client's methods for the builtin kernels (docs/kernel-abi.md): one wrapper per kernel with
numpy's shape rules, and the compositions built on them (concat, scaled_dot_product_attention).
A mixin of Client (_client.py), which provides what these call: create, empty, execute and the
private _own, _alloc and _launch."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from ._errors import InvalidArgumentError
from ._tensor import Tensor
from ._types import BFLOAT16, DTypeLike, Scalars, cache_put, dense_strides

ArrayOrScalar = Union[Tensor, np.ndarray, int, float, Sequence[Any]]
Axis = Union[None, int, Sequence[int]]

# rms_norm's default eps: torch.finfo(dtype).eps of each float type.
_MACHINE_EPS = {np.dtype(np.float32): 2.0 ** -23, np.dtype(np.float64): 2.0 ** -52,
                np.dtype(np.float16): 2.0 ** -10}
if BFLOAT16 is not None:
    _MACHINE_EPS[BFLOAT16] = 2.0 ** -7
_FLOAT_DTYPES = frozenset(_MACHINE_EPS)
_HALF_DTYPES = frozenset(t for t in _MACHINE_EPS if t.itemsize == 2)


# The broadcast shape of each tuple of operand shapes seen (None: they do not broadcast).
_broadcast_cache: dict = {}


def _broadcast(shapes: Tuple[Tuple[int, ...], ...]) -> Optional[Tuple[int, ...]]:
    """numpy's broadcast of ``shapes``, or None when they do not broadcast; memoized."""
    if shapes in _broadcast_cache:
        return _broadcast_cache[shapes]
    try:
        shape: Optional[Tuple[int, ...]] = tuple(map(int, np.broadcast_shapes(*shapes)))
    except ValueError:
        shape = None
    return cache_put(_broadcast_cache, shapes, shape)


class KernelMethods:
    """The builtin kernels of a Client (see Client for threading and when errors surface)."""

    def _operand(self, x: ArrayOrScalar, like: Optional[Tensor], what: str,
                 exact: bool = False) -> Tensor:
        """A Tensor for ``x``: itself, or ``x`` stored in ``like``'s dtype. ``exact``: values an
        integer or bool dtype cannot hold as they are (0.5 or 300 for uint8) are a TypeError
        instead of being truncated or wrapped (a comparison with them would be wrong)."""
        if isinstance(x, Tensor):
            return self._own(x, what)
        dtype = like.dtype if like is not None else None
        if exact and dtype is not None and dtype.kind in "biu":
            raw = np.asarray(x)
            if raw.dtype.hasobject:
                raise TypeError(f"{what}: cannot use {x!r} as {dtype}")
            with np.errstate(all="ignore"):
                stored = raw.astype(dtype)
                fits = np.array_equal(stored.astype(raw.dtype), raw)
            if not fits:
                raise TypeError(f"{what}: {x!r} is not exactly representable as {dtype}, the "
                                "dtype of the tensor operand; convert the tensor with .astype() "
                                "first")
            return self.create(stored)
        return self.create(np.asarray(x, dtype=dtype))

    @staticmethod
    def _pad(t: Tensor, rank: int) -> Tensor:
        extra = rank - t.ndim
        if extra <= 0:
            return t
        return t._view((1,) * extra + t.shape, (0,) * extra + t.strides, t.offset)

    def _unary(self, name: str, a: Tensor) -> Tensor:
        a = self._own(a, name)
        return self._launch(name, [a], self._alloc(a.shape, a.dtype))

    def _broadcast_shape(self, name: str, *tensors: Tensor) -> Tuple[int, ...]:
        shape = _broadcast(tuple([t._shape for t in tensors]))
        if shape is None:
            listed = " and ".join(str(t.shape) for t in tensors)
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: shapes {listed} do not broadcast")
        return shape

    def _binary(self, name: str, a: ArrayOrScalar, b: ArrayOrScalar,
                out_dtype: Optional[DTypeLike] = None, exact: bool = False) -> Tensor:
        # This client's own tensors (the common case) skip _operand's checks.
        if type(a) is Tensor and a._client is self:
            ta = a
        elif not isinstance(a, Tensor) and not isinstance(b, Tensor):
            raise TypeError(f"{name}: at least one operand must be a Tensor")
        else:
            ta = self._operand(a, b if isinstance(b, Tensor) else None, name, exact)
        tb = b if type(b) is Tensor and b._client is self else self._operand(b, ta, name, exact)
        if ta._dtype != tb._dtype:
            raise TypeError(f"{name}: dtypes differ ({ta.dtype} and {tb.dtype}); convert one "
                            "with .astype()")
        shape = ta._shape if ta._shape == tb._shape else self._broadcast_shape(name, ta, tb)
        rank = len(shape)
        out = self._alloc(shape, ta._dtype if out_dtype is None else out_dtype)
        return self._launch(name, [ta if len(ta._shape) == rank else self._pad(ta, rank),
                                   tb if len(tb._shape) == rank else self._pad(tb, rank)], out)

    def add(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a + b, broadcasting like numpy (the ``add`` kernel; integers wrap)."""
        return self._binary("add", a, b)

    def sub(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a - b, broadcasting (``sub``; integers wrap)."""
        return self._binary("sub", a, b)

    def mul(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a * b, broadcasting (``mul``; integers wrap)."""
        return self._binary("mul", a, b)

    def div(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a / b, broadcasting (``div``). Integers divide like C: truncation toward zero,
        x / 0 = 0 (unlike numpy's floor division)."""
        return self._binary("div", a, b)

    def pow(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a ** b, broadcasting (``pow``; float32/float64 only)."""
        return self._binary("pow", a, b)

    def maximum(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """Elementwise maximum, broadcasting (3-buffer ``max``; NaN propagates)."""
        return self._binary("max", a, b)

    def minimum(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """Elementwise minimum, broadcasting (3-buffer ``min``; NaN propagates)."""
        return self._binary("min", a, b)

    # Note [Comparisons]: a comparison's operands have one dtype (the tensor's; a scalar or array
    # operand is stored in it, and must be exactly representable when that dtype is an integer
    # or bool, so that ``int_tensor < 0.5`` is refused rather than computed as ``< 0``); the
    # result is a bool tensor. Floats compare as IEEE 754 and numpy do: NaN is unequal to
    # everything, itself included, and unordered. Tensor has the operators <, <=, > and >=, but
    # keeps == and != as identity (Tensor.eq / Tensor.ne compare elements): an elementwise
    # __eq__ would make Tensor unhashable and turn ``t in some_list`` into a kernel launch
    # whose truth value is meaningless.
    def eq(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a == b elementwise, broadcasting, as a bool tensor (``eq``; every dtype; Note
        [Comparisons])."""
        return self._binary("eq", a, b, np.bool_, exact=True)

    def ne(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a != b elementwise, broadcasting, as a bool tensor (``ne``; NaN != NaN is True)."""
        return self._binary("ne", a, b, np.bool_, exact=True)

    def lt(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a < b elementwise, broadcasting, as a bool tensor (``lt``)."""
        return self._binary("lt", a, b, np.bool_, exact=True)

    def le(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a <= b elementwise, broadcasting, as a bool tensor (``le``)."""
        return self._binary("le", a, b, np.bool_, exact=True)

    def gt(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a > b elementwise, broadcasting, as a bool tensor (``gt``)."""
        return self._binary("gt", a, b, np.bool_, exact=True)

    def ge(self, a: ArrayOrScalar, b: ArrayOrScalar) -> Tensor:
        """a >= b elementwise, broadcasting, as a bool tensor (``ge``)."""
        return self._binary("ge", a, b, np.bool_, exact=True)

    def where(self, cond: ArrayOrScalar, x: ArrayOrScalar, y: ArrayOrScalar) -> Tensor:
        """Elements of x where cond is true, of y elsewhere, all three broadcasting like numpy's
        ``np.where(cond, x, y)`` (``where``; every dtype). cond is a bool tensor (compare to
        make one: ``t > 0``) or bool array-like; x and y have one dtype, the result's, so at
        least one of them is a Tensor and a scalar or array operand is stored in its dtype
        (exactly, for integer and bool dtypes: Note [Comparisons]). The chosen element is
        copied bit for bit (NaN payloads, -0)."""
        if isinstance(cond, Tensor):
            tc = self._own(cond, "where")
            if tc.dtype != np.bool_:
                raise TypeError(f"where: cond must be bool, got {tc.dtype}; compare it "
                                "(e.g. cond != 0) or use .astype(bool)")
        else:
            raw = np.asarray(cond)
            if raw.dtype != np.bool_:
                raise TypeError(f"where: cond must be bool, got {raw.dtype}")
            tc = self.create(raw)
        if not isinstance(x, Tensor) and not isinstance(y, Tensor):
            raise TypeError("where: x or y must be a Tensor (it gives the result's dtype)")
        tx = self._operand(x, y if isinstance(y, Tensor) else None, "where", exact=True)
        ty = self._operand(y, tx, "where", exact=True)
        if tx.dtype != ty.dtype:
            raise TypeError(f"where: dtypes of x and y differ ({tx.dtype} and {ty.dtype}); "
                            "convert one with .astype()")
        shape = self._broadcast_shape("where", tc, tx, ty)
        rank = len(shape)
        out = self._alloc(shape, tx.dtype)
        return self._launch("where", [self._pad(t, rank) for t in (tc, tx, ty)], out,
                            dtype=tx.dtype)

    def neg(self, a: Tensor) -> Tensor:
        """-a (``neg``; signed types and floats)."""
        return self._unary("neg", a)

    def abs(self, a: Tensor) -> Tensor:
        """|a| (``abs``; signed types and floats)."""
        return self._unary("abs", a)

    def relu(self, a: Tensor) -> Tensor:
        """max(a, 0) (``relu``; signed types and floats; NaN stays NaN)."""
        return self._unary("relu", a)

    def exp(self, a: Tensor) -> Tensor:
        """e ** a (``exp``; float32/float64)."""
        return self._unary("exp", a)

    def log(self, a: Tensor) -> Tensor:
        """Natural logarithm (``log``; float32/float64)."""
        return self._unary("log", a)

    def sqrt(self, a: Tensor) -> Tensor:
        """Square root (``sqrt``; float32/float64)."""
        return self._unary("sqrt", a)

    def sigmoid(self, a: Tensor) -> Tensor:
        """1 / (1 + e ** -a) (``sigmoid``; float32/float64)."""
        return self._unary("sigmoid", a)

    def tanh(self, a: Tensor) -> Tensor:
        """Hyperbolic tangent (``tanh``; float32/float64)."""
        return self._unary("tanh", a)

    def gelu(self, a: Tensor, approximate: str = "none") -> Tensor:
        """GELU like ``torch.nn.functional.gelu``: ``approximate="none"`` is x * Phi(x) (the
        ``gelu`` kernel, erf form), ``"tanh"`` PyTorch's tanh approximation (``gelu_tanh``).
        Floats only (float32, float64, float16, bfloat16; halves compute in float32); -inf
        gives -0 (docs/kernel-abi.md)."""
        if approximate == "none":
            return self._unary("gelu", a)
        if approximate == "tanh":
            return self._unary("gelu_tanh", a)
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")

    def silu(self, a: Tensor) -> Tensor:
        """x * sigmoid(x) (``silu``, also called swish; floats only; -inf gives -0)."""
        return self._unary("silu", a)

    def copy(self, a: Tensor) -> Tensor:
        """A dense copy of a (any view) (``copy``)."""
        return self._unary("copy", a)

    def cast(self, a: Tensor, dtype: DTypeLike) -> Tensor:
        """a converted to ``dtype`` (``cast``: float to integer truncates and saturates, NaN
        gives 0; integer to integer wraps; docs/kernel-abi.md)."""
        a = self._own(a, "cast")
        return self._launch("cast", [a], self._alloc(a.shape, dtype))

    def full(self, shape: Union[int, Sequence[int]], value: Union[int, float],
             dtype: DTypeLike = np.float32) -> Tensor:
        """A new dense tensor of ``shape`` filled with ``value`` (``fill``)."""
        out = self.empty(shape, dtype)
        return self._launch("fill", [], out, scalars=[Scalars(out.dtype, [value])])

    def zeros(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32) -> Tensor:
        """full(shape, 0, dtype)."""
        return self.full(shape, 0, dtype)

    def ones(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32) -> Tensor:
        """full(shape, 1, dtype)."""
        return self.full(shape, 1, dtype)

    def matmul(self, a: ArrayOrScalar, b: ArrayOrScalar,
               allow_tf32: Optional[bool] = None) -> Tensor:
        """Matrix product with numpy's rules (``matmul``): [..., M, K] @ [..., K, N], batch dims
        broadcast, a 1-D operand is a row (a) or column (b) vector that is dropped again.
        ``allow_tf32`` (None: the client's ``allow_tf32``): a float32 product may run on TF32
        tensor cores, inputs rounded to 11 significant bits (``Info.matmul_types`` lists
        ``"tf32*tf32+f32"`` where it does; elsewhere the product stays exact)."""
        return self._matmul(a, b, allow_tf32=allow_tf32)

    def _matmul(self, a: ArrayOrScalar, b: ArrayOrScalar, heads_inner: bool = False,
                allow_tf32: Optional[bool] = None) -> Tensor:
        """matmul(); ``heads_inner``: an output of rank 3 or more is laid out as [..., M, H, N]
        and returned as its [..., H, M, N] view (attention's output: transposing it back to
        [..., M, H, N] and merging the heads is then free, as in torch's SDPA)."""
        ta = self._operand(a, b if isinstance(b, Tensor) else None, "matmul")
        tb = self._operand(b, ta, "matmul")
        if ta.ndim == 0 or tb.ndim == 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "matmul: operands must have at least one dimension")
        if ta.dtype != tb.dtype:
            raise TypeError(f"matmul: dtypes differ ({ta.dtype} and {tb.dtype})")
        squeeze_a, squeeze_b = ta.ndim == 1, tb.ndim == 1
        if squeeze_a:
            ta = ta[None, :]
        if squeeze_b:
            tb = tb[:, None]
        if ta.shape[-1] != tb.shape[-2]:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"matmul: shapes {ta.shape} and {tb.shape}: inner "
                                       f"dimensions {ta.shape[-1]} and {tb.shape[-2]} differ")
        batch = _broadcast((ta._shape[:-2], tb._shape[:-2]))
        if batch is None:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"matmul: batch dimensions of {ta.shape} and {tb.shape} "
                                       "do not broadcast")
        shape = batch + (ta._shape[-2], tb._shape[-1])
        if heads_inner and len(shape) >= 3 and not (squeeze_a or squeeze_b):
            out = self._alloc(shape[:-3] + (shape[-2], shape[-3], shape[-1]),
                              ta.dtype).swapaxes(-3, -2)
        else:
            out = self._alloc(shape, ta.dtype)
        tf32 = self.allow_tf32 if allow_tf32 is None else allow_tf32  # type: ignore[attr-defined]
        self._launch("matmul", [self._pad(ta, len(shape)), self._pad(tb, len(shape))], out,
                     allow_tf32=bool(tf32) and ta._dtype == np.float32)
        if squeeze_a:
            out = out[..., 0, :]
        if squeeze_b:
            out = out[..., 0]
        return out

    def softmax(self, a: Tensor, axis: int = -1) -> Tensor:
        """Softmax along ``axis`` (``softmax``, which works on the last axis: other axes go
        through a transposed view; float dtypes, halves computing in float32)."""
        a = self._own(a, "softmax")
        if a.ndim == 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "softmax: needs at least one dimension")
        axis = axis % a.ndim
        moved = a.swapaxes(axis, -1)
        out = self._launch("softmax", [moved], self._alloc(moved.shape, a.dtype))
        return out.swapaxes(axis, -1)

    def causal_softmax(self, a: Tensor, scale: float = 1.0) -> Tensor:
        """Attention's causal probabilities (``causal_softmax``): over the last two dims
        [..., L queries, S keys], row q is the softmax of ``a[..., q, :q + 1] * scale`` and 0 at
        keys past q (the lower triangle aligned at the top left, as torch's ``is_causal``). Float
        dtypes, halves computing in float32; ``scale`` finite."""
        a = self._own(a, "causal_softmax")
        if a.ndim < 2:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "causal_softmax: needs at least two dimensions (queries, "
                                       f"keys), got shape {a.shape}")
        if not math.isfinite(scale):
            raise ValueError(f"causal_softmax: scale must be finite, got {scale}")
        return self._launch("causal_softmax", [a], self._alloc(a.shape, a.dtype),
                            scalars=[Scalars(np.float64, [float(scale)])])

    def causal_attention(self, q: Tensor, k: Tensor, v: Tensor,
                         scale: Optional[float] = None) -> Tensor:
        """Causal attention in one launch (``causal_attention``): softmax over keys s <= i of
        ``scale * q[..., i, :] . k[..., s, :]``, times v, for q [..., L, E], k [..., S, E],
        v [..., S, Ev] of one float dtype (batch dims broadcast; ``scale`` 1/sqrt(E) unless
        given, finite). The [L, S] scores never reach memory: on CUDA, f16 and bf16 with
        E = Ev = 64 run flash attention on the tensor cores. The result is laid out as
        ``scaled_dot_product_attention``'s."""
        name = "causal_attention"
        q, k, v = (self._own(t, name) for t in (q, k, v))
        if min(q.ndim, k.ndim, v.ndim) < 2:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: q, k and v need at least two dimensions, got "
                                       f"shapes {q.shape}, {k.shape}, {v.shape}")
        if not q.dtype == k.dtype == v.dtype:
            raise TypeError(f"{name}: dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
        if np.dtype(q.dtype) not in _FLOAT_DTYPES:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: q, k and v must be floats, got {q.dtype}")
        if k.shape[-1] != q.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: shapes q {q.shape}, k {k.shape}, v {v.shape} "
                                       "do not chain (q and k share E, k and v share S)")
        batch = _broadcast((q._shape[:-2], k._shape[:-2], v._shape[:-2]))
        if batch is None:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: batch dimensions of {q.shape}, {k.shape} and "
                                       f"{v.shape} do not broadcast")
        if scale is None:
            scale = 1 / math.sqrt(q.shape[-1]) if q.shape[-1] > 0 else 1.0
        if not math.isfinite(scale):
            raise ValueError(f"{name}: scale must be finite, got {scale}")
        shape = batch + (q._shape[-2], v._shape[-1])
        if len(shape) >= 3:  # [..., L, H, Ev] in memory, seen as [..., H, L, Ev].
            out = self._alloc(shape[:-3] + (shape[-2], shape[-3], shape[-1]),
                              q.dtype).swapaxes(-3, -2)
        else:
            out = self._alloc(shape, q.dtype)
        rank = len(shape)
        return self._launch(name, [self._pad(t, rank) for t in (q, k, v)], out,
                            scalars=[Scalars(np.float64, [float(scale)])])

    def scaled_dot_product_attention(self, q: Tensor, k: Tensor, v: Tensor,
                                     attn_mask: Optional[ArrayOrScalar] = None,
                                     is_causal: bool = False,
                                     scale: Optional[float] = None) -> Tensor:
        """Attention as ``torch.nn.functional.scaled_dot_product_attention``:
        softmax(q @ k^T * scale + mask) @ v over q [..., L, E], k [..., S, E], v [..., S, Ev]
        (batch dims broadcast), ``scale`` 1/sqrt(E) unless given. ``is_causal`` lets query i see
        keys 0..i (the mask's top-left-aligned lower triangle, as torch's); ``attn_mask`` is a
        bool mask (True takes part) or a float mask added to the scores, broadcasting to
        [..., L, S]. Float dtypes; halves compute each builtin in float32 and round once.
        Causal attention in f16 or bf16 is ``causal_attention``, one fused launch; otherwise
        composed of builtins, so it costs what those cost: causal, matmul, causal_softmax (the
        scale and the mask in one pass), matmul (f32 and f64: cuBLAS products beat a fused
        kernel on the CUDA cores); else matmul, mul, add or where, softmax, matmul. The result's
        memory is laid out as [..., L, H, Ev] (H the dim before L), so that
        ``.swapaxes(-3, -2).reshape(..., L, H * Ev)``, merging the heads, is a view and not a
        copy."""
        q = self._own(q, "scaled_dot_product_attention")
        k = self._own(k, "scaled_dot_product_attention")
        v = self._own(v, "scaled_dot_product_attention")
        if min(q.ndim, k.ndim, v.ndim) < 2:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "scaled_dot_product_attention: q, k and v need at least "
                                       f"two dimensions, got shapes {q.shape}, {k.shape}, "
                                       f"{v.shape}")
        if not all(np.dtype(t.dtype) in _FLOAT_DTYPES for t in (q, k, v)):
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "scaled_dot_product_attention: q, k and v must be floats, "
                                       f"got {q.dtype}, {k.dtype}, {v.dtype}")
        if k.shape[-2] != v.shape[-2]:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"scaled_dot_product_attention: k {k.shape} and v "
                                       f"{v.shape} have different sequence lengths")
        if is_causal and attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not "
                             "both (as torch)")
        if scale is None:
            scale = 1 / math.sqrt(q.shape[-1])
        if (is_causal and q.dtype == k.dtype == v.dtype
                and np.dtype(q.dtype) in _HALF_DTYPES):
            return self.causal_attention(q, k, v, scale)
        scores = self.matmul(q, k.swapaxes(-1, -2))
        if is_causal:
            return self._matmul(self.causal_softmax(scores, scale), v, heads_inner=True)
        scores = scores * scale
        if attn_mask is not None:
            mask = attn_mask if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
            if mask.dtype == np.bool_:
                scores = self.where(mask, scores, -np.inf)
            else:
                scores = scores + mask
        return self._matmul(self.softmax(scores, axis=-1), v, heads_inner=True)

    def _norm_param(self, name: str, what: str, x: Optional[ArrayOrScalar], a: Tensor) -> Tensor:
        """weight or bias of a norm: a's dtype, 1-D of a's last dim."""
        t = self._operand(x, a, f"{name}: {what}")
        if t.dtype != a.dtype:
            raise TypeError(f"{name}: {what} dtype {t.dtype} differs from the input's {a.dtype}; "
                            "convert one with .astype()")
        if t.shape != a.shape[-1:]:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: {what} shape {t.shape} must be "
                                       f"{a.shape[-1:]} (1-D, the input's last dim)")
        return t

    def _norm(self, name: str, a: Tensor, params: Sequence[Tensor], eps: float) -> Tensor:
        if a.ndim == 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: needs at least one dimension")
        return self._launch(name, [a, *params], self._alloc(a.shape, a.dtype),
                            scalars=[Scalars(np.float64, [eps])])

    def layer_norm(self, a: Tensor, weight: Optional[ArrayOrScalar] = None,
                   bias: Optional[ArrayOrScalar] = None, eps: float = 1e-5) -> Tensor:
        """Layer normalization over the last axis (``layer_norm``), as
        ``torch.nn.functional.layer_norm(a, a.shape[-1:], weight, bias, eps)``:
        (a - mean) / sqrt(var + eps) * weight + bias, var the biased variance of each row.
        ``weight`` and ``bias`` are 1-D of the last dim's length (Tensors or arrays), or None;
        float32/float64/float16/bfloat16, halves computing in float32. A bias without a weight
        gets a weight of ones."""
        a = self._own(a, "layer_norm")
        params = []
        if weight is None and bias is not None:
            weight = self.ones(a.shape[-1:], a.dtype)
        if weight is not None:
            params.append(self._norm_param("layer_norm", "weight", weight, a))
        if bias is not None:
            params.append(self._norm_param("layer_norm", "bias", bias, a))
        return self._norm("layer_norm", a, params, eps)

    def rms_norm(self, a: Tensor, weight: Optional[ArrayOrScalar] = None,
                 eps: Optional[float] = None) -> Tensor:
        """RMS normalization over the last axis (``rms_norm``), as
        ``torch.nn.functional.rms_norm(a, a.shape[-1:], weight, eps)``:
        a / sqrt(mean(a ** 2) + eps) * weight. ``eps=None`` is the machine epsilon of a's dtype,
        as in torch (float32 2**-23, float64 2**-52, float16 2**-10, bfloat16 2**-7). ``weight``
        is 1-D of the last dim's length, or None; floats, halves computing in float32."""
        a = self._own(a, "rms_norm")
        if eps is None:
            eps = _MACHINE_EPS.get(np.dtype(a.dtype))
            if eps is None:  # Not a float: the daemon names the supported types.
                eps = 0.0
        params = [] if weight is None else [self._norm_param("rms_norm", "weight", weight, a)]
        return self._norm("rms_norm", a, params, eps)

    @staticmethod
    def _axis(ndim: int, axis: int, name: str) -> int:
        if not -ndim <= int(axis) < ndim:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{name}: axis {axis} is out of bounds for {ndim} "
                                       "dimensions")
        return int(axis) % ndim

    def gather(self, table: Tensor, indices: ArrayOrScalar, axis: int = 0) -> Tensor:
        """Elements of ``table`` picked along ``axis`` by ``indices`` (``gather``), like
        numpy.take and torch.index_select: the result's shape is ``table.shape[:axis] +
        indices.shape + table.shape[axis + 1:]``, so an embedding table [V, D] with token ids
        [B, S] gives [B, S, D]. ``indices`` is an int32 or int64 Tensor, or an int array or
        list (int32 stays int32, other integers become int64, uint64 values beyond int64 its
        maximum). An index k in [-n, 0) counts from the end (n = table.shape[axis]); unlike
        numpy, any other index outside [0, n) gives zeros instead of an error (checked on the
        daemon; nothing is read outside the table)."""
        table = self._own(table, "gather")
        if table.ndim == 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "gather: the table needs at least one dimension")
        axis = self._axis(table.ndim, axis, "gather")
        if isinstance(indices, Tensor):
            idx = self._own(indices, "gather")
        else:
            a = np.asarray(indices)
            if a.size == 0 and a.dtype.kind == "f":
                a = a.astype(np.int64)  # np.asarray([]) is float64.
            if a.dtype.kind not in "iu":
                raise TypeError(f"gather: indices must be integers, got dtype {a.dtype}")
            if a.dtype == np.uint64:  # Beyond int64 stays out of range rather than wrapping.
                a = np.minimum(a, np.iinfo(np.int64).max)
            idx = self.create(a if a.dtype == np.int32 else a.astype(np.int64))
        shape = table.shape[:axis] + idx.shape + table.shape[axis + 1:]
        return self._launch("gather", [table, idx], self._alloc(shape, table.dtype),
                            dtype=table.dtype, axis=axis, index_dtype=idx.dtype)

    def concat(self, tensors: Sequence[ArrayOrScalar], axis: int = 0) -> Tensor:
        """The tensors joined along ``axis``, like numpy.concatenate: the same dtype and rank,
        every other dimension equal. Each input is written into its slice of the result by one
        ``copy`` launch (a view of the output: any number of inputs, any of their layouts).
        Arrays among ``tensors`` are stored first with the first Tensor's dtype."""
        like = next((t for t in tensors if isinstance(t, Tensor)), None)
        parts = [self._operand(t, like, "concat") for t in tensors]
        if not parts:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "concat: needs at least one tensor")
        first = parts[0]
        if first.ndim == 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "concat: tensors[0] is 0-d; concat needs at least one "
                                       "dimension")
        axis = self._axis(first.ndim, axis, "concat")
        for i, t in enumerate(parts[1:], 1):
            if t.dtype != first.dtype:
                raise TypeError(f"concat: tensors[{i}] has dtype {t.dtype}, tensors[0] "
                                f"{first.dtype}; convert with .astype()")
            same = t.ndim == first.ndim and all(
                a == b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != axis)
            if not same:
                raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                           f"concat: tensors[{i}] has shape {t.shape}, tensors[0] "
                                           f"{first.shape}; all dimensions but axis {axis} must "
                                           "be equal")
        shape = list(first.shape)
        shape[axis] = sum(t.shape[axis] for t in parts)
        out = self._alloc(shape, first.dtype)
        start, lead = 0, (slice(None),) * axis
        for t in parts:
            n = t.shape[axis]
            if n:
                self._launch("copy", [t], out[lead + (slice(start, start + n),)])
            start += n
        return out

    def _axes(self, a: Tensor, axis: Axis, name: str) -> Tuple[int, ...]:
        if axis is None:
            return tuple(range(a.ndim))
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        out = []
        for ax in axes:
            if not -a.ndim <= int(ax) < a.ndim:
                raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                           f"{name}: axis {ax} is out of bounds for "
                                           f"{a.ndim} dimensions")
            out.append(int(ax) % a.ndim)
        return tuple(sorted(set(out)))

    def _reduce(self, name: str, a: Tensor, axis: Axis, keepdims: bool) -> Tensor:
        a = self._own(a, name)
        out_dtype = np.dtype("<i8") if name == "argmax" else a.dtype
        ndim = a.ndim
        axes = self._axes(a, axis, name)
        if ndim == 0:
            a, axes = a.reshape(1), (0,)
        kept_shape = tuple(1 if i in axes or ndim == 0 else n for i, n in enumerate(a.shape))
        if name == "argmax" and len(axes) > 1:
            flat = a.reshape(-1)  # numpy: the index into the flattened (row-major) array.
            r = self._launch(name, [flat], self._alloc((1,), out_dtype))
            result = r.reshape(kept_shape)
        elif len(axes) == a.ndim and a.is_contiguous and a.ndim > 1:
            flat = a.reshape(-1)
            result = self._launch(name, [flat], self._alloc((1,), out_dtype)).reshape(kept_shape)
        else:
            # One pass per axis. Sums and means of half types pass their partial results in
            # float32, rounding to the half type once at the end, as a single reduction does.
            half = a.dtype == np.float16 or (BFLOAT16 is not None and a.dtype == BFLOAT16)
            widen = half and len(axes) > 1 and name in ("sum", "mean")
            result = self.cast(a, np.float32) if widen else a
            for ax in axes:
                shape = list(result.shape)
                shape[ax] = 1
                result = self._launch(name, [result], self._alloc(shape, result.dtype
                                                                  if widen else out_dtype),
                                      dtype=result.dtype, axis=ax)
            if widen:
                result = self.cast(result, out_dtype)
        if keepdims and ndim > 0:
            return result
        final = tuple(n for i, n in enumerate(kept_shape) if i not in axes) if ndim else ()
        return result._view(final, dense_strides(final), result.offset)

    def sum(self, a: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """Sum over ``axis`` (an int, a tuple, or None for all) like numpy (``sum``; float32
        accumulates in float64; integers wrap). The result keeps a's dtype."""
        return self._reduce("sum", a, axis, keepdims)

    def mean(self, a: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """Mean over ``axis`` (``mean``; float32/float64, accumulating in float64)."""
        return self._reduce("mean", a, axis, keepdims)

    def max(self, a: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """Maximum over ``axis`` (2-buffer ``max``; NaN propagates)."""
        return self._reduce("max", a, axis, keepdims)

    def min(self, a: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """Minimum over ``axis`` (2-buffer ``min``; NaN propagates)."""
        return self._reduce("min", a, axis, keepdims)

    def argmax(self, a: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
        """Index (int64) of the first maximum along ``axis``; None: into the flattened array,
        like numpy (``argmax``)."""
        if axis is not None and not isinstance(axis, (int, np.integer)):
            raise TypeError("argmax: axis must be an int or None")
        return self._reduce("argmax", a, axis, keepdims)
