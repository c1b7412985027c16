"""An agent on the stock ``openai`` client: answer, then check the answer once (the example of docs/agents.md).

It knows nothing of rlvr but the base URL it is given; rlvr's endpoint serves the policy under training
and records every token it serves. The returned ``None`` lets ``reward.verifier`` score the last answer.

    PYTHONPATH=docs/examples rlvr train configs/arithmetic_grpo.yaml env.name=agent \
        'env.params={entry: "openai_agent:solve"}'
"""

import openai

SYSTEM_PROMPT = "Answer in \\boxed{}."
CHECK = "Check your answer and give it again."


def solve(base_url, problem):
    client = openai.OpenAI(base_url=base_url, api_key="rlvr")
    messages = problem.to_messages(system_prompt=SYSTEM_PROMPT)
    reply = client.chat.completions.create(model="policy", messages=messages)
    messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": CHECK}]
    client.chat.completions.create(model="policy", messages=messages)
    return None
