"""``rlvr serve MODEL``: an OpenAI-compatible chat-completions endpoint in front of a model, for manual use."""

from __future__ import annotations

from rlvr.cli._common import add_common, error


def run(ns) -> int:
    import time

    from rlvr.serve.app import ServeError, bind, check_installed

    try:  # the user's mistakes (no extra, a port in use) are told before the model loads
        check_installed()
        sock = bind(ns.host, ns.port)
    except ServeError as e:
        error(e)
        return 2
    from rlvr.engines import SamplingParams
    from rlvr.engines.hf import HFEngine
    from rlvr.models.loader import load_policy
    from rlvr.serve import Backend, ServeOptions
    from rlvr.serve.app import Server

    model, tokenizer = load_policy(ns.model, dtype=ns.dtype, device=ns.device)
    engine = HFEngine(model, tokenizer, batch_size=ns.max_batch)
    params = SamplingParams(max_new_tokens=ns.max_new_tokens, temperature=ns.temperature)
    options = ServeOptions(host=ns.host, port=sock.getsockname()[1], batch_window_s=ns.batch_window,
                           max_batch=ns.max_batch, max_request_bytes=ns.max_request_bytes,
                           model_name=ns.model_name or ns.model)
    server = Server(Backend(engine, tokenizer, params, options, episodes_only=False)).start(sock=sock)
    print(f"serving {ns.model} at {server.url}/v1 (OpenAI-compatible chat completions; Ctrl-C stops)", flush=True)
    try:
        while server._thread.is_alive():
            time.sleep(0.5)
    finally:
        server.stop("the server was stopped")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible chat-completions endpoint",
                       description="Serve MODEL (a bundled name, an HF directory or an rlvr checkpoint) at "
                                   "http://HOST:PORT/v1: POST /v1/chat/completions (messages, tools, temperature, "
                                   "top_p, max_tokens, stop, n, seed, logprobs), GET /v1/models, GET /health. "
                                   "Needs the serve extra (pip install 'rlvr[serve]'). Training with agents "
                                   "(env.name=agent) starts its own endpoint; this one is for trying a model by "
                                   "hand or with an agent before training.")
    p.add_argument("model", help="a bundled model name, an HF model directory or an rlvr checkpoint directory")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port (0: a free one; default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=512,
                   help="tokens per completion unless a request's max_tokens says otherwise (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="temperature of requests that give none (default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    p.add_argument("--batch-window", type=float, default=0.005,
                   help="seconds a request waits at most for others to share its generate call (default: %(default)s; "
                        "no episodes here, so no lockstep: keep it short for one user)")
    p.add_argument("--max-batch", type=int, default=64, help="requests per generate call at most")
    p.add_argument("--max-request-bytes", type=int, default=1 << 20, help="largest request body (larger: 413)")
    p.add_argument("--model-name", default=None, help="the model id /v1/models lists (default: MODEL)")
    add_common(p)
    p.set_defaults(func=run)
