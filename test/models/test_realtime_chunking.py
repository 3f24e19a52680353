"""Real-time chunking: which actions are committed, and every backend's sampler continuing them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.flow import FlowConfig
from diffpolicy_ros.models.fusion import FusionConfig
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.models.native import has_cxx_compiler
from diffpolicy_ros.models.realtime_chunking import RealTimeChunking, next_tick
from diffpolicy_ros.safety.chunk_player import ChunkPlayer
from diffpolicy_ros.sim import make_env

DT = 0.1


@pytest.mark.quick
@settings(max_examples=80, deadline=None)
@given(offset=st.integers(0, 20), frozen_s=st.floats(0.0, 0.5), blend=st.integers(0, 6))
def test_committed_actions_are_the_playing_chunk_at_the_same_times(offset, frozen_s, blend):
    previous = np.random.default_rng(offset).normal(size=(16, 3)).astype(np.float32)
    actions, weights = RealTimeChunking(frozen_s, blend).committed(previous, 1.0, 1.0 + offset * DT, DT)
    frozen = max(1, int(np.ceil(frozen_s / DT - 1e-9)))
    for j in range(16):
        if j + offset < 16:  # step j of the new chunk runs when step j + offset of the old one would
            np.testing.assert_array_equal(actions[j], previous[j + offset])
            assert weights[j] == (1.0 if j < frozen else pytest.approx(max(0.0, 1 - (j - frozen + 1) / (blend + 1))))
        else:  # the old chunk has ended there: nothing to continue
            assert weights[j] == 0.0
    assert np.all(np.diff(weights[: max(0, 16 - offset)]) <= 0)  # never pinned harder later
    assert RealTimeChunking().committed(None, 0.0, 1.0, DT) is None


def _off_grid(x: float) -> bool:
    return abs(x - round(x)) > 1e-6


@pytest.mark.quick
@settings(max_examples=200, deadline=None)
@given(previous_stamp=st.floats(0.0, 100.0), gap=st.floats(0.001, 1.2), switch=st.floats(0.0, 0.25))
def test_the_switch_lands_on_the_action_the_arm_plays_with_stamps_off_the_grid(previous_stamp, gap, switch):
    """Stamps are the observations' (a camera's), off the control-period grid: at the moment the new chunk takes
    over, the executor plays the new chunk's committed action, and it is the one the old chunk was playing."""
    stamp, at = previous_stamp + gap, previous_stamp + gap + switch
    assume(_off_grid((at - previous_stamp) / DT) and _off_grid((at - stamp) / DT))
    previous = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    player = ChunkPlayer(DT)
    player.offer(previous, previous_stamp, previous_stamp)
    playing, k_old = player.command(at)
    actions, weights = RealTimeChunking(frozen_s=switch).committed(previous, previous_stamp, stamp, DT)
    assert player.offer(actions, stamp, at) is None
    switched, k_new = player.command(at)
    assert k_new == int(np.floor(switch / DT))
    if k_old is None:  # the old chunk had ended: the arm was stopping, nothing to continue
        assert weights[k_new] == 0.0
    else:
        np.testing.assert_array_equal(switched, playing)
        assert weights[k_new] == 1.0  # frozen: it runs before the chunk lands


@pytest.mark.quick
@settings(max_examples=200, deadline=None)
@given(
    previous_stamp=st.floats(0.0, 100.0),
    gap=st.floats(0.02, 0.2),
    compute=st.floats(0.001, 0.09),
    phase=st.floats(0.0, 1.0),
    rate_hz=st.sampled_from([10.0, 30.0, 100.0]),
)
def test_the_executor_takes_the_chunk_over_at_its_next_tick_on_the_action_it_was_playing(
    previous_stamp, gap, compute, phase, rate_hz
):
    """The graph's timing: a chunk lands ``compute`` after its observation's stamp, the executor, ticking on its own
    phase, takes it over at its next tick; pairing at that tick (from its earlier ticks) continues the old chunk."""
    period = 1.0 / rate_hz
    stamp = previous_stamp + gap
    lands = stamp + compute
    first = previous_stamp + phase * period
    ticks = [first + i * period for i in range(int((lands - first) / period) + 1) if first + i * period < lands]
    takeover = next_tick(ticks[-5:], lands)
    assert takeover >= lands - 1e-9 and takeover - lands < period + 1e-9
    assume(_off_grid((takeover - previous_stamp) / DT) and _off_grid((takeover - stamp) / DT))
    previous = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    player = ChunkPlayer(DT)
    player.offer(previous, previous_stamp, previous_stamp)
    playing, k_old = player.command(takeover)
    rtc = RealTimeChunking(frozen_s=takeover - stamp, switch_s=takeover - stamp)
    actions, weights = rtc.committed(previous, previous_stamp, stamp, DT)
    assert player.offer(actions, stamp, lands) is None
    switched, k_new = player.command(takeover)
    if k_old is not None:
        np.testing.assert_array_equal(switched, playing)
        assert weights[k_new] == 1.0
    assert next_tick(ticks[-1:], lands) == lands  # one tick gives no period: the landing moment


@pytest.fixture(scope="module")
def state_obs():
    env = make_env("push", obs_mode="state")
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


BACKENDS = ["eager", "traced"] + (["native"] if has_cxx_compiler() else [])


@pytest.mark.quick
@pytest.mark.parametrize("objective", ["ddpm", "flow"], ids=["ddim10", "shortcut_1"])
def test_every_backend_samples_a_chunk_that_continues_the_committed_actions(state_obs, objective):
    """Weight 1: the chunk takes the committed action exactly; weight 0 everywhere: the plain sampler. The eager,
    traced and native samplers agree on the same noise."""
    steps = 10 if objective == "ddpm" else 1
    torch.manual_seed(0)
    policy = DiffusionPolicy(
        DiffusionPolicyConfig(objective=objective, ddim_steps=steps, flow=FlowConfig(shortcut=True),
                              fusion=FusionConfig(use_images=False))  # fmt: skip
    ).eval()
    for param in policy.unet.parameters():
        param.data.add_(0.05 * torch.randn_like(param))
    policy.action_norm.fit(torch.tensor([[-0.25, -0.25, -0.1], [0.25, 0.25, 0.1]]))
    previous = np.random.default_rng(1).uniform(-0.2, 0.2, size=(16, 3)).astype(np.float32) * [1, 1, 0.4]
    committed = RealTimeChunking(frozen_s=0.2, blend_steps=3).committed(previous, 0.0, DT, DT)
    chunks = {}
    for backend in BACKENDS:
        predictor = ChunkPredictor(policy, "cpu", backend=backend)
        chunks[backend] = predictor(state_obs, torch.Generator().manual_seed(2), committed)[0]
        plain = predictor(state_obs, torch.Generator().manual_seed(2))[0]
        none = predictor(state_obs, torch.Generator().manual_seed(2), (previous, np.zeros(16, np.float32)))[0]
        np.testing.assert_allclose(none, plain, atol=1e-6, err_msg=backend)
        np.testing.assert_allclose(chunks[backend][:2], previous[1:3], atol=1e-5, err_msg=backend)  # frozen
        assert not np.allclose(chunks[backend][8:15], previous[9:16], atol=1e-3)  # the rest is the policy's own
    for backend in BACKENDS:
        np.testing.assert_allclose(chunks[backend], chunks["eager"], atol=1e-5, err_msg=backend)
    with pytest.raises(ValueError, match="weights"):
        ChunkPredictor(policy, "cpu", backend="eager")(state_obs, None, (previous, np.full(16, 2.0)))
