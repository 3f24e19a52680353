"""Observation dicts (numpy, from the env or a dataset) -> torch tensors on the model's device.

One host-to-device copy per array per call; images stay uint8 until the encoder (4x less to copy).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

# task_state_estimate: a camera-free stand-in for a staged vision policy's estimator (sim/estimated_state.py);
# camera_projection: each camera's calibration as a world -> pixel projection [cameras, 3, 4] (calibration.py)
TENSOR_KEYS = ("proprio", "goals", "image_top", "image_side", "task_state_estimate", "camera_projection")
SINGLE_NDIM = {
    "proprio": 1, "goals": 2, "image_top": 3, "image_side": 3, "task_state_estimate": 1, "camera_projection": 3,
}  # fmt: skip


def is_camera_input(key: str) -> bool:
    """An observation key that only the cameras' side of a policy reads (images and their calibration)."""
    return key.startswith("image_") or key == "camera_projection"


def obs_to_torch(obs: dict, device: str | torch.device) -> dict:
    """Accepts a single observation or a batch (leading dim); always returns a batch."""
    single = np.ndim(obs["proprio"]) == SINGLE_NDIM["proprio"]
    out: dict = {}
    for key in TENSOR_KEYS:
        if key in obs:
            arr = np.asarray(obs[key])
            if single:
                arr = arr[None]
            arr = np.ascontiguousarray(arr)
            if not arr.flags.writeable:  # views of ROS message buffers: torch may not alias read-only memory
                arr = arr.copy()
            out[key] = torch.from_numpy(arr).to(device, non_blocking=True)
    instr = obs.get("instruction", "")
    out["instruction"] = [instr] if isinstance(instr, str) else list(instr)
    if len(out["instruction"]) != out["proprio"].shape[0]:
        raise ValueError("instruction batch size does not match proprio batch size")
    return out


def index_obs(obs: dict, idx: np.ndarray | Sequence[int]) -> dict:
    """Select rows of a numpy observation batch (instructions as a list)."""
    out = {k: v[idx] for k, v in obs.items() if k != "instruction"}
    instr = obs["instruction"]
    out["instruction"] = [instr[i] for i in np.asarray(idx).tolist()]
    return out
