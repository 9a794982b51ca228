"""The wire bytes of a builtin wrapper's launch, serialized once per launch key and cached
(Note [Launch fast path]); Client._launch writes its bindings around them."""

from __future__ import annotations

import math
from typing import Any, Sequence, Tuple

import grpc
import numpy as np

from ._errors import InvalidArgumentError
from . import _wire
from ._proto import session_pb2, types_pb2
from ._types import BuiltinKernel, Scalars, cache_put, cube_count_for, encode_metadata

# Note [Launch fast path]
# A builtin wrapper's launch is execute() without its generality: every binding is a tensor of
# this client viewed at its offset, so the metadata block and cube count depend on the layouts
# alone and the kernel message on the call's types alone. Both are serialized once per launch
# key (kernel, types, layouts; a chain of operations repeats a few) and cached as wire bytes, so
# a launch writes just its bindings around them (Note [Hand-encoded commands], _wire.py; each
# tensor's layout and binding are computed once, Tensor._launch_view). The cache is bounded
# (cache_put).
_launch_cache: dict = {}
CHECKED = _wire.mode(types_pb2.EXECUTION_MODE_CHECKED)  # Command.Execute.mode of a launch.


def parts(key: Tuple[Any, ...]) -> Tuple[bytes, bytes]:
    """The wire parts of a launch key (name, dtype, out dtype, axis, index dtype,
    allow_tf32, layouts as (shape, strides, itemsize, offset, allocation bytes) per tensor): the
    Execute's kernel and count fields, and the Bindings' metadata field. InvalidArgumentError as
    execute raises it. Built at a key's first launch, then from the cache."""
    found = _launch_cache.get(key)
    if found is not None:
        return found
    name, dt, out_dtype, axis, index_dtype, allow_tf32, layouts = key
    kernel = BuiltinKernel(name, np.dtype(dt), np.dtype(out_dtype), axis,
                           None if index_dtype is None else np.dtype(index_dtype),
                           allow_tf32).to_proto()
    lengths = [max((nbytes - offset * itemsize) // itemsize, 0)
               for _, _, itemsize, offset, nbytes in layouts]
    try:
        metadata = encode_metadata(lengths, [(shape, strides)
                                             for shape, strides, _, _, _ in layouts])
    except ValueError as e:
        raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
    x, y, z = cube_count_for(math.prod(layouts[-1][0]))
    count = types_pb2.CubeCount(static_count=types_pb2.CubeCount.Static(x=x, y=y, z=z))
    return cache_put(_launch_cache, key,
                     (_execute_head(kernel, count),
                      types_pb2.Bindings(metadata=metadata).SerializeToString()))


_scalar_cache: dict = {}
_ONE_GROUP = object()  # Heads the keys of one group without a zero: no other key equals them.


def scalar_field(scalars: Sequence[Scalars]) -> bytes:
    """The serialized scalars field of Bindings for ``scalars``, cached by their types and values
    (a model repeats its eps and scales; bounded like the launch cache). Values that compare
    equal encode alike for one dtype (1, 1.0 and True; np.float32(1.5) and 1.5), except zeros
    (-0.0 == 0.0): one group without a zero, the wrappers' case, keys by its values as they are;
    other scalars key floats by their exact value (float.hex)."""
    if len(scalars) == 1 and 0 not in (values := tuple(scalars[0].values)):
        key: Any = (_ONE_GROUP, scalars[0].dtype, values)
    else:
        key = tuple([(s.dtype, tuple([float(v).hex() if isinstance(v, (float, np.floating))
                                      else v for v in s.values])) for s in scalars])
    field = _scalar_cache.get(key)
    if field is None:
        field = cache_put(_scalar_cache, key, types_pb2.Bindings(
            scalars=[s.to_proto() for s in scalars]).SerializeToString())
    return field


def _execute_head(kernel: types_pb2.Kernel, count: types_pb2.CubeCount) -> bytes:
    """The serialized kernel and count fields of a Command.Execute."""
    return session_pb2.Command.Execute(kernel=kernel, count=count).SerializeToString()
