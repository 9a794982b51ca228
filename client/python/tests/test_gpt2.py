"""The GPT-2-shaped decoder of examples/gpt2.py, at its tiny size on the CPU backend: its logits
against the float64 numpy reference of the same weights and tokens."""

from __future__ import annotations

import os
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import gpt2  # noqa: E402

CFG = gpt2.SIZES["tiny"]


@pytest.fixture(scope="module")
def reference():
    weights = gpt2.make_weights(CFG, seed=7)
    tokens = gpt2.make_tokens(CFG, batch=2, seq=CFG.n_ctx // 2, seed=8)
    return weights, tokens, gpt2.forward_numpy(CFG, weights, tokens)


@pytest.mark.parametrize("dtype, tolerance", [
    ("float32", 2e-4),
    ("float16", 2e-3),
    # One rounding to 8 significant bits per builtin, through 2 layers: measured 0.3% of the
    # logits' span (f16: 0.03%).
    (np.dtype(ml_dtypes.bfloat16), 1e-2),
])
def test_logits_match_numpy(stream_client, reference, dtype, tolerance):
    weights, tokens, ref = reference
    before = stream_client.memory_usage()
    model = gpt2.CubedGPT2(stream_client, CFG, weights, dtype)
    out = model.forward(tokens)
    logits = out.read().astype(np.float64)
    out.close()
    model.close()
    assert logits.shape == (2, CFG.n_ctx // 2, CFG.vocab)
    assert np.isfinite(logits).all()
    span = np.ptp(ref)
    err = np.abs(logits - ref).max()
    assert err <= tolerance * span, f"max error {err:.3g}, logits span {span:.3g}"
    # The model's argmax agrees with the reference's nearly everywhere (ties aside).
    agree = (logits.argmax(-1) == ref.argmax(-1)).mean()
    assert agree >= (0.999 if dtype == "float32" else 0.9)
    stream_client.sync()
    assert stream_client.memory_usage().bytes_in_use == before.bytes_in_use


def test_a_sequence_longer_than_the_context_is_refused(stream_client):
    model = gpt2.CubedGPT2(stream_client, CFG, gpt2.make_weights(CFG), np.float32)
    try:
        with pytest.raises(ValueError, match="n_ctx"):
            model.forward(gpt2.make_tokens(CFG, 1, CFG.n_ctx + 1))
    finally:
        model.close()
