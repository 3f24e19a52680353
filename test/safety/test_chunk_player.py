"""The executor's point selection and its cross-fade at a chunk switch (shared by the node and eval --deploy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffpolicy_ros.safety.chunk_player import ChunkPlayer

speeds = st.floats(-0.25, 0.25, allow_nan=False)


@pytest.mark.quick
@settings(max_examples=60, deadline=None)
@given(old=st.tuples(speeds, speeds, speeds), new=st.tuples(speeds, speeds, speeds),
       blend=st.just(0.0) | st.floats(0.01, 0.5),
       switch=st.floats(0.01, 0.5), later=st.floats(0.0, 0.6))  # fmt: skip
def test_a_switch_fades_from_the_old_plan_to_the_new_one_and_never_outside_them(old, new, blend, switch, later):
    player = ChunkPlayer(dt=0.1, blend_s=blend)
    player.offer(np.tile(old, (16, 1)), stamp=0.0, now=0.0)
    player.offer(np.tile(new, (16, 1)), stamp=switch, now=switch + 0.05)
    now = switch + 0.05 + later
    v, _ = player.command(now)
    lo, hi = np.minimum(old, new) - 1e-9, np.maximum(old, new) + 1e-9
    assert np.all(v >= lo) and np.all(v <= hi)  # a convex mix of the two plans: nothing new is invented
    if later >= blend:  # the fade is over (or there was none): the new chunk alone
        np.testing.assert_allclose(v, new, atol=1e-12)


@pytest.mark.quick
def test_without_a_blend_the_new_chunk_plays_at_once_and_past_its_end_the_arm_stops():
    player = ChunkPlayer(dt=0.1)
    player.offer(np.tile([0.1, 0.0, 0.0], (16, 1)), stamp=0.0, now=0.0)
    player.offer(np.tile([0.0, 0.1, 0.0], (16, 1)), stamp=0.1, now=0.15)
    np.testing.assert_allclose(player.command(0.15)[0], [0.0, 0.1, 0.0])
    assert player.command(0.1 + 1.6)[1] is None and not np.any(player.command(1.8)[0])
