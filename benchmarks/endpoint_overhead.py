"""Multi-turn episodes through the OpenAI-compatible endpoint vs the same episodes in process.

Workload: ``--problems`` x ``--n`` episodes of ``--turns`` turns each; after every policy turn the user
says "Are you sure? Answer again." (a fixed follow-up).  In process it is an environment stepped by
:func:`rlvr.rollout.episodes.run_episodes` (token-id prefixes, the HF engine's prefix cache); through the
endpoint it is an agent per episode on the stock ``openai`` client making the same ``--turns`` requests,
each extending the one before (:func:`rlvr.serve.agents.run_agent_episodes`: HTTP, JSON, batching within
``--batch-window`` seconds, recording).  Both arms sample the same distribution with the same engine; each
arm's generated tokens per second is the policy tokens of its episodes over its wall time (best of
``--repeats``, arms alternating, after one untimed run of each: imports and the endpoint's start are left
out).  Prints both rates and their ratio (in-process / endpoint; the target is <= 1.3).  The agents' own
costs (an ``openai`` client per episode, JSON) count against the endpoint, as they would in training.

    python benchmarks/endpoint_overhead.py [--model smollm2-135m-instruct] [--problems 8] [--n 4] [--turns 3]
    python benchmarks/endpoint_overhead.py --smoke     # the tiny random model, a few tokens: checks it runs
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

FOLLOW_UP = "Are you sure? Answer again."


def follow_up_agent(turns: int):
    def agent(base_url, problem):
        import openai

        client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
        messages = problem.to_messages()
        for t in range(turns):
            reply = client.chat.completions.create(model="policy", messages=messages)
            messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user",
                                                                                  "content": FOLLOW_UP}]
        return 0.0

    return agent


def follow_up_env(turns: int):
    from rlvr.envs import Environment, Limits, Reply
    from rlvr.types import Verdict

    class FollowUps(Environment):
        limits = Limits(max_turns=turns)

        def step(self, state, text):
            if state.turn + 1 >= turns:
                return Reply(done=True, reward=0.0, verdict=Verdict(0.0))
            return Reply(observation=FOLLOW_UP, role="user")

    return FollowUps()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--n", type=int, default=4, help="episodes per problem")
    ap.add_argument("--turns", type=int, default=3, help="requests (policy turns) per episode")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="per turn")
    ap.add_argument("--batch-window", type=float, default=0.05, help="the endpoint's batch_window_s")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--smoke", action="store_true", help="the tiny random model, 2 x 2 episodes of 2 turns")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.envs.agent import AgentEnvironment
    from rlvr.rollout.episodes import run_episodes
    from rlvr.types import Problem

    if args.smoke:
        from rlvr.models.tiny import make_model, make_tokenizer

        tok = make_tokenizer()
        model = make_model(tok)
        args.problems, args.n, args.turns, args.max_new_tokens, args.repeats = 2, 2, 2, 6, 1
    else:
        from rlvr.models import load_policy

        model, tok = load_policy(args.model)
    model.eval()
    engine = HFEngine(model, tok, batch_size=64)
    problems = [Problem(f"p{i}", prompt=f"What is {17 + i} * {23 + 2 * i}?") for i in range(args.problems)]
    params = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0)
    in_process = follow_up_env(args.turns)
    served = AgentEnvironment(lambda c, r: None, agent=follow_up_agent(args.turns), concurrency=args.problems * args.n,
                              max_requests=args.turns, batch_window_s=args.batch_window, agent_timeout_s=600)

    def run(env) -> tuple[float, int, float]:
        server = getattr(env, "_rlvr_server", None)
        if server is not None:
            server.backend.batch_sizes.clear()
        t0 = time.perf_counter()
        groups = run_episodes(engine, env, problems, params)
        dt = time.perf_counter() - t0
        if env is served:
            calls.append(list(served._rlvr_server.backend.batch_sizes))
        samples = [s for g in groups for s in g]
        tokens = sum(sum(s.mask) if s.mask is not None else len(s.completion_ids) for s in samples)
        turns = sum(s.info.get("turns", 1) for s in samples) / len(samples)
        return dt, tokens, turns

    best = {"in_process": None, "endpoint": None}
    calls: list[list[int]] = []  # the endpoint's requests per engine call, run by run
    try:
        run(in_process), run(served)  # warm-up, untimed: imports, the endpoint's start, first-call costs
        for _ in range(args.repeats):
            for arm, env in (("in_process", in_process), ("endpoint", served)):
                dt, tokens, turns = run(env)
                rate = tokens / dt
                if best[arm] is None or rate > best[arm][0]:
                    best[arm] = (rate, tokens, dt, turns)
    finally:
        server = getattr(served, "_rlvr_server", None)
        if server is not None:
            server.stop()
    ratio = best["in_process"][0] / best["endpoint"][0]
    print(f"{platform.processor() or platform.machine()}, {args.threads} threads, "
          f"{'tiny random model' if args.smoke else args.model}; {args.problems} x {args.n} episodes of "
          f"{args.turns} turns, <= {args.max_new_tokens} tokens per turn")
    for arm in ("in_process", "endpoint"):
        rate, tokens, dt, turns = best[arm]
        print(f"  {arm:10s}: {rate:8.1f} tokens/s ({tokens} policy tokens in {dt:.2f} s, {turns:.1f} turns/episode)")
    print(f"  ratio (in-process / endpoint): {ratio:.2f}x (target <= 1.3x)")
    print(f"  the endpoint's requests per engine call, run by run (the first untimed; in process: "
          f"{args.turns} calls of {args.problems * args.n}): {calls}")
    return {"in_process_tps": best["in_process"][0], "endpoint_tps": best["endpoint"][0], "ratio": ratio,
            "endpoint_batch_sizes": calls}


if __name__ == "__main__":
    main()
