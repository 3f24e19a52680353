"""Regenerate the README's pictures under docs/img/ from a checkpoint and a bag:

    .venv/bin/python scripts/docs_images.py --checkpoint CKPT --bag BAG

- video_frame.png: a frame of `diffpolicy eval --video` (both cameras, the predicted chunk as a path);
- markers_scene.png: the visualization_msgs/MarkerArray a viewer gets from sim_bridge and policy_node for one
  step (drawn with matplotlib: what Foxglove / rviz show in 3-D);
- eval_bag_actions.png: the actions plot of `diffpolicy eval-bag` on the bag.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def marker_points(marker) -> np.ndarray:
    return np.array([[p.x, p.y, p.z] for p in marker.points])


def draw_markers(arrays, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from visualization_msgs.msg import Marker

    fig = plt.figure(figsize=(6, 5))
    ax = fig.add_subplot(projection="3d")
    for array in arrays:
        for m in array.markers:
            rgba = (m.color.r, m.color.g, m.color.b, max(m.color.a, 0.3))
            if m.type in (Marker.LINE_STRIP, Marker.SPHERE_LIST) and m.points:
                p = marker_points(m)
                if m.type == Marker.LINE_STRIP:
                    ax.plot(p[:, 0], p[:, 1], p[:, 2], color=rgba, lw=2 if m.ns == "arm" else 3, label=m.ns)
                else:
                    ax.scatter(p[:, 0], p[:, 1], p[:, 2], color=rgba, s=40)
            elif m.type == Marker.CUBE:
                c, h = m.pose.position, m.scale
                ax.bar3d(c.x - h.x / 2, c.y - h.y / 2, c.z - h.z / 2, h.x, h.y, h.z, color=rgba, label="block")
            elif m.type == Marker.CYLINDER:
                t = np.linspace(0, 2 * np.pi, 40)
                c, r = m.pose.position, m.scale.x / 2
                ax.plot(c.x + r * np.cos(t), c.y + r * np.sin(t), np.full_like(t, c.z), color=rgba, lw=2, label="goal")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper left", fontsize=8)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_zlabel("z (m)")
    ax.set_title("/visualization/markers (world frame)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--bag", type=Path, required=True)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    import cv2
    import torch

    from diffpolicy_ros import contract as C
    from diffpolicy_ros.bags.evaluate import evaluate_bag
    from diffpolicy_ros.eval.rollout import evaluate_policy
    from diffpolicy_ros.messages.conversions import sec_to_stamp
    from diffpolicy_ros.messages.markers import chunk_path_markers
    from diffpolicy_ros.messages.sim_messages import step_messages
    from diffpolicy_ros.models.checkpoint import checkpoint_meta, load_policy
    from diffpolicy_ros.models.obs import obs_to_torch
    from diffpolicy_ros.runs import EVAL_SEED
    from diffpolicy_ros.sim import make_env

    policy, ckpt = load_policy(args.checkpoint)
    meta = checkpoint_meta(ckpt)
    with tempfile.TemporaryDirectory() as tmp:
        result = evaluate_policy(policy, meta.task, 1, obs_mode=meta.obs_mode, video_dir=tmp, video_episodes=1,
                                 progress=False)  # fmt: skip
        capture = cv2.VideoCapture(result["videos"][0]["path"])
        frames = []
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(frame)
        cv2.imwrite(str(OUT / "video_frame.png"), frames[len(frames) // 3])

    env = make_env(meta.task, obs_mode="image")
    obs, _ = env.reset(seed=EVAL_SEED)
    for _ in range(8):
        with torch.inference_mode():
            chunk = policy.predict_chunk(obs_to_torch(obs, "cpu"))[0].numpy()
        for action in chunk[: meta.execute_horizon]:
            obs, *_ = env.step(action.astype(np.float64))
    stamp = sec_to_stamp(env.time)
    scene = dict(step_messages(env, obs, stamp, C.WORLD_FRAME, images=False, task_state=True))[C.MARKERS_TOPIC]
    path = chunk_path_markers(env.pusher_position, chunk, C.CONTROL_PERIOD_S, meta.execute_horizon, stamp,
                              C.WORLD_FRAME)  # fmt: skip
    draw_markers([scene, path], OUT / "markers_scene.png")
    env.close()

    with tempfile.TemporaryDirectory() as tmp:
        evaluate_bag(args.bag, args.checkpoint, samples=4, out_dir=tmp)
        shutil.copy(Path(tmp) / "actions.png", OUT / "eval_bag_actions.png")
    print(f"wrote {sorted(p.name for p in OUT.glob('*.png'))} to {OUT}")


if __name__ == "__main__":
    main()
