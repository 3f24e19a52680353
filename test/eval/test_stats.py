"""The success-rate interval that bench learn and evaluation report."""

import pytest

from diffpolicy_ros.eval.stats import wilson_interval


@pytest.mark.quick
def test_wilson_interval_matches_the_textbook_values():
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson_interval(0, 10)  # no successes: still a non-empty interval inside [0, 1]
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(45, 50)
    assert lo < 0.9 < hi and hi < 1.0
    with pytest.raises(ValueError, match="at least one episode"):
        wilson_interval(0, 0)


@pytest.mark.quick
def test_learning_curve_plot_draws_each_curve_with_its_band(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from diffpolicy_ros.eval.plots import plot_success_vs_steps

    bands, real_fill = [], plt.Axes.fill_between

    def recording_fill(ax, xs, lo, hi, **kwargs):
        bands.append((list(xs), lo, hi))
        return real_fill(ax, xs, lo, hi, **kwargs)

    monkeypatch.setattr(plt.Axes, "fill_between", recording_fill)
    curves = {"a": [(0, 0.5), (100, 0.9)], "b": [(0, 0.7)]}
    out = plot_success_vs_steps(curves, tmp_path / "c.png", "t", episodes=10)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [xs for xs, _, _ in bands] == [[0, 100], [0]]
    assert bands[0][1][0] == pytest.approx(wilson_interval(5, 10)[0])  # 0.5 of 10 episodes
