"""``rlvr serve``: refusals before the model loads, and a served tiny model answering the stock client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from rlvr.cli import main
from rlvr.serve.app import bind


def test_a_port_in_use_is_refused_before_the_model_loads(capsys):
    taken = bind("127.0.0.1", 0)
    try:
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "/no/such/model", "--port", str(port)])
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"rlvr: error: cannot serve on 127.0.0.1:{port}: the port is in use (choose another port; 0 picks " \
                  "a free one)\n"


def test_a_missing_extra_names_the_pip_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi -> ImportError
    assert main(["serve", "/no/such/model", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'rlvr[serve]'" in err and err.count("\n") == 1


@pytest.mark.slow  # a fresh interpreter importing torch, transformers and the web stack: ~20-40 s here
def test_serve_answers_the_openai_client(tiny_model_dir):
    import openai

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "serve", str(tiny_model_dir), "--port", "0",
                             "--max-new-tokens", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {tiny_model_dir} at http://127.0.0.1:"), (line, proc.stderr.read())
        url = line.split(" at ")[1].split()[0]
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], n=2)
        assert len(r.choices) == 2 and r.usage.completion_tokens <= 10
        assert [m.id for m in client.models.list()] == [str(tiny_model_dir)]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
