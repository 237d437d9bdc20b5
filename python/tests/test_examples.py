"""The examples under examples/python run and pass their own checks."""

import os
import pathlib
import subprocess
import sys

import ringkv

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "python"


def run_script(script, *args):
    """Runs a script with this interpreter, importing the ringkv this test imported."""
    env = dict(os.environ)
    package_root = str(pathlib.Path(ringkv.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_decode_loop_matches_recompute():
    result = run_script(EXAMPLES / "decode_loop.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "max |cached - recompute| logit" in result.stdout


def test_decode_loop_f16_caches_match_recompute():
    result = run_script(EXAMPLES / "decode_loop.py", "--dtype", "f16", "--seed", "3")
    assert result.returncode == 0, result.stdout + result.stderr


def test_decode_loop_fails_when_the_cache_is_wrong():
    # A tolerance no float32 loop can meet: the check really compares, and a
    # mismatch is a non-zero exit.
    result = run_script(EXAMPLES / "decode_loop.py", "--tolerance", "1e-12")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL" in result.stderr


def load_decode_loop():
    import importlib.util

    spec = importlib.util.spec_from_file_location("decode_loop", EXAMPLES / "decode_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_decode_loop_catches_a_window_off_by_one(monkeypatch, capsys):
    # The check is sensitive to the sliding window: a reference whose window is
    # one token wider than the rotating cache's fails it.
    decode_loop = load_decode_loop()
    reference = decode_loop.reference_forward
    monkeypatch.setattr(decode_loop, "reference_forward",
                        lambda model, tokens, windows: reference(model, tokens,
                                                                 [None, windows[1] + 1]))
    assert decode_loop.main([]) == 1
    assert "FAIL" in capsys.readouterr().err
