"""A generative verifier (GenRM): a causal LM asked whether a solution is correct, scored by its probability of
answering "Yes".

Zhang et al. 2024 ("Generative Verifiers: Reward Modeling as Next-Token Prediction", arXiv 2408.15240), direct
GenRM: the verifier reads the question and the candidate solution followed by ``Is the answer correct (Yes/No)?``
and the score is the probability of the token ``Yes``, ``r = p(Yes | x, y, I)``.  Here it is normalised over the
two answers, ``p(Yes) / (p(Yes) + p(No))``, so a model that puts little mass on either still ranks candidates.
Any causal-LM directory (an instruction-tuned model, or one fine-tuned with ``rlvr sft`` on verification
examples) loads the same way; the prompt is rendered with its chat template (the assistant turn opened), or
plainly when it has none.  It is a reference-free scorer: it never reads the reference answer.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlvr.types import problem_text

__all__ = ["GenerativeVerifier", "PairwiseJudge", "QUESTION", "PAIRWISE", "check_causal_lm_dir"]

QUESTION = "Is the answer correct (Yes/No)?"
"""The verification instruction (GenRM's ``I``)."""

STEP_QUESTION = "Is the last step correct (Yes/No)?"
"""The step-verification instruction of :meth:`GenerativeVerifier.score_steps` (the model as a process verifier)."""


def check_causal_lm_dir(path: str) -> None:
    """Refuse (ValueError) a directory that is not a causal LM, reading only its ``config.json``."""
    import json
    from pathlib import Path

    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"{path}: not a model directory (no config.json)")
    archs = json.loads(cfg_file.read_text()).get("architectures") or []
    if archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise ValueError(f"{path}: a generative verifier must be a causal LM; its architectures are {archs}")


class GenerativeVerifier:
    """``score(problem, completion) = p(Yes) / (p(Yes) + p(No))`` of the next token after the verification prompt;
    ``score_steps`` scores each prefix of the steps (the search's process interface)."""

    def __init__(self, path: str, *, device: str = "cpu", max_length: int = 4096, yes: str = "Yes", no: str = "No"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = f"genrm:{path}"
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
        self.device, self.max_length, self._torch = device, max_length, torch
        self.yes_id, self.no_id = self._token(yes), self._token(no)
        if self.yes_id == self.no_id:
            raise ValueError(f"{path}: {yes!r} and {no!r} start with the same token")

    def _token(self, word: str) -> int:
        ids = self.tokenizer.encode(word, add_special_tokens=False)
        if not ids:
            raise ValueError(f"the tokenizer encodes {word!r} to no token")
        return int(ids[0])  # the first token of the answer word decides it

    def prompt_ids(self, question: str, completion: str, *, step: bool = False) -> list[int]:
        """The verification prompt's token ids (the last ``max_length``): the chat of a user turn holding the
        question, the solution and :data:`QUESTION` (``step``: the solution so far and :data:`STEP_QUESTION`), with
        the assistant turn opened."""
        text = (f"Question: {question}\n\nSolution so far: {completion}\n\n{STEP_QUESTION}" if step else
                f"Question: {question}\n\nSolution: {completion}\n\n{QUESTION}")
        return self.user_turn_ids(text)

    def user_turn_ids(self, text: str) -> list[int]:
        """``text`` as one user turn with the assistant turn opened (the chat template; plain text and a newline
        when the tokenizer has none), the last ``max_length`` token ids."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                          add_generation_prompt=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
        else:
            ids = tok(text + "\n", add_special_tokens=True)["input_ids"]
        return list(ids)[-self.max_length:]

    def score_many(self, items: Sequence[tuple[Any, str]], *, step: bool = False) -> list[float]:
        torch = self._torch
        out = []
        with torch.inference_mode():
            for problem, completion in items:
                ids = torch.tensor([self.prompt_ids(problem_text(problem), completion, step=step)],
                                   device=self.device)
                logits = self.model(input_ids=ids).logits[0, -1].float()
                two = torch.stack([logits[self.yes_id], logits[self.no_id]]).softmax(-1)
                out.append(float(two[0]))
        return out

    def score(self, problem: Any, completion: str) -> float:
        return self.score_many([(problem, completion)])[0]

    def score_steps(self, problem: Any, steps: list[str], delimiter: str = "\n\n") -> list[float]:
        """Per step, ``p(Yes)`` normalised after "Is the last step correct (Yes/No)?" given the solution up to it:
        the model as a process verifier (the direct form of LLM-as-PRM: no verification chain of thought, which
        GenPRM and ThinkPRM generate first); ``rlvr search --beam`` prunes by it."""
        return self.score_many([(problem, delimiter.join(steps[: k + 1])) for k in range(len(steps))], step=True)


PAIRWISE = ("Question: {question}\n\nResponse A: {a}\n\nResponse B: {b}\n\n"
            "Which response is better, A or B? Answer with one letter.")
"""The pairwise judge's prompt (Pairwise-RL / Writing-Zero style): the judge's next token decides."""


class PairwiseJudge(GenerativeVerifier):
    """A causal LM as a pairwise judge: ``p(A beats B) = p("A") / (p("A") + p("B"))`` of the next token after
    :data:`PAIRWISE`, averaged over both presentation orders (``(p(A>B | A, B) + 1 - p(B>A | B, A)) / 2``), so
    position bias cancels."""

    def __init__(self, path: str, *, device: str = "cpu", max_length: int = 4096):
        super().__init__(path, device=device, max_length=max_length, yes="A", no="B")
        self.name = f"pairwise:{path}"

    def _first(self, question: str, a: str, b: str) -> float:
        torch = self._torch
        ids = self.user_turn_ids(PAIRWISE.format(question=question, a=a, b=b))
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids], device=self.device)).logits
        last = logits[0, -1].float()
        return float(torch.stack([last[self.yes_id], last[self.no_id]]).softmax(-1)[0])

    def prefer(self, problem: Any, a: str, b: str) -> float:
        """The probability that ``a`` is better than ``b``, both orders averaged."""
        q = problem_text(problem)
        return 0.5 * (self._first(q, a, b) + 1.0 - self._first(q, b, a))

    def win_rates(self, problem: Any, completions: Sequence[str]) -> list[float]:
        """Each completion's mean probability of beating each other one of the group (a round-robin
        tournament; 0.5 for a group of one); ``G (G - 1) / 2`` pairs, each judged in both orders."""
        G = len(completions)
        if G < 2:
            return [0.5] * G
        wins = [0.0] * G
        for i in range(G):
            for j in range(i + 1, G):
                p = self.prefer(problem, completions[i], completions[j])
                wins[i] += p
                wins[j] += 1.0 - p
        return [w / (G - 1) for w in wins]
