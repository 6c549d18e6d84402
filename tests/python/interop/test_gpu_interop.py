"""JAX and CuPy arrays on the GPU through DLPack: zero-copy in, results as rudnn Tensors that
both import back, the producer's stream honoured. Each test skips when its package, a GPU or
ruDNN's CUDA backend is absent."""

import numpy as np
import pytest

import rudnn

if rudnn.cuda_device_count() == 0 or not rudnn.built_with_cuda():
    pytest.skip("no CUDA device for ruDNN", allow_module_level=True)


def ref_rms_norm(x, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def ref_softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_cupy_arrays():
    cp = pytest.importorskip("cupy")
    host = np.random.default_rng(0).standard_normal((33, 256)).astype(np.float32)
    x = cp.asarray(host)
    t = rudnn.from_dlpack(x)
    assert t.data_ptr == x.data.ptr and t.device == "cuda:0" and t.shape == (33, 256)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        y = rudnn.rms_norm(x, stream=stream)  # an object with cuda_stream
        assert isinstance(y, rudnn.Tensor) and y.device == "cuda:0"
        y_cp = cp.from_dlpack(y)
        stream.synchronize()
    np.testing.assert_allclose(cp.asnumpy(y_cp), ref_rms_norm(host), rtol=2e-5, atol=2e-5)
    # out= writes a CuPy array in place.
    out = cp.empty_like(x)
    assert rudnn.softmax(x, out=out) is out
    np.testing.assert_allclose(cp.asnumpy(out), ref_softmax(host), rtol=2e-5, atol=1e-7)
    # Integer targets and a float16 array.
    targets = cp.asarray(np.arange(33) % 256, dtype=cp.int32)
    loss = cp.from_dlpack(rudnn.cross_entropy(x.astype(cp.float16), targets))
    assert loss.dtype == cp.float32 and loss.shape == (33,) and bool(cp.isfinite(loss).all())


def test_jax_arrays():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    host = np.random.default_rng(1).standard_normal((16, 128)).astype(np.float32)
    x = jax.device_put(jnp.asarray(host), gpus[0])
    y = rudnn.rms_norm(x)  # JAX exports a capsule ready on the stream ruDNN asks for
    assert isinstance(y, rudnn.Tensor) and y.device.startswith("cuda")
    y_jax = jax.dlpack.from_dlpack(y)
    np.testing.assert_allclose(np.asarray(y_jax), ref_rms_norm(host), rtol=2e-5, atol=2e-5)
    # bfloat16, which numpy lacks, round-trips through DLPack.
    xb = x.astype(jnp.bfloat16)
    s = jax.dlpack.from_dlpack(rudnn.softmax(xb))
    assert s.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(s, dtype=np.float32), ref_softmax(host), rtol=1e-2, atol=1e-2)


def test_torch_tensors_on_torch_current_stream_are_exported_without_stream_work():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    asked = []

    class Spy(torch.Tensor):
        """A torch tensor that records the stream each DLPack export is asked for."""

        def __dlpack__(self, stream=None, **kwargs):
            asked.append(stream)
            return super().__dlpack__(stream=stream, **kwargs)

    seed = int(np.random.SeedSequence().entropy % (1 << 63))
    host = np.random.default_rng(seed).standard_normal((33, 256)).astype(np.float32)
    x = torch.from_numpy(host).cuda().as_subclass(Spy)
    out = torch.full_like(x, float("nan"))
    # No stream=: the op runs on torch's current stream, so its torch inputs and outputs are
    # exported with stream=-1 (DLPack's "no synchronisation"), with none of torch's stream
    # comparison.
    assert rudnn.rms_norm(x, out=out) is out
    assert asked == [-1, -1], f"seed {seed}"
    np.testing.assert_allclose(out.cpu().numpy(), ref_rms_norm(host), rtol=2e-5, atol=2e-5,
                               err_msg=f"seed {seed}")
    # An explicit stream (even torch's current one) takes the general path: the stream handle
    # (DLPack's 1 for the legacy default stream, whose handle is 0).
    del asked[:]
    current = torch.cuda.current_stream()
    y = rudnn.rms_norm(x, stream=current)
    assert asked == [current.cuda_stream or 1], f"seed {seed}"
    np.testing.assert_allclose(y.cpu().numpy(), ref_rms_norm(host), rtol=2e-5, atol=2e-5,
                               err_msg=f"seed {seed}")
    # On a side stream as torch's current one: the work there, ordered after x's producer.
    side = torch.cuda.Stream()
    side.wait_stream(current)
    del asked[:]
    with torch.cuda.stream(side):
        z = rudnn.rms_norm(x * 2)
        zz = z * 1  # torch work after the op, on the same stream
    assert asked == [-1], f"seed {seed}"
    side.synchronize()
    np.testing.assert_allclose(zz.cpu().numpy(), ref_rms_norm(2 * host), rtol=2e-5, atol=2e-5,
                               err_msg=f"seed {seed}")
