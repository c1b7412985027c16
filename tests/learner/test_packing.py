"""Packed micro-batches (train.micro_batch_tokens): equal to the padded path, unpacked to the [B, T] layout."""

from __future__ import annotations

import functools

import pytest
import torch

from conftest import make_model
from rlvr.learner.batching import (collate, completion_start, pack_rows, pack_rows_shared, packed_logprobs,
                                   policy_logprobs, prompt_keys, token_budget_chunks)
from rlvr.types import Sample


def _samples(seed=0, n=5):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p, c = int(torch.randint(3, 9, (1,), generator=g)), int(torch.randint(1, 8, (1,), generator=g))
        out.append(Sample(f"p{i}", torch.randint(4, 60, (p,), generator=g).tolist(),
                          torch.randint(4, 60, (c,), generator=g).tolist(), [-1.0] * c, "", "stop", 0))
    return out


def test_pack_rows_positions_and_sources():
    ids = torch.tensor([[0, 5, 6, 7, 8], [9, 10, 11, 0, 0]])
    am = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    packed, pos, src, rows, cols = pack_rows(ids, am, start=2)
    assert packed.tolist() == [[5, 6, 7, 8, 9, 10, 11]]
    assert pos.tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    assert rows.tolist() == [0, 0, 0, 1] and cols.tolist() == [2, 3, 4, 2]
    assert src.tolist() == [0, 1, 2, 5]  # the packed position before each target token


def test_token_budget_chunks():
    lengths = torch.tensor([5, 4, 3, 9, 2])
    chunks = token_budget_chunks(torch.arange(5), lengths, budget=8)
    assert [c.tolist() for c in chunks] == [[0], [1, 2], [3], [4]]


def _grouped_samples(seed=0, groups=(3, 1, 2)):
    """GRPO-shaped rows: ``groups[k]`` completions of prompt k (prompts of different lengths)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, n in enumerate(groups):
        prompt = torch.randint(4, 60, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
        for j in range(n):
            c = int(torch.randint(1, 8, (1,), generator=g))
            out.append(Sample(f"p{k}", prompt, torch.randint(4, 60, (c,), generator=g).tolist(), [-1.0] * c, "",
                              "stop", j))
    return out


def test_pack_rows_shared_layout_mask_and_sources():
    # rows 0 and 1 share the prompt [5, 6]; row 2 has its own prompt [9]
    ids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 3, 0], [0, 0, 9, 4, 0]])
    am = torch.tensor([[0, 1, 1, 1, 1], [0, 1, 1, 1, 0], [0, 0, 1, 1, 0]])
    packed, pos, allowed, src, rows, cols = pack_rows_shared(ids, am, start=3)
    assert packed.tolist() == [[5, 6, 7, 8, 3, 9, 4]]  # the shared prompt once, then both completions
    assert pos.tolist() == [[0, 1, 2, 3, 2, 0, 1]]  # each completion continues its prompt's positions
    assert rows.tolist() == [0, 0, 1, 2] and cols.tolist() == [3, 4, 3, 3]
    assert src.tolist() == [1, 2, 1, 5]  # both rows' first tokens are predicted by the shared last prompt token
    expect = torch.tensor([  # token i (row) may attend to token j (column)
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0],  # row 1's completion: the prompt and itself, not row 0's tokens
        [0, 0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(allowed, expect)


def test_token_budget_chunks_count_a_shared_prompt_once():
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 3, 0], [5, 6, 4, 4], [9, 9, 1, 1]])
    am = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
    shared = prompt_keys(ids, am, 2)
    assert shared[1].tolist() == [2, 2, 2, 2] and shared[0][0] == shared[0][2] != shared[0][3]
    # 4 + (3 - 2) + (4 - 2) = 7 tokens fit a budget of 7; the fourth row has a new prompt
    chunks = token_budget_chunks(torch.arange(4), am.sum(1), 7, shared)
    assert [c.tolist() for c in chunks] == [[0, 1, 2], [3]]
    assert [c.tolist() for c in token_budget_chunks(torch.arange(4), am.sum(1), 7)] == [[0, 1], [2], [3]]


@pytest.mark.parametrize("chunk", [0, 3])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("share", [False, True])
def test_packed_equals_padded_values_and_gradients(tiny_tokenizer, chunk, attn, share):
    model = make_model(tiny_tokenizer)
    model.config._attn_implementation = attn
    samples = _grouped_samples() if share else _samples()
    b = collate(samples, torch.ones(len(samples)), tiny_tokenizer.pad_token_id)
    start = int(b.completion_mask.any(0).nonzero()[0])
    mask = b.completion_mask[:, start:]
    res = []
    packed = functools.partial(packed_logprobs, share_prompts=share)
    for fn in (policy_logprobs, packed):
        model.zero_grad(set_to_none=True)
        logp, ent, hidden = fn(model, b.input_ids, b.attention_mask, start, 0.8, with_entropy=True,
                               entropy_grad=True, return_hidden=True, chunk_size=chunk)
        ((logp * mask).sum() - 0.1 * (ent * mask).sum() + (hidden * mask[..., None]).pow(2).sum()).backward()
        res.append((logp * mask, ent * mask, hidden * mask[..., None],
                    {n: p.grad.clone() for n, p in model.named_parameters()}))
    for a, c in zip(res[0][:3], res[1][:3]):
        torch.testing.assert_close(a.detach(), c.detach(), atol=1e-5, rtol=1e-5)
    for n, g in res[0][3].items():
        torch.testing.assert_close(g, res[1][3][n], atol=2e-5 * max(1.0, float(g.abs().max())), rtol=1e-4, msg=n)


def test_packing_without_a_mask_is_refused_on_a_torch_that_would_mix_rows(tiny_tokenizer, monkeypatch):
    """Before torch 2.6, transformers drops the packed-sequence mask (rows then attend across each other:
    measured with torch 2.4, grad_norm off by 2%); the learner refuses instead of computing that."""
    model = make_model(tiny_tokenizer)
    b = collate(_samples(), torch.ones(len(_samples())), tiny_tokenizer.pad_token_id)
    start = int(b.completion_mask.any(0).nonzero()[0])
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(RuntimeError, match=r"needs torch >= 2.6 \(this is 2.5.1\+cpu\)"):
        packed_logprobs(model, b.input_ids, b.attention_mask, start)


def test_update_policy_packed_matches_padded(tiny_tokenizer):
    from rlvr.config import load_config
    from rlvr.learner.update import update_policy
    from rlvr.recipes.config import RunConfig

    samples = _grouped_samples(seed=1, groups=(2, 3, 1))
    b = collate(samples, torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0]), tiny_tokenizer.pad_token_id)
    b.sampler_logprobs[:] = 0
    out = []
    for extra in ([], ["train.micro_batch_tokens=20", "train.logprob_chunk_size=4"],
                  ["train.micro_batch_tokens=20", "train.share_prompts=true"]):
        cfg = load_config(RunConfig, None, ["train.micro_batch_size=2", "train.lr=1e-2", *extra])
        model = make_model(tiny_tokenizer)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)  # AdamW would amplify rounding in ~0 gradients
        m = update_policy(model, opt, b, cfg.learner_settings())
        out.append((m, [p.grad.clone() for p in model.parameters()]))
    for other in out[1:]:
        for k in ("loss", "grad_norm", "logprob_mismatch", "entropy", "learner_tokens"):
            assert out[0][0][k] == pytest.approx(other[0][k], rel=1e-4, abs=1e-6), k
        for p, q in zip(out[0][1], other[1]):  # the accumulated (clipped) gradients
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)


def test_share_prompts_config_and_kernel_checks(tiny_tokenizer):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(Exception, match="micro_batch_tokens"):
        load_config(RunConfig, None, ["train.share_prompts=true"])
    model = make_model(tiny_tokenizer)
    model.config._attn_implementation = "flash_attention_2"
    b = collate(_grouped_samples(), torch.ones(6), tiny_tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="sdpa or eager"):
        packed_logprobs(model, b.input_ids, b.attention_mask, completion_start(b), share_prompts=True)


def test_activation_checkpointing_same_gradients(tiny_tokenizer):
    from rlvr.config import load_config
    from rlvr.learner.update import update_policy
    from rlvr.recipes.config import RunConfig

    b = collate(_samples(seed=2, n=4), torch.tensor([1.0, -1.0, 0.5, -0.5]), tiny_tokenizer.pad_token_id)
    grads = []
    for extra in ([], ["train.activation_checkpointing=true", "train.micro_batch_tokens=16"]):
        cfg = load_config(RunConfig, None, ["train.micro_batch_size=2", *extra])
        model = make_model(tiny_tokenizer)
        update_policy(model, torch.optim.SGD(model.parameters(), lr=0.0), b, cfg.learner_settings())
        grads.append([p.grad.clone() for p in model.parameters()])
    for p, q in zip(*grads):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("chunk", [0, 3])
def test_share_prompts_backward_has_no_atomic_accumulation(tiny_tokenizer, chunk):
    # Under share_prompts a group's last prompt token predicts every row's first completion token, so the
    # gather repeats an index.  ``x[idx]``'s backward is index_put_(accumulate=True), which sums repeats
    # with CPU atomics in thread order: the seeded demo drifted from run to run (first at step 8 of 40;
    # held-out greedy 55.1-65.6% over three runs of one commit).  No backward op may accumulate into a
    # repeated index that way (index_select's backward, index_add_, is deterministic).
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.bad = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.overloadpacket in (torch.ops.aten.index_put_, torch.ops.aten.index_put,
                                       torch.ops.aten._index_put_impl_):
                accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
                idx = [i for i in args[1] if i is not None]
                if accumulate and any(i.numel() != i.unique().numel() for i in idx):
                    self.bad.append(str(func))
            return func(*args, **kwargs)

    model = make_model(tiny_tokenizer)
    samples = _grouped_samples(groups=(4, 1, 3))
    b = collate(samples, torch.ones(len(samples)), tiny_tokenizer.pad_token_id)
    start = int(b.completion_mask.any(0).nonzero()[0])
    logp, ent = packed_logprobs(model, b.input_ids, b.attention_mask, start, 1.0, with_entropy=True,
                                entropy_grad=True, chunk_size=chunk, share_prompts=True)
    _, _, _, src, _, _ = pack_rows_shared(b.input_ids, b.attention_mask, start)
    assert src.numel() > src.unique().numel()  # the case in question: repeated sources
    rec = Recorder()
    with rec:
        ((logp * b.completion_mask[:, start:]).sum() + 0.1 * ent.sum()).backward()
    assert rec.bad == []
    assert all(p.grad is not None for p in model.parameters())
