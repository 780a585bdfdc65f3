"""TransformerLM.train against `ridge train`: both run the one C++ loop (model::train), so the same
seed and configuration give the same losses bit for bit and the same checkpoint byte for byte, from
the start and resumed; a bad argument gets the CLI's message with the Python argument's name in place
of the flag. Also the log callback: what it receives, stopping, and an exception it raises.

The reference is the ridge binary of the same checkout (build/release/ridge, or $RIDGE_CLI): scripts/test
builds it before the Python tests run."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import ridge.model as rm

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_FLAGS = ["--d-model", "32", "--layers", "2", "--heads", "2", "--kv-heads", "1", "--d-ff", "48",
               "--threads", "1"]


def cli(*args):
    binary = os.environ.get("RIDGE_CLI", str(ROOT / "build" / "release" / "ridge"))
    assert os.access(binary, os.X_OK), (f"{binary}: no ridge binary; build it (cmake --build --preset release) "
                                        f"or point RIDGE_CLI at one")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=300)


def config(vocab, context):
    """The model `ridge train --size tiny` builds with MODEL_FLAGS."""
    return dict(rm.preset("tiny", vocab, context), d_model=32, num_layers=2, num_heads=2, num_kv_heads=1, d_ff=48)


@pytest.fixture
def tokens(tmp_path):
    text = "".join(f"{i} little pigs went to market. " for i in range(300)).encode()
    path = tmp_path / "tokens.bin"
    np.frombuffer(text, np.uint8).astype("<u2").tofile(path)
    return path, np.frombuffer(text, np.uint8)


def cli_losses(out):
    return [json.loads(line)["loss"] for line in out.splitlines()]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_train_equals_ridge_train_bit_for_bit(tmp_path, tokens, precision):
    path, ids = tokens
    flags = MODEL_FLAGS + ["--vocab", "256", "--context", "16", "--batch", "3", "--lr", "5e-3", "--lr-min", "1e-3",
                           "--warmup", "2", "--seed", "11", "--precision", precision, "--log-every", "2", "--json"]
    r = cli("train", *flags, "--data", str(path), "--steps", "7", "--checkpoint", str(tmp_path / "cli.safetensors"))
    assert r.returncode == 0, r.stderr
    want = cli_losses(r.stdout)
    assert len(want) == 5  # steps 1, 2, 4, 6, 7

    def model():
        return rm.TransformerLM(config(256, 16), precision=precision, batch=3, seq=16, lr_max=5e-3, lr_min=1e-3,
                                warmup_steps=2, cosine_steps=7, seed=11)

    # The token file and the same tokens as an array train alike.
    for data, name in ((str(path), "file.safetensors"), (ids, "array.safetensors")):
        logs = []
        summary = model().train(data, 7, log_every=2, checkpoint=tmp_path / name, on_log=logs.append)
        assert [m["loss"] for m in logs] == want
        assert [m["step"] for m in logs] == [1, 2, 4, 6, 7]
        assert summary["first_step"] == 0 and summary["steps"] == 7 and not summary["stopped"]
        assert summary["last"]["loss"] == want[-1]
        assert (tmp_path / name).read_bytes() == (tmp_path / "cli.safetensors").read_bytes()

    # Resumed: the CLI's checkpoint at step 7 trained on to 10 by each.
    r = cli("train", *flags, "--data", str(path), "--steps", "10", "--resume", str(tmp_path / "cli.safetensors"),
            "--checkpoint", str(tmp_path / "cli10.safetensors"))
    assert r.returncode == 0, r.stderr
    m = rm.TransformerLM.from_checkpoint(tmp_path / "cli.safetensors", batch=3, seq=16, lr_max=5e-3, lr_min=1e-3,
                                         warmup_steps=2, cosine_steps=10)
    logs = []
    summary = m.train(str(path), 10, log_every=2, checkpoint=tmp_path / "py10.safetensors", on_log=logs.append)
    assert summary["first_step"] == 7 and summary["steps"] == 3
    assert [x["loss"] for x in logs] == cli_losses(r.stdout)
    assert (tmp_path / "py10.safetensors").read_bytes() == (tmp_path / "cli10.safetensors").read_bytes()


def test_the_log_has_the_json_lines_fields_and_true_stops_the_run(tmp_path, tokens):
    _, ids = tokens
    r = cli("train", *MODEL_FLAGS, "--vocab", "256", "--context", "8", "--batch", "2", "--steps", "2", "--json")
    assert r.returncode == 0, r.stderr
    json_fields = set(json.loads(r.stdout.splitlines()[0]))
    m = rm.TransformerLM(config(256, 8), batch=2, seq=8, cosine_steps=50)
    logs = []
    summary = m.train(ids, 50, log_every=1, checkpoint=tmp_path / "ck.safetensors", peak_flops=1e12,
                      on_log=lambda x: logs.append(x) or x["step"] == 3)
    assert set(logs[0]) == json_fields | {"seconds_left"}
    assert summary["stopped"] and summary["steps"] == 3 and [x["step"] for x in logs] == [1, 2, 3]
    assert all(x["mfu"] > 0 for x in logs)
    assert rm.TransformerLM.from_checkpoint(tmp_path / "ck.safetensors")._t.steps() == 3
    # Only True stops: a callback that returns something else (here a count) does not.
    m2 = rm.TransformerLM(config(256, 8), batch=2, seq=8)
    assert m2.train(ids, 3, log_every=1, on_log=lambda x: 1)["steps"] == 3


def test_an_exception_in_the_log_callback_ends_the_run_and_is_raised(tokens):
    _, ids = tokens
    m = rm.TransformerLM(config(256, 8), batch=2, seq=8)

    def interrupt(x):
        if x["step"] == 2:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        m.train(ids, 10, log_every=1, on_log=interrupt)
    assert m._t.steps() == 2


def test_ctrl_c_stops_a_run_that_has_no_callback():
    """SIGINT while the steps run without the GIL: the next logged step takes the GIL, runs Python's
    handler and raises KeyboardInterrupt (the run would otherwise go on for 10**9 steps)."""
    code = """
import os, signal, threading
import ridge.model as rm
cfg = {"vocab_size": 64, "context_length": 8, "d_model": 32, "num_layers": 1, "num_heads": 2, "d_ff": 48}
m = rm.TransformerLM(cfg, batch=2, seq=8)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    m.train(None, 10**9, log_every=1)
except KeyboardInterrupt:
    print("interrupted after", m._t.steps(), "steps")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("interrupted after ") and int(r.stdout.split()[2]) > 0, r.stdout


def test_bad_arguments_get_the_clis_message(tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01" * 7)
    m = rm.TransformerLM(config(256, 8), batch=2, seq=8)
    cases = [
        (["--data", str(odd)], dict(data=str(odd)), "--data", "data"),
        (["--data", str(tmp_path / "absent.bin")], dict(data=str(tmp_path / "absent.bin")), "--data", "data"),
        (["--data", str(tmp_path)], dict(data=tmp_path), "--data", "data"),
        (["--checkpoint", str(tmp_path / "no" / "ck.safetensors")],
         dict(data=None, checkpoint=tmp_path / "no" / "ck.safetensors"), "--checkpoint", "checkpoint"),
    ]
    for flags, kwargs, flag, name in cases:
        r = cli("train", *MODEL_FLAGS, "--vocab", "256", "--context", "8", "--batch", "2", "--steps", "2", *flags)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        want = r.stderr.strip()
        assert want.startswith(f"ridge: {flag}: "), want
        with pytest.raises(ValueError) as e:
            m.train(steps=2, **kwargs)
        assert str(e.value) == f"{name}: " + want[len(f"ridge: {flag}: "):], want
    assert m._t.steps() == 0


def test_bad_arguments_name_the_python_argument(tokens):
    _, ids = tokens
    m = rm.TransformerLM(config(256, 8), batch=2, seq=8)
    for kwargs, error, match in [
        (dict(data=ids, steps=0), ValueError, "steps: 0 is out of range"),
        (dict(data=ids, steps=1.5), TypeError, "steps: expected an integer"),
        (dict(data=ids, steps=2, log_every=0), ValueError, "log_every"),
        (dict(data=ids, steps=2, save_every=1), ValueError, "save_every: needs a checkpoint path"),
        (dict(data=ids, steps=2, peak_flops=float("nan")), ValueError, "peak_flops"),
        (dict(data=ids, steps=2, on_log="print"), TypeError, "on_log: expected a callable"),
        (dict(data=ids[:8], steps=2), ValueError, "data: has 8 tokens; a row of seq 8 needs at least 9"),
        (dict(data=np.array([], np.int64), steps=2), ValueError, "data: has 0 tokens"),
        (dict(data=ids.astype(np.float32), steps=2), TypeError, "data: token ids must be integers"),
        (dict(data=ids.reshape(-1, 2), steps=2), ValueError, "data: expected a 1-D array"),
        (dict(data=np.full(20, 70000), steps=2), ValueError, "data: token 70000 at position 0 is outside 0..65535"),
        (dict(data=np.full(20, 300), steps=2), ValueError, "data: holds the token id 300, beyond the model's"),
        (dict(data=3, steps=2), TypeError, "data: expected a token file path"),
    ]:
        with pytest.raises(error, match=match):
            m.train(**kwargs)
    assert m._t.steps() == 0
    m.train(ids, 2)
    with pytest.raises(ValueError, match="steps: 2 in all, but the trainer has taken 2 already"):
        m.train(ids, 2)
