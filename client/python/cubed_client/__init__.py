"""cubed_client: the Python SDK of cubed, the out-of-process GPU/CPU compute daemon.

    import numpy as np, cubed_client

    with cubed_client.connect("unix:/run/user/1000/cubed.sock") as client:
        a = client.create(np.random.rand(512, 256).astype(np.float32))
        b = client.create(np.random.rand(256, 128).astype(np.float32))
        c = a @ b                      # the builtin matmul kernel, pipelined
        print(client.read(c).shape)    # (512, 128)

See client/python/README.md; the wire API is docs/api.md, the kernels docs/kernel-abi.md.
"""

from ._address import default_address
from ._client import Binding, Client, Profile
from ._connect import connect
from ._errors import (CubedError, DeadlineExceededError, FailedPreconditionError, InternalError,
                      InvalidArgumentError, NotFoundError, PermissionDeniedError,
                      ResourceExhaustedError, UnauthenticatedError, UnavailableError,
                      UnimplementedError)
from ._graph import Graph
from ._tensor import Tensor
from ._trace import Trace, TraceEvent
from ._types import (KERNEL_DTYPES, BuiltinKernel, Info, MemoryUsage, Scalars, cube_count_for,
                     dense_strides, encode_metadata)

__version__ = "0.1.0"
"""Version of this SDK."""

__all__ = [
    "Binding", "BuiltinKernel", "Client", "CubedError", "DeadlineExceededError",
    "FailedPreconditionError", "Graph", "Info", "InternalError", "InvalidArgumentError",
    "KERNEL_DTYPES", "MemoryUsage", "NotFoundError", "PermissionDeniedError", "Profile",
    "ResourceExhaustedError", "Scalars", "Tensor", "Trace", "TraceEvent", "UnauthenticatedError",
    "UnavailableError", "UnimplementedError", "connect", "cube_count_for", "default_address",
    "dense_strides", "encode_metadata",
]
