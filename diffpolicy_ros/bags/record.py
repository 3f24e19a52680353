"""Writing bags: expert episodes from the sim (``diffpolicy demo --to-bag``) and live topics
(``diffpolicy record``, ``sim_train record:=OUT``).

A demo bag carries the whole topic contract as a cell would record it — both cameras (+ camera_info),
``/joint_states``, ``/arm/ee_pose``, block and goal poses, ``/task/instruction``, the commanded twist on
``/arm/cmd_twist``, the scene markers, ``/clock`` — plus ``/diffpolicy/episode`` (std_msgs/String, JSON) at
each episode's start and end, so episode boundaries, outcomes and the cell each episode ran in survive the round
trip.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from diffpolicy_ros import contract as C
from diffpolicy_ros.data.bag_io import EPISODE_TOPIC, open_writer, qos_profile
from diffpolicy_ros.sim.cell import CellRanges

EPISODE_GAP_NS = 1_000_000_000  # between episodes: a second of silence, as between takes on a cell


def write_demo_bag(
    out: str | Path,
    task: str = "push",
    episodes: int = 5,
    seed: int = 0,
    storage: str = "mcap",
    metadata_version: int = 9,
    progress: bool = True,
    compressed: bool = False,
    expert_limits: dict | None = None,
    cells: CellRanges | None = None,
) -> dict:
    """Scripted-expert episodes on sim time, as the sim graph would publish them; returns a summary.
    ``compressed``: the cameras as JPEG CompressedImage on ``<topic>/compressed`` (what cells record).
    ``cells``: each episode in a cell sampled from these ranges, written in its start mark (``"cell"``)."""
    from builtin_interfaces.msg import Time
    from rosgraph_msgs.msg import Clock
    from std_msgs.msg import String

    from diffpolicy_ros.messages.conversions import make_twist
    from diffpolicy_ros.messages.sim_messages import step_messages
    from diffpolicy_ros.sim import make_env, make_expert

    start = time.perf_counter()
    env = make_env(task, obs_mode="image", **({"cells": cells} if cells is not None else {}))
    expert = make_expert(task, env, **(expert_limits or {}))
    period_ns = round(env.cfg.control_dt * 1e9)
    t_ns, successes, steps = EPISODE_GAP_NS, [], 0
    last_ns = t_ns
    with open_writer(out, storage, metadata_version) as bag:
        bag.offer_qos(C.INSTRUCTION_TOPIC, qos_profile(reliable=True, transient_local=True, depth=1))
        bag.offer_qos(EPISODE_TOPIC, qos_profile(reliable=True, transient_local=True, depth=1))
        for name in (*map(C.raw_camera_topic, C.CAMERAS), C.JOINT_STATES_TOPIC):
            bag.offer_qos(name, qos_profile(reliable=True, depth=5))

        def stamp() -> Time:
            return Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000)

        def write_step(obs: dict) -> None:
            messages = step_messages(env, obs, stamp(), C.WORLD_FRAME, True, task_state=True, compressed=compressed)
            for topic, msg in messages:
                bag.write(topic, t_ns, msg)
            bag.write(C.CLOCK_TOPIC, t_ns, Clock(clock=stamp()))

        for i in tqdm(range(episodes), desc="demo bag", unit="ep", disable=not progress):
            obs, info = env.reset(seed=seed + i)
            expert.reset(np.random.default_rng([seed, i]))
            mark = {"event": "start", "episode": i, "seed": seed + i, "task": task}
            if "cell" in info:
                mark["cell"] = info["cell"]
            bag.write(EPISODE_TOPIC, t_ns, String(data=json.dumps(mark)))
            bag.write(C.INSTRUCTION_TOPIC, t_ns, String(data=obs["instruction"]))
            write_step(obs)
            ep_return = 0.0
            while True:
                action = expert.act()
                bag.write(C.CMD_TWIST_TOPIC, t_ns, make_twist(action, stamp(), C.WORLD_FRAME))
                obs, reward, terminated, truncated, info = env.step(action)
                ep_return += reward
                steps += 1
                t_ns += period_ns
                write_step(obs)
                if terminated or truncated:
                    break
            end = {**mark, "event": "end", "success": bool(info["is_success"]), "return": ep_return}
            bag.write(EPISODE_TOPIC, t_ns, String(data=json.dumps(end)))
            last_ns = t_ns
            successes.append(bool(info["is_success"]))
            t_ns += EPISODE_GAP_NS
    env.close()
    duration_s = (last_ns - EPISODE_GAP_NS) * 1e-9  # first to last message, as the metadata says
    size_mb = sum(f.stat().st_size for f in Path(out).rglob("*") if f.is_file()) / 1e6
    return {
        "bag": str(out),
        "episodes": episodes,
        "steps": steps,
        "success_rate": float(np.mean(successes)),
        "duration_s": round(duration_s, 2),
        "storage": storage,
        "cameras": "compressed (jpeg)" if compressed else "raw",
        "size_mb": round(size_mb, 2),
        "mb_per_min": round(size_mb / max(duration_s / 60, 1e-9), 1),  # of bag time
        "metadata_version": metadata_version,
        "wall_s": round(time.perf_counter() - start, 2),
    }
