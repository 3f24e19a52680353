"""MP4 of an episode: both cameras side by side, the predicted chunk drawn as a path, the outcome in the corner.

``eval --video DIR`` and ``demo --video DIR`` write one file per recorded episode. OpenCV's MPEG-4 encoder
(already a dependency, ``opencv-python-headless``) plays in VLC, Foxglove and most browsers' download viewers.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np

from diffpolicy_ros.contract import CAMERAS

SCALE = 2  # 128 px cameras are drawn at 256 px so the text and the path are readable
EXECUTED = (40, 220, 40)  # RGB: the part of the chunk that runs before the next inference
PLANNED = (230, 230, 230)  # the rest of the prediction


def project(points: np.ndarray, cam_pos: np.ndarray, cam_mat: np.ndarray, fovy_deg: float, size: int) -> np.ndarray:
    """World points [N, 3] -> pixel (u, v) [N, 2] of a MuJoCo camera (looks along -z, y up); NaN behind it."""
    local = (np.asarray(points, float) - cam_pos) @ cam_mat  # rows of cam_mat.T @ (p - pos)
    depth = -local[:, 2]
    f = 0.5 * size / np.tan(np.deg2rad(fovy_deg) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = 0.5 * size + f * local[:, 0] / depth
        v = 0.5 * size - f * local[:, 1] / depth
    uv = np.stack([u, v], axis=1)
    uv[depth <= 1e-6] = np.nan
    return uv


class EpisodeVideo:
    """Frames of one episode of a push-family env; ``write`` encodes them."""

    def __init__(self, env, path: str | Path, title: str = ""):
        self.env, self.path, self.title = env, Path(path), title
        self.frames: list[np.ndarray] = []
        self.path_world: np.ndarray | None = None  # the current prediction, in world coordinates
        self.executed = 0
        self.ep_return = 0.0

    def predicted(self, chunk: np.ndarray, executed: int) -> None:
        """A new chunk from the tool's current position: drawn until the next one."""
        dt = self.env.cfg.control_dt
        start = self.env.pusher_position
        self.path_world = np.vstack([start, start + np.cumsum(np.asarray(chunk, float) * dt, axis=0)])
        self.executed = executed

    def add(self, reward: float = 0.0) -> None:
        self.ep_return += reward
        views = [self._camera(cam) for cam in CAMERAS]
        frame = np.concatenate(views, axis=1)
        self._text(frame, f"{self.title}  t={self.env.time:.1f}s  return {self.ep_return:.2f}", (6, 16))
        self.frames.append(frame)

    def _camera(self, cam: str) -> np.ndarray:
        env = self.env
        image = env.render_camera(cam)
        size = image.shape[0]
        big = cv2.resize(image, (size * SCALE, size * SCALE), interpolation=cv2.INTER_NEAREST)
        if self.path_world is not None:
            cam_id = env.model.camera(cam).id
            uv = project(
                self.path_world,
                env.data.cam_xpos[cam_id],
                env.data.cam_xmat[cam_id].reshape(3, 3),
                float(env.model.cam_fovy[cam_id]),
                size,
            )
            pts = uv * SCALE
            for k in range(len(pts) - 1):
                a, b = pts[k], pts[k + 1]
                if np.all(np.isfinite(a)) and np.all(np.isfinite(b)):
                    color = EXECUTED if k < self.executed else PLANNED
                    cv2.line(big, tuple(int(x) for x in a), tuple(int(x) for x in b), color, 2, cv2.LINE_AA)
        self._text(big, cam, (6, big.shape[0] - 8))
        return big

    @staticmethod
    def _text(image: np.ndarray, text: str, origin: tuple[int, int]) -> None:
        """White text on a dark box (an outline drawn thicker would drift: Hershey glyph advance grows with it)."""
        (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
        x, y = origin
        cv2.rectangle(image, (x - 3, y - h - 3), (x + w + 3, y + base + 1), (20, 20, 20), cv2.FILLED)
        cv2.putText(image, text, origin, cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)

    def write(self, success: bool, fps: float | None = None) -> dict:
        """Encode the frames (the last one held 1 s with the outcome); returns path, frames, bytes, seconds."""
        if not self.frames:
            raise ValueError("no frames recorded")
        start = time.perf_counter()
        fps = fps or 1.0 / self.env.cfg.control_dt
        last = self.frames[-1].copy()
        verdict = "SUCCESS" if success else "FAILURE"
        self._text(last, f"{verdict}  return {self.ep_return:.2f}", (6, 36))
        frames = [*self.frames[:-1], *[last] * max(1, int(fps))]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        h, w = last.shape[:2]
        writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
        if not writer.isOpened():
            raise OSError(f"cannot write {self.path} (OpenCV has no MPEG-4 encoder here)")
        for frame in frames:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        writer.release()
        return {
            "path": str(self.path),
            "frames": len(frames),
            "bytes": self.path.stat().st_size,
            "write_s": round(time.perf_counter() - start, 3),
        }

    def snapshot(self, path: str | Path, index: int = -1) -> Path:
        """One frame as a PNG (for docs)."""
        path = Path(path)
        cv2.imwrite(str(path), cv2.cvtColor(self.frames[index], cv2.COLOR_RGB2BGR))
        return path
