"""The generative verifier (GenRM): a causal LM's p(Yes) / (p(Yes) + p(No)) after the verification prompt."""

from __future__ import annotations

import pytest
import torch

from rlvr.rewards.genrm import QUESTION, GenerativeVerifier, check_causal_lm_dir
from rlvr.search.scorers import load_scorer
from rlvr.types import Problem


def test_the_score_is_the_normalised_probability_of_yes(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    v = load_scorer(f"genrm:{tiny_model_dir}")
    assert isinstance(v, GenerativeVerifier) and v.name == f"genrm:{tiny_model_dir}"
    problem = Problem("p", prompt="What is 2 + 3?", answer="5")
    # the reference, by hand: the chat with one user turn, the assistant turn opened; the next-token logits
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    for completion in ("2 + 3 = 5. \\boxed{5}", "\\boxed{6}"):
        text = f"Question: What is 2 + 3?\n\nSolution: {completion}\n\n{QUESTION}"
        ids = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([list(ids)])).logits[0, -1]
        y, n = tok.encode("Yes", add_special_tokens=False)[0], tok.encode("No", add_special_tokens=False)[0]
        want = float(torch.exp(logits[y]) / (torch.exp(logits[y]) + torch.exp(logits[n])))
        assert v.score(problem, completion) == pytest.approx(want, rel=1e-5)
        assert 0.0 < want < 1.0
    # per step: the step question on the solution so far
    text = f"Question: What is 2 + 3?\n\nSolution so far: 2 + 3 = 5.\n\n\\boxed{{5}}\n\nIs the last step correct (Yes/No)?"
    ids = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0, -1]
    y, n = tok.encode("Yes", add_special_tokens=False)[0], tok.encode("No", add_special_tokens=False)[0]
    steps = v.score_steps(problem, ["2 + 3 = 5.", "\\boxed{5}"])
    assert len(steps) == 2
    assert steps[1] == pytest.approx(float(torch.exp(logits[y]) / (torch.exp(logits[y]) + torch.exp(logits[n]))),
                                     rel=1e-5)
    assert steps[1] != pytest.approx(v.score(problem, "2 + 3 = 5.\n\n\\boxed{5}"), rel=1e-6)  # another question


def test_search_ranks_by_it_and_never_beats_the_oracle(tiny_model_dir, tmp_path):
    from rlvr.evaluate.samples import SampleRecord, make_header, open_for_append
    from rlvr.search.run import search_samples

    problems = [Problem(f"t/{i}", prompt=f"question {i}", answer="7") for i in range(3)]
    header = make_header("jsonl", problems, "hand-made", "0" * 16, n=2, temperature=1.0, max_new_tokens=8, seed=0)
    path = tmp_path / "hand.samples.jsonl"
    with open_for_append(path, header) as w:
        for p in problems:
            w.write(SampleRecord(id=p.id, answer=p.answer, prompt=p.prompt,
                                 samples=[{"text": t, "num_tokens": 4, "finish_reason": "stop", "logprob_sum": -1.0}
                                          for t in ("\\boxed{7}", "\\boxed{3}")]))
    rep = search_samples(path, scorer=f"genrm:{tiny_model_dir}", budgets=[1, 2], allocator=False, progress=False)
    assert rep["scorer"].startswith("genrm:") and not rep["scorer_is_oracle"]
    assert [p["accuracy"] for p in rep["curves"]["pass@n (oracle)"]] == pytest.approx([1.0, 1.0])


def test_a_directory_that_is_not_a_causal_lm_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        check_causal_lm_dir(str(tmp_path))
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForSequenceClassification"]}')
    with pytest.raises(ValueError, match="must be a causal LM"):
        load_scorer(f"genrm:{tmp_path}")


def test_as_a_reward_function_it_scores_the_group_and_is_checked_at_load(tiny_model_dir, tmp_path):
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.rewards.pipeline import GroupScores
    from rlvr.rewards.rubric import Rubric
    from rlvr.rewards.settings import RewardFunctionSpec
    from rlvr.types import Sample, Verdict

    r = Rubric.from_specs([RewardFunctionSpec(kind="verifier"),
                           RewardFunctionSpec(kind="genrm", weight=0.5, params={"path": str(tiny_model_dir),
                                                                                "device": "cpu"})])
    problem = Problem("p", prompt="What is 2 + 3?", answer="5")
    texts = ["\\boxed{5}", "\\boxed{6}"]
    samples = [Sample("p", [1], [5], [-1.0], t, "stop", i, verdict=Verdict(float(i == 0), None, ""),
                      env_return=float(i == 0)) for i, t in enumerate(texts)]
    got = r.score(GroupScores.of(problem, samples, max_new_tokens=8))
    v = GenerativeVerifier(str(tiny_model_dir))
    want = [v.score(problem, t) for t in texts]
    assert got.parts["genrm"].tolist() == pytest.approx(want, rel=1e-5)
    assert got.reward.tolist() == pytest.approx([1 + 0.5 * want[0], 0.5 * want[1]], rel=1e-5)
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}",
                                      f"reward.functions=[verifier, {{kind: genrm, params: {{path: {tmp_path}}}}}]"])


def test_the_pairwise_tournament_by_hand(tiny_model_dir):
    """Each pair's preference is the mean of p(A)/(p(A)+p(B)) in both orders (checked against the model's logits),
    win rates are the mean over the other samples, and the win rates of a group sum to G / 2."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.rewards.genrm import PAIRWISE, PairwiseJudge

    judge = PairwiseJudge(str(tiny_model_dir))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    problem = Problem("p", prompt="Write a word.", answer="")

    def first(a, b):
        text = PAIRWISE.format(question="Write a word.", a=a, b=b)
        ids = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        with torch.no_grad():
            z = model(input_ids=torch.tensor([list(ids)])).logits[0, -1]
        ya, yb = tok.encode("A", add_special_tokens=False)[0], tok.encode("B", add_special_tokens=False)[0]
        return float(torch.exp(z[ya]) / (torch.exp(z[ya]) + torch.exp(z[yb])))

    texts = ["cat", "dog", "a longer answer"]
    pref = {(i, j): 0.5 * (first(texts[i], texts[j]) + 1 - first(texts[j], texts[i]))
            for i in range(3) for j in range(3) if i < j}
    want = [(pref[0, 1] + pref[0, 2]) / 2, (1 - pref[0, 1] + pref[1, 2]) / 2, (2 - pref[0, 2] - pref[1, 2]) / 2]
    got = judge.win_rates(problem, texts)
    assert got == pytest.approx(want, rel=1e-5)
    assert sum(got) == pytest.approx(1.5)
    assert judge.prefer(problem, "x", "x") == pytest.approx(0.5)  # a response against itself: no position edge
    assert judge.win_rates(problem, ["alone"]) == [0.5]


def test_beam_search_prunes_by_its_step_scores(tiny_model_dir):
    """Live beam search with the generative verifier as the process scorer: the kept beam's step scores are the
    verifier's own step scores of its steps."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.engines.hf import HFEngine
    from rlvr.search.beam import BeamConfig, beam_search

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = HFEngine(AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), tok, batch_size=8)
    v = load_scorer(f"genrm:{tiny_model_dir}")
    problem = Problem("p", prompt="What is 2 + 3?", answer="5")
    res = beam_search(engine, v, problem, BeamConfig(beam_width=2, expansions=2, max_steps=2, step_max_tokens=4,
                                                     delimiter=" "))
    assert res.candidates >= 4 and len(res.step_scores) == res.num_steps >= 1
    assert all(0.0 < s < 1.0 for s in res.step_scores)
