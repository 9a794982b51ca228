"""client.scaled_dot_product_attention against a float64 numpy reference of torch's definition."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import cubed_client

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(20261202)


def reference(q, k, v, mask=None, causal=False, scale=None):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    elif mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def qkv(shape_q, shape_k, ev, dtype):
    q = RNG.standard_normal(shape_q).astype(dtype)
    k = RNG.standard_normal(shape_k).astype(dtype)
    v = RNG.standard_normal(shape_k[:-1] + (ev,)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float64", 1e-12), (BF16, 3e-2),
                                        ("float16", 3e-3)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_reference(client, dtype, tol, causal):
    q, k, v = qkv((2, 3, 7, 8), (2, 3, 7, 8), 5, dtype)
    out = client.scaled_dot_product_attention(client.create(q), client.create(k),
                                              client.create(v), is_causal=causal)
    assert out.shape == (2, 3, 7, 5) and out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out.read().astype(np.float64), reference(q, k, v, causal=causal),
                               rtol=tol, atol=tol)


def test_causal_with_more_keys_than_queries_is_top_left_aligned(client):
    # As torch's is_causal: query i sees keys 0..i of the 9, whatever the key count.
    q, k, v = qkv((4, 6), (9, 6), 3, "float32")
    out = client.scaled_dot_product_attention(client.create(q), client.create(k),
                                              client.create(v), is_causal=True)
    np.testing.assert_allclose(out.read(), reference(q, k, v, causal=True), rtol=1e-5, atol=1e-6)
    # Query 0 sees key 0 only.
    np.testing.assert_allclose(out.read()[0], v[0], rtol=1e-6)


def test_bool_and_float_masks_and_scale(client):
    q, k, v = qkv((2, 5, 4), (2, 6, 4), 4, "float32")
    keep = RNG.random((5, 6)) < 0.7
    keep[:, 0] = True  # Every query sees a key.
    add = RNG.standard_normal((2, 1, 6)).astype(np.float32)
    tq, tk, tv = (client.create(x) for x in (q, k, v))
    for mask in (keep, add):
        out = client.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, scale=0.3)
        np.testing.assert_allclose(out.read(), reference(q, k, v, mask=mask, scale=0.3),
                                   rtol=1e-5, atol=1e-6)
    out = client.scaled_dot_product_attention(tq, tk, tv, attn_mask=client.create(keep))
    np.testing.assert_allclose(out.read(), reference(q, k, v, mask=keep), rtol=1e-5, atol=1e-6)


def test_bad_shapes_and_arguments(client):
    before = client.memory_usage()
    q, k, v = (client.create(x) for x in qkv((3, 4), (5, 4), 2, "float32"))
    with pytest.raises(cubed_client.InvalidArgumentError, match="sequence lengths"):
        client.scaled_dot_product_attention(q, k, v[:4])
    with pytest.raises(cubed_client.InvalidArgumentError, match="two dimensions"):
        client.scaled_dot_product_attention(q[0], k, v)
    with pytest.raises(cubed_client.InvalidArgumentError, match="inner dimensions"):
        client.scaled_dot_product_attention(q[:, :3], k, v)
    with pytest.raises(ValueError, match="not both"):
        client.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((3, 5), bool),
                                            is_causal=True)
    with pytest.raises(cubed_client.InvalidArgumentError):
        i = client.create(np.ones((3, 4), np.int32))
        client.scaled_dot_product_attention(i, i, i)
    del q, k, v, i
    assert client.memory_usage().bytes_in_use == before.bytes_in_use


@pytest.mark.parametrize("causal", [False, True])
def test_merging_the_output_heads_is_a_view(client, causal):
    # [batch, heads, seq, head_dim] out, laid out [batch, seq, heads, head_dim]: as a model
    # merges the heads (transpose, reshape) it gets a view of the same memory, no copy kernel.
    q, k, v = qkv((2, 3, 5, 4), (2, 3, 5, 4), 4, "float32")
    out = client.scaled_dot_product_attention(client.create(q), client.create(k),
                                              client.create(v), is_causal=causal)
    assert out.shape == (2, 3, 5, 4) and not out.is_contiguous
    merged = out.swapaxes(1, 2).reshape(2, 5, 12)
    assert merged.id == out.id and merged.is_contiguous
    want = reference(q, k, v, causal=causal)
    np.testing.assert_allclose(out.read(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(merged.read(), want.transpose(0, 2, 1, 3).reshape(2, 5, 12),
                               rtol=1e-5, atol=1e-6)
    # Three dims (one head dim): the same layout rule.
    q3, k3, v3 = qkv((3, 5, 4), (3, 6, 4), 2, "float32")
    out3 = client.scaled_dot_product_attention(client.create(q3), client.create(k3),
                                               client.create(v3))
    np.testing.assert_allclose(out3.read(), reference(q3, k3, v3), rtol=1e-5, atol=1e-6)


# causal_attention: the fused kernel (on CUDA, E = Ev = 64 in f16 and bf16 takes the tensor
# cores; sizes off its 128-query and 64-key tiles).
@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float64", 1e-12), (BF16, 3e-2),
                                        ("float16", 3e-3)])
@pytest.mark.parametrize("shapes", [((2, 3, 130, 64), (2, 3, 130, 64), 64),
                                    ((1, 2, 70, 64), (1, 2, 200, 64), 64),
                                    ((2, 150, 64), (2, 40, 64), 64),
                                    ((3, 9, 24), (3, 11, 24), 40)])
def test_causal_attention_matches_the_reference(client, dtype, tol, shapes):
    q, k, v = qkv(shapes[0], shapes[1], shapes[2], dtype)
    out = client.causal_attention(client.create(q), client.create(k), client.create(v))
    assert out.shape == q.shape[:-1] + (shapes[2],) and out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out.read().astype(np.float64), reference(q, k, v, causal=True),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, tol", [(BF16, 3e-2), ("float16", 3e-3), ("float32", 1e-5)])
def test_causal_attention_of_head_views_with_shared_keys(client, dtype, tol):
    # q, k and v as a model makes them: views of one [b, s, 3, h, 64] projection, heads moved
    # before the sequence; then k and v shared by every batch (stride 0).
    b, s, h = 2, 100, 3
    qkv_all = RNG.standard_normal((b, s, 3, h, 64)).astype(dtype)
    t = client.create(qkv_all)
    q, k, v = (t[:, :, i].swapaxes(1, 2) for i in range(3))
    out = client.causal_attention(q, k, v, scale=0.2)
    want = reference(*(np.swapaxes(qkv_all[:, :, i], 1, 2) for i in range(3)), causal=True,
                     scale=0.2)
    np.testing.assert_allclose(out.read().astype(np.float64), want, rtol=tol, atol=tol)
    k1, v1 = k[:1], v[:1]
    out = client.causal_attention(q, k1, v1, scale=0.2)
    want = reference(np.swapaxes(qkv_all[:, :, 0], 1, 2), np.swapaxes(qkv_all[:1, :, 1], 1, 2),
                     np.swapaxes(qkv_all[:1, :, 2], 1, 2), causal=True, scale=0.2)
    np.testing.assert_allclose(out.read().astype(np.float64), want, rtol=tol, atol=tol)


def test_sdpa_is_causal_in_half_types_is_the_fused_kernel(client):
    q, k, v = qkv((2, 2, 70, 64), (2, 2, 70, 64), 64, BF16)
    tq, tk, tv = (client.create(x) for x in (q, k, v))
    fused = client.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    assert not fused.is_contiguous  # [b, L, H, Ev] memory: merging the heads is a view.
    np.testing.assert_array_equal(fused.read(), client.causal_attention(tq, tk, tv).read())
    np.testing.assert_allclose(fused.read().astype(np.float64), reference(q, k, v, causal=True),
                               rtol=3e-2, atol=3e-2)


def test_causal_attention_bad_arguments_leave_nothing(client):
    q, k, v = (client.create(x) for x in qkv((3, 4), (5, 4), 2, "float32"))
    before = client.memory_usage().bytes_in_use
    with pytest.raises(cubed_client.InvalidArgumentError, match="do not chain"):
        client.causal_attention(q, k, v[:4])
    with pytest.raises(cubed_client.InvalidArgumentError, match="do not chain"):
        client.causal_attention(q[:, :3], k, v)
    with pytest.raises(cubed_client.InvalidArgumentError, match="two dimensions"):
        client.causal_attention(q[0], k, v)
    with pytest.raises(TypeError, match="dtypes differ"):
        client.causal_attention(q, k, v.astype(np.float64))
    with pytest.raises(ValueError, match="finite"):
        client.causal_attention(q, k, v, scale=math.inf)
    i = client.create(np.ones((3, 4), np.int32))
    with pytest.raises(cubed_client.InvalidArgumentError, match="must be floats"):
        client.causal_attention(i, i, i)
    del i
    assert client.memory_usage().bytes_in_use == before
