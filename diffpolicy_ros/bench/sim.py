"""``diffpolicy bench sim``: physics, env, rendering and vectorized throughput of the push task."""

from __future__ import annotations

import os
import time

import mujoco
import numpy as np

from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.vector import make_vec_env


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1)


def _env_rate(obs_mode: str, steps: int, seed: int) -> float:
    env = make_env("push", obs_mode=obs_mode)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    env.step(np.zeros(3))  # create the renderer outside the timed loop
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(rng.uniform(-0.1, 0.1, 3))
        if terminated or truncated:
            env.reset()
    rate = _rate(steps, time.perf_counter() - start)
    env.close()
    return rate


def _vec_rate(obs_mode: str, n_workers: int, steps: int, chunk: int | None, seed: int) -> float:
    venv = make_vec_env("push", n_workers, obs_mode=obs_mode, chunk_horizon=chunk, execute_horizon=chunk or 1)
    rng = np.random.default_rng(seed)
    shape = (n_workers, chunk, 3) if chunk else (n_workers, 3)
    venv.reset(seed=seed)
    venv.step(np.zeros(shape, np.float32))
    calls = max(1, steps // (chunk or 1))
    start = time.perf_counter()
    for _ in range(calls):
        venv.step(rng.uniform(-0.1, 0.1, shape).astype(np.float32))
    rate = _rate(calls * n_workers * (chunk or 1), time.perf_counter() - start)
    venv.close()
    return rate


def bench_sim(steps: int = 400, n_workers: int | None = None, seed: int = 0) -> dict:
    n_workers = n_workers or os.cpu_count() or 1
    env = make_env("push")
    m, d = env.model, mujoco.MjData(env.model)
    start = time.perf_counter()
    mujoco.mj_step(m, d, nstep=20000)
    mj_rate = _rate(20000, time.perf_counter() - start)

    env.reset(seed=seed)
    env.render_camera("top")
    start = time.perf_counter()
    for _ in range(steps):
        env.render_camera("top")
    render_fps = _rate(steps, time.perf_counter() - start)
    env.close()

    return {
        "mj_steps_per_s": mj_rate,
        "physics_timestep_s": m.opt.timestep,
        "env_steps_per_s_state": _env_rate("state", steps, seed),
        "env_steps_per_s_image": _env_rate("image", steps, seed),
        "render_fps_per_camera": render_fps,
        "vec_env_steps_per_s_state": _vec_rate("state", n_workers, steps, None, seed),
        "vec_env_steps_per_s_image": _vec_rate("image", n_workers, steps, None, seed),
        "vec_chunk_env_steps_per_s_image": _vec_rate("image", n_workers, steps, 16, seed),
        "n_workers": n_workers,
        "image_size": 128,
        "cameras": 2,
        "gl_backend": os.environ.get("MUJOCO_GL"),
        "cpu_count": os.cpu_count(),
    }
