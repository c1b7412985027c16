"""Confidence intervals: Wilson score interval and percentile bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr.evaluate.stats import accuracy_summary, bootstrap_ci, intervals_overlap, wilson_interval


def test_wilson_five_of_ten():
    # z = 1.959964, z^2 = 3.841459; denom = 1 + z^2/10 = 1.3841459
    # center = (.5 + z^2/20) / denom = .6920729 / 1.3841459 = .5
    # half = z * sqrt(.025 + z^2/400) / denom = 1.959964 * .1860204 / 1.3841459 = .2634069
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2365931, abs=1e-6)
    assert hi == pytest.approx(0.7634069, abs=1e-6)


def test_wilson_extremes_and_confidence():
    # 0/10: center = half = (z^2/20) / denom = .1920729 / 1.3841459 = .1387664 -> (0, .2775328)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775328, abs=1e-6)
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(1 - 0.2775328, abs=1e-6)
    # 90%: z = 1.644854, z^2 = 2.705544; denom 1.2705544;
    # half = 1.644854 * sqrt(.025 + .0067639) / 1.2705544 = 1.644854 * .1782242 / 1.2705544 = .2307282
    lo, hi = wilson_interval(5, 10, confidence=0.90)
    assert lo == pytest.approx(0.5 - 0.2307282, abs=1e-6)
    assert hi == pytest.approx(0.5 + 0.2307282, abs=1e-6)


def test_wilson_errors():
    with pytest.raises(ValueError):
        wilson_interval(1, 0)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
    with pytest.raises(ValueError):
        wilson_interval(1, 10, confidence=1.0)


def test_accuracy_summary():
    s = accuracy_summary([True, False] * 5)
    assert s["n"] == 10 and s["accuracy"] == 0.5 and s["method"] == "wilson"
    assert s["ci_low"] == pytest.approx(0.2365931, abs=1e-6)
    assert s["ci_high"] == pytest.approx(0.7634069, abs=1e-6)
    assert accuracy_summary([1.0, 1.0, 0.0, 1.0])["accuracy"] == 0.75
    with pytest.raises(ValueError):
        accuracy_summary([])
    with pytest.raises(ValueError):
        accuracy_summary([2.0])


def test_bootstrap_contains_mean_and_is_reproducible():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    lo, hi = bootstrap_ci(values)
    assert 1.0 <= lo < 3.0 < hi <= 5.0
    assert bootstrap_ci(values) == (lo, hi)
    assert bootstrap_ci(np.array(values), seed=0) == (lo, hi)
    # with many distinct values the resampled means are (practically) continuous, so the seed shows
    many = [0.37 * i ** 1.5 for i in range(30)]
    assert bootstrap_ci(many, seed=1) == bootstrap_ci(many, seed=1) != bootstrap_ci(many, seed=2)
    lo_m, hi_m = bootstrap_ci(many)
    assert lo_m < float(np.mean(many)) < hi_m
    wide = bootstrap_ci(values, confidence=0.99)
    assert wide[0] <= lo and wide[1] >= hi


def test_bootstrap_degenerate_and_custom_stats():
    assert bootstrap_ci([0.7] * 20) == pytest.approx((0.7, 0.7))
    assert bootstrap_ci([3.0]) == (3.0, 3.0)
    lo, hi = bootstrap_ci([1, 2, 3, 4, 100], stat=np.median, n_resamples=500)
    assert 1 <= lo <= 3 <= hi <= 100
    # a statistic without an axis argument falls back to a per-resample loop
    lo, hi = bootstrap_ci([0.0, 1.0, 0.0, 1.0], stat=lambda x: float(max(x)), n_resamples=200)
    assert 0.0 <= lo <= hi == 1.0
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_intervals_overlap():
    assert intervals_overlap((0.0, 1.0), (0.5, 2.0))
    assert intervals_overlap((0.5, 2.0), (0.0, 1.0))
    assert intervals_overlap((0.0, 1.0), (1.0, 2.0))  # touching
    assert intervals_overlap((0.0, 3.0), (1.0, 2.0))  # nested
    assert not intervals_overlap((0.0, 1.0), (1.1, 2.0))
    assert not intervals_overlap((1.1, 2.0), (0.0, 1.0))
    with pytest.raises(ValueError):
        intervals_overlap((1.0, 0.0), (0.0, 1.0))


def test_one_bootstrap_serves_the_interval_and_the_per_metric_means():
    """bootstrap_ci(mean) and metrics.bootstrap_means resample the same problems: equal intervals."""
    import numpy as np

    from rlvr.evaluate.metrics import bootstrap_means
    from rlvr.evaluate.stats import bootstrap_ci, bootstrap_indices

    x = np.random.default_rng(1).random(37)
    lo, hi = bootstrap_ci(x, n_resamples=500, seed=7)
    lo2, hi2 = bootstrap_means(x[:, None], n_resamples=500, seed=7)
    assert np.allclose([lo, hi], [lo2[0], hi2[0]], atol=1e-12)
    whole = next(bootstrap_indices(37, 500, seed=7))
    blocks = np.concatenate(list(bootstrap_indices(37, 500, seed=7, chunk_rows=64)))
    assert (whole == blocks).all()  # block size does not change the resamples
