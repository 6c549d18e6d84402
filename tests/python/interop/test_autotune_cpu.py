"""CPU tests of the autotune record through the rudnn package: the file read back as entries,
later lines winning, clear keeping the file, malformed and unusable files refused with the
line or path, RUDNN_AUTOTUNE_FILE attached at first use (in a fresh interpreter), and the
"autotune" strategies on the CPU running the reference without measuring. The measuring
itself needs a GPU (tests/cpp/attention/test_gpu.cpp, tests/cpp/conv/test_gpu.cpp).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from support import F32, randn

import rudnn


@pytest.fixture
def record(tmp_path):
    """A clean record, detached and cleared again after the test; yields a file path."""
    rudnn.autotune_set_file("")
    rudnn.autotune_clear()
    yield str(tmp_path / "autotune.tsv")
    rudnn.autotune_set_file("")
    rudnn.autotune_clear()


def test_autotune_is_built():
    assert rudnn.autotune_built() is True


def test_a_file_is_read_back_and_stays_attached(record):
    with open(record, "w") as f:
        f.write("attention | gpu | a\tFlash\tFlash=1 Composed=2\nconv_forward | gpu | b\tDirect\n")
        f.write("attention | gpu | a\tComposed\n")
    rudnn.autotune_set_file(record)
    assert rudnn.autotune_file() == record
    assert rudnn.autotune_entries() == [
        {"key": "attention | gpu | a", "choice": "Composed", "timings_ms": {}, "measurements": 0},
        {"key": "conv_forward | gpu | b", "choice": "Direct", "timings_ms": {}, "measurements": 0},
    ]
    rudnn.autotune_clear()
    assert rudnn.autotune_entries() == []
    assert rudnn.autotune_file() == record
    rudnn.autotune_set_file("")
    assert rudnn.autotune_file() == ""


def test_a_missing_file_is_created(record):
    assert not os.path.exists(record)
    rudnn.autotune_set_file(record)
    assert os.path.exists(record) and os.path.getsize(record) == 0


@pytest.mark.parametrize("text, line", [("ok\tA\nno tab\n", 2), ("\tA\n", 1), ("k\t\n", 1)])
def test_malformed_files_are_refused_whole(record, text, line):
    with open(record, "w") as f:
        f.write(text)
    with pytest.raises(rudnn.InvalidArgument, match=rf"^autotune_set_file: .*: line {line} is not"):
        rudnn.autotune_set_file(record)
    assert rudnn.autotune_entries() == []
    assert rudnn.autotune_file() == ""


def test_an_unusable_path_is_refused(record):
    bad = os.path.join(record, "no", "such", "dir")
    with pytest.raises(ValueError, match=r"^autotune_set_file: cannot open .* for appending"):
        rudnn.autotune_set_file(bad)


def test_the_environment_names_the_file(record):
    with open(record, "w") as f:
        f.write("k\tFlashScalar\n")
    env = dict(os.environ, RUDNN_AUTOTUNE_FILE=record)
    code = "import rudnn; print(rudnn.autotune_file()); print(rudnn.autotune_entries()[0]['choice'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [record, "FlashScalar"]
    # A malformed file named by the environment is reported by the first use, once.
    with open(record, "w") as f:
        f.write("broken\n")
    code = (
        "import rudnn\n"
        "try:\n    rudnn.autotune_entries()\nexcept rudnn.InvalidArgument as e:\n    print('refused', e)\n"
        "print(repr(rudnn.autotune_file()))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"refused RUDNN_AUTOTUNE_FILE: {record}: line 1 is not"), out.stdout
    assert lines[1] == "''"


def test_autotune_on_the_cpu_runs_the_reference_unmeasured(record, rng):
    q, k, v = (randn(rng, (1, 2, n, 8), F32) for n in (12, 16, 16))
    np.testing.assert_array_equal(
        rudnn.attention(q, k, v, is_causal=True, strategy="autotune"), rudnn.attention(q, k, v, is_causal=True)
    )
    x, w = randn(rng, (1, 3, 7, 7), F32), randn(rng, (4, 3, 3, 3), F32)
    np.testing.assert_array_equal(
        rudnn.conv_forward(x, w, padding=1, strategy="autotune"), rudnn.conv_forward(x, w, padding=1)
    )
    plan = rudnn.plan_conv("forward", x.shape, w.shape, "float32", device="cpu", strategy="autotune")
    assert plan["kernel"] == "Reference"
    assert rudnn.autotune_entries() == []
