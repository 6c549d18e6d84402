"""CPU tests of the rudnn package's interop: DLPack and buffer-protocol import and export
(zero-copy, lifetimes, the capsule protocol), out= written in place or refused, the error
hierarchy and its messages, lazy imports. Helpers in tests/python/support.py.
"""

import ctypes
import gc
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from support import F16, F32, Ctx, check, f64, randn, ref_rms_norm, ref_softmax

import rudnn


def test_read_only_inputs(rng):
    # numpy will not export read-only arrays through DLPack; they come in through the buffer
    # protocol (still zero-copy).
    x = randn(rng, (4, 16), F32)
    x.flags.writeable = False
    g = np.broadcast_to(np.float32(2.0), (16,))  # read-only, stride 0
    check(Ctx(rng), "rms_norm read-only", rudnn.rms_norm(x, g), ref_rms_norm(x, g, 1e-6), F32)
    t = rudnn.from_dlpack(x)
    assert t.data_ptr == x.ctypes.data
    assert t.strides == (16, 1)


# ---- Result types, zero-copy and lifetimes ------------------------------------------------------


def test_result_types(rng):
    x = randn(rng, (3, 8), F32)
    y = rudnn.rms_norm(x)
    assert isinstance(y, np.ndarray) and y.flags.writeable and y.flags.c_contiguous
    y *= 2  # numpy results are writable
    t = rudnn.from_dlpack(x)
    r = rudnn.rms_norm(t)
    assert isinstance(r, rudnn.Tensor)
    assert r.shape == (3, 8) and r.strides == (8, 1) and r.dtype == "float32" and r.device == "cpu"
    assert r.ndim == 2 and r.size == 24 and r.itemsize == 4 and len(r) == 3 and r.is_contiguous()
    assert r.__dlpack_device__() == (1, 0)
    assert "f32" in repr(r)
    # Results that are rudnn Tensors feed other ops directly, and export to numpy both ways.
    check(Ctx(rng), "rudnn Tensor input", np.asarray(rudnn.softmax(r)), ref_softmax(np.asarray(r)), F32)
    a1, a2 = np.from_dlpack(r), np.asarray(r)
    assert a1.ctypes.data == a2.ctypes.data == r.data_ptr
    h = rudnn.from_dlpack(randn(rng, (2, 4), F16))
    assert h.dtype == "float16" and np.asarray(h).dtype == F16
    # 0-d result
    z = rudnn.logsumexp(x[0])
    assert isinstance(z, np.ndarray) and z.shape == ()
    # a rudnn Tensor cannot be built from Python
    with pytest.raises(TypeError):
        rudnn.Tensor()


def test_zero_copy_roundtrip(rng):
    for a in [randn(rng, (4, 6), F32), randn(rng, (4, 6), F16)[:, 1::2], np.arange(10, dtype=np.int64)]:
        t = rudnn.from_dlpack(a)
        assert t.data_ptr == a.ctypes.data
        assert t.strides == tuple(s // a.itemsize for s in a.strides)
        back = np.from_dlpack(t)
        assert np.shares_memory(a, back) and np.array_equal(a, back)
        back2 = np.asarray(t)
        assert np.shares_memory(a, back2) and back2.flags.writeable
        back2.flat[0] = 7  # writes through to the original
        assert a.flat[0] == 7


def test_outputs_are_new_memory(rng):
    x = randn(rng, (4, 8), F32)
    y = rudnn.rms_norm(x)
    assert not np.shares_memory(x, y)


def test_lifetimes_no_leak():
    a = np.ones((64, 32), F32)
    base = sys.getrefcount(a)
    t = rudnn.from_dlpack(a)
    assert sys.getrefcount(a) > base  # the imported tensor keeps the array alive
    cap = t.__dlpack__()  # an unconsumed capsule owns a reference to the storage
    del t
    gc.collect()
    assert sys.getrefcount(a) > base
    del cap  # destructor of an unconsumed capsule runs the deleter
    gc.collect()
    assert sys.getrefcount(a) == base

    t = rudnn.from_dlpack(a)
    b = np.from_dlpack(t)  # consumed capsule: numpy owns it now
    c = np.asarray(t)
    del t
    gc.collect()
    assert sys.getrefcount(a) > base
    assert np.shares_memory(a, b) and np.shares_memory(a, c)
    del b, c
    gc.collect()
    assert sys.getrefcount(a) == base

    # The memory of a result outlives the handle it came from.
    y = np.asarray(rudnn.rms_norm(rudnn.from_dlpack(a)))
    gc.collect()
    assert np.allclose(y, 1.0, atol=1e-5)


def capsule_name(cap):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype = ctypes.c_char_p
    get.argtypes = [ctypes.py_object]
    return get(cap).decode()


def test_dlpack_capsule_protocol(rng):
    t = rudnn.from_dlpack(randn(rng, (3, 4), F32))
    cap = t.__dlpack__()
    assert capsule_name(cap) == "dltensor"
    assert capsule_name(t.__dlpack__(stream=None)) == "dltensor"
    # Keyword arguments of newer protocol versions are accepted.
    cap2 = t.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False)
    assert capsule_name(cap2) == "dltensor"
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    c = np.from_dlpack(_Producer(t.__dlpack__(copy=True), (1, 0)))
    assert not np.shares_memory(c, np.asarray(t)) and np.array_equal(c, np.asarray(t))

    # rudnn consumes a capsule by renaming it; a consumed capsule cannot be imported again.
    p = _Producer(t.__dlpack__(), (1, 0))
    u = rudnn.from_dlpack(p)
    assert capsule_name(p.capsule) == "used_dltensor"
    assert u.data_ptr == t.data_ptr
    with pytest.raises(ValueError, match="consumed"):
        rudnn.from_dlpack(p)


class _Producer:
    """A minimal DLPack producer handing out one fixed capsule."""

    def __init__(self, capsule, device):
        self.capsule = capsule
        self.device = device
        self.stream_seen = "unset"

    def __dlpack__(self, stream=None, **kwargs):
        self.stream_seen = stream
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_cpu_producer_gets_stream_none(rng):
    t = rudnn.from_dlpack(randn(rng, (2, 3), F32))
    p = _Producer(t.__dlpack__(), (1, 0))
    rudnn.softmax(p, stream=1234)  # a stream argument does not apply to CPU operands
    assert p.stream_seen is None


def test_negative_stride_inputs_are_copied():
    # ruDNN takes no negative strides: the high-level functions copy such an input first.
    with pytest.raises(rudnn.Unsupported, match="negative"):
        rudnn.from_dlpack(np.zeros(4, F32)[::-1])
    x = np.arange(12, dtype=F32).reshape(3, 4)[::-1, ::-1]
    np.testing.assert_allclose(rudnn.softmax(x), ref_softmax(x), rtol=1e-5)


def test_buffer_protocol_inputs():
    mv = memoryview(np.arange(8, dtype=F32).reshape(2, 4))
    t = rudnn.from_dlpack(mv)
    assert t.shape == (2, 4) and t.dtype == "float32"
    y = rudnn.softmax(mv)
    assert isinstance(y, rudnn.Tensor)
    with pytest.raises(TypeError):
        rudnn.softmax([[1.0, 2.0]])
    with pytest.raises(TypeError):
        rudnn.softmax(object())


# ---- Errors ---------------------------------------------------------------------------------


def test_exception_hierarchy():
    assert issubclass(rudnn.Error, Exception)
    expected = {
        rudnn.InvalidArgument: ValueError,
        rudnn.ShapeMismatch: ValueError,
        rudnn.DeviceMismatch: ValueError,
        rudnn.DTypeMismatch: TypeError,
        rudnn.Unsupported: NotImplementedError,
        rudnn.OutOfMemory: MemoryError,
        rudnn.CudaError: RuntimeError,
    }
    for cls, builtin in expected.items():
        assert issubclass(cls, rudnn.Error) and issubclass(cls, builtin), cls
        assert cls.__module__ == "rudnn"
    assert rudnn.InvalidArgument.code == "InvalidArgument" and rudnn.CudaError.code == "Cuda"

def test_error_mapping(rng):
    x = randn(rng, (4, 8), F32)
    with pytest.raises(TypeError) as e:
        rudnn.rms_norm(x.astype(np.int32))  # a ruDNN dtype the op does not take
    assert isinstance(e.value, rudnn.DTypeMismatch) and "rms_norm" in str(e.value)
    with pytest.raises(ValueError, match="gamma") as e:
        rudnn.rms_norm(x, np.ones(7, F32))
    assert isinstance(e.value, rudnn.ShapeMismatch)
    with pytest.raises(ValueError, match="gamma"):
        rudnn.layer_norm(x, np.ones((2, 4), F32))
    with pytest.raises(TypeError, match="gamma"):
        rudnn.rms_norm(x, np.ones(8, np.float64))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.add_rms_norm(x, np.ones((4, 9), F32))
    with pytest.raises(rudnn.DTypeMismatch):
        rudnn.add_rms_norm(x, np.ones((4, 8), F16))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.rms_norm(np.array(1.0, F32))
    with pytest.raises(rudnn.InvalidArgument):
        rudnn.softmax(np.ones((3, 0), F32))
    with pytest.raises(rudnn.DTypeMismatch):
        rudnn.cross_entropy(x, np.zeros(4, F32))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.cross_entropy(x, np.zeros(5, np.int64))
    with pytest.raises(rudnn.DTypeMismatch):
        rudnn.cross_entropy_backward(x, np.zeros(4, np.int64), np.ones(4, F16))
    with pytest.raises(ValueError, match="grad_scale"):
        rudnn.cross_entropy_with_grad(x, np.zeros(4, np.int64), grad_scale=float("inf"))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.softmax_backward(x, np.ones((4, 9), F32))
    with pytest.raises(ValueError):
        rudnn.rms_norm(x, stream=-1)
    with pytest.raises(TypeError):
        rudnn.rms_norm(x, stream="s")


def test_stream_objects_of_every_library(rng):
    # The stream is parsed (and checked) even where the CPU operands ignore it.
    class Protocol:  # the CUDA stream protocol
        def __cuda_stream__(self):
            return (0, 7)

    class TorchLike:
        cuda_stream = 7

    class CupyLike:
        ptr = 7

    class Negative:
        ptr = -3

    class NoHandle:
        ptr = "seven"

    x = randn(rng, (4, 8), F32)
    want = rudnn.rms_norm(x)
    for stream in (Protocol(), TorchLike(), CupyLike(), 7, None):
        np.testing.assert_array_equal(rudnn.rms_norm(x, stream=stream), want)
    with pytest.raises(ValueError, match="rms_norm: stream must be >= 0"):
        rudnn.rms_norm(x, stream=Negative())
    with pytest.raises(TypeError, match="rms_norm: stream must be None"):
        rudnn.rms_norm(x, stream=NoHandle())
    with pytest.raises(TypeError, match="got bool"):
        rudnn.rms_norm(x, stream=True)


def test_error_base_catches_all(rng):
    x = randn(rng, (4, 8), F32)
    bad_calls = [
        lambda: rudnn.rms_norm(x, eps=0),
        lambda: rudnn.rms_norm(x.astype(np.int32)),
        lambda: rudnn.rms_norm(x, np.ones(3, F32)),
        lambda: rudnn.from_dlpack(np.zeros(3, np.int16)),
        lambda: rudnn.cross_entropy(x, np.zeros(4, F32)),
        lambda: rudnn.softmax(np.ones((2, 0), F32)),
    ]
    for call in bad_calls:
        with pytest.raises(rudnn.Error) as e:
            call()
        assert str(e.value)  # carries the C++ message


def test_inputs_unchanged_after_errors(rng):
    x = randn(rng, (4, 8), F32)
    before = x.copy()
    with pytest.raises(rudnn.Error):
        rudnn.rms_norm(x, np.ones(3, F32))
    np.testing.assert_array_equal(x, before)


# ---- Module facts, threads, lazy imports --------------------------------------------------------


def test_module_facts():
    assert rudnn.version() == rudnn.__version__
    assert len(rudnn.version().split(".")) == 3
    assert isinstance(rudnn.built_with_cuda(), bool)
    n = rudnn.cuda_device_count()
    assert isinstance(n, int) and n >= 0



def test_import_is_lazy():
    code = (
        "import sys, rudnn\n"
        "assert 'torch' not in sys.modules, 'rudnn imported torch'\n"
        "assert 'numpy' not in sys.modules, 'rudnn imported numpy'\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_torch_autograd_is_lazy():
    try:
        import torch
    except ImportError:
        with pytest.raises(ImportError):
            rudnn.torch_autograd  # noqa: B018
    else:
        if hasattr(torch.library, "custom_op"):
            assert hasattr(rudnn.torch_autograd, "RMSNormFunction")
        else:  # torch < 2.4: a clear ImportError, the rest of rudnn unaffected
            with pytest.raises(ImportError, match=r"need torch >= 2\.4 .*this is torch "):
                rudnn.torch_autograd  # noqa: B018
    with pytest.raises(AttributeError):
        rudnn.no_such_attribute  # noqa: B018


def test_an_older_torch_leaves_rudnn_importable(tmp_path):
    # A torch without torch.library.custom_op (< 2.4) already imported: `import rudnn` works,
    # rudnn.torch_autograd raises ImportError naming the version (it raised AttributeError
    # from inside torch_library at `import rudnn`). A stand-in torch module plays the old one.
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("from types import SimpleNamespace\n__version__ = '2.3.1'\n"
                                      "library = SimpleNamespace()\nTensor = object\n")
    code = (
        "import torch, rudnn\n"
        "assert not hasattr(torch, 'ops'), 'torch_library ran'\n"
        "try:\n"
        "    rudnn.torch_autograd\n"
        "except ImportError as e:\n"
        "    assert 'torch >= 2.4' in str(e) and '2.3.1' in str(e), str(e)\n"
        "    print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_torch_cpu_tensors(rng):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(randn(rng, (4, 16), F32)).requires_grad_()
    g = torch.ones(16)
    y = rudnn.rms_norm(x, g)
    assert isinstance(y, torch.Tensor) and y.device.type == "cpu" and y.dtype == torch.float32
    check(Ctx(rng), "rms_norm torch cpu", y.numpy(), ref_rms_norm(x.detach().numpy(), g.numpy(), 1e-6), F32)
    t = rudnn.from_dlpack(x.detach())
    assert t.data_ptr == x.data_ptr()




# ---- Defects of issue 9: every refusal a rudnn.Error naming the op and the argument ------------


def test_out_with_negative_strides_is_refused_not_copied(rng):
    x = randn(rng, (2, 8), F32)
    o = np.zeros((2, 8), F32)
    with pytest.raises(rudnn.Unsupported, match=r"^rms_norm: out: .*negative"):
        rudnn.rms_norm(x, out=o[::-1])
    assert not o.any()  # nothing was written to a copy and dropped
    s, n = np.zeros((2, 8), F32), np.zeros((2, 8), F32)
    with pytest.raises(rudnn.Unsupported, match=r"^add_rms_norm: out\[1\] \(normed\): .*negative"):
        rudnn.add_rms_norm(x, x, out=(s, n[:, ::-1]))
    # The reversed view of an input overlaps it: refused, the input unchanged.
    c = randn(rng, (2, 8), F32)
    before = c.copy()
    with pytest.raises(rudnn.Error, match="softmax_last_axis: out"):
        rudnn.softmax(c, out=c[:, ::-1])
    np.testing.assert_array_equal(c, before)


def test_read_only_outputs_are_refused(rng):
    x = randn(rng, (2, 8), F32)
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    with pytest.raises(rudnn.InvalidArgument, match="rms_norm: out is read-only"):
        rudnn.rms_norm(x, out=ro)
    with pytest.raises(rudnn.InvalidArgument, match=r"rms_norm_backward: out\[0\] \(dx\) is read-only"):
        rudnn.rms_norm_backward(x, x, out=(ro, None))
    with pytest.raises(rudnn.InvalidArgument, match="scale_unless_one: x is read-only"):
        rudnn.scale_unless_one(np.float32(2.0), np.ones(1, F32))


class _BadDevice:
    """A producer whose __dlpack_device__ breaks the protocol."""

    def __init__(self, device):
        self.device = device

    def __dlpack__(self, stream=None):
        raise AssertionError("not reached")

    def __dlpack_device__(self):
        if isinstance(self.device, Exception):
            raise self.device
        return self.device


@pytest.mark.parametrize("device", ["cpu", (1,), ("1", 0), RuntimeError("boom")], ids=repr)
def test_foreign_dlpack_device_is_a_rudnn_error(device):
    with pytest.raises(rudnn.InvalidArgument, match=r"rms_norm: x: __dlpack_device__"):
        rudnn.rms_norm(_BadDevice(device))


UNSUPPORTED = [(np.int16, "i16"), (np.int8, "i8"), (np.uint64, "u64"), (np.complex64, "c64")]


@pytest.mark.parametrize("dtype,name", UNSUPPORTED + [(np.bool_, "bool"), (np.int32, "i32")])
def test_every_unsupported_dtype_one_rule(dtype, name):
    # One class and one message shape, whether ruDNN has the dtype (bool, i32: the op refuses
    # it) or not (i16, c64: the import refuses it).
    with pytest.raises(rudnn.DTypeMismatch, match=rf"^rms_norm: x has dtype {name}; expected"):
        rudnn.rms_norm(np.zeros((2, 4), dtype))


@pytest.mark.parametrize("dtype,name", UNSUPPORTED[:3] + [(np.float32, "f32")])
def test_unsupported_target_dtypes(dtype, name):
    with pytest.raises(rudnn.DTypeMismatch, match=rf"^cross_entropy: targets has dtype {name}; expected"):
        rudnn.cross_entropy(np.zeros((2, 4), F32), np.zeros(2, dtype))


def test_from_dlpack_unsupported_dtype():
    with pytest.raises(rudnn.DTypeMismatch, match="from_dlpack: obj has dtype i16"):
        rudnn.from_dlpack(np.zeros(4, np.int16))
    mv = memoryview(np.zeros(4, np.int16))  # through the buffer protocol: the same rule
    with pytest.raises(rudnn.DTypeMismatch, match="from_dlpack: obj has dtype i16"):
        rudnn.from_dlpack(mv)
    with pytest.raises(rudnn.DTypeMismatch, match="from_dlpack: obj must be an array"):
        rudnn.from_dlpack([1.0])


def test_bool_is_not_a_number():
    x = np.ones((2, 4), F32)
    t = np.zeros(2, np.int64)
    with pytest.raises(rudnn.InvalidArgument, match="rms_norm: eps must be a number, got bool"):
        rudnn.rms_norm(x, eps=True)
    with pytest.raises(rudnn.InvalidArgument, match="layer_norm: eps must be a number"):
        rudnn.layer_norm(x, eps=np.bool_(True))
    with pytest.raises(rudnn.InvalidArgument, match="cross_entropy: ignore_index must be an int or None, got bool"):
        rudnn.cross_entropy(x, t, True)
    with pytest.raises(rudnn.InvalidArgument, match="cross_entropy_backward: ignore_index"):
        rudnn.cross_entropy_backward(x, t, np.ones(2, F32), ignore_index=False)
    with pytest.raises(rudnn.InvalidArgument, match="cross_entropy_with_grad: grad_scale must be a number"):
        rudnn.cross_entropy_with_grad(x, t, grad_scale=True)
    # numpy integers and floats are numbers
    rudnn.cross_entropy(x, t, np.int64(-100))
    rudnn.rms_norm(x, eps=np.float32(1e-5))


def test_none_for_a_required_array_names_it():
    x = np.ones((2, 4), F32)
    with pytest.raises(rudnn.InvalidArgument, match="^rms_norm: x is None; expected a tensor$"):
        rudnn.rms_norm(None)
    with pytest.raises(rudnn.InvalidArgument, match="add_rms_norm: residual is None"):
        rudnn.add_rms_norm(x, None)
    with pytest.raises(rudnn.InvalidArgument, match="cross_entropy: targets is None"):
        rudnn.cross_entropy(x, None)
    with pytest.raises(rudnn.InvalidArgument, match="from_dlpack: obj is None"):
        rudnn.from_dlpack(None)


@pytest.mark.parametrize("eps,shown", [(1e-60, "1e-60"), (1e300, "1e+300"), (-1e300, "-1e+300")])
def test_eps_outside_float32_reports_the_value_given(eps, shown):
    with pytest.raises(rudnn.InvalidArgument, match=re.escape(f"rms_norm: eps = {shown} is outside float32's range")):
        rudnn.rms_norm(np.ones((2, 4), F32), eps=eps)
    with pytest.raises(rudnn.InvalidArgument, match=re.escape(f"cross_entropy_with_grad: grad_scale = {shown}")):
        rudnn.cross_entropy_with_grad(np.ones((2, 4), F32), np.zeros(2, np.int64), grad_scale=eps)
