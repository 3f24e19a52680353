"""Multimodal fusion (seed 4.2): image maps -> attention-pooled tokens, text tokens, a proprio token and a
learned CLS token go through a 2-layer transformer encoder; the CLS output is the global representation
shared by the actor (as diffusion conditioning) and the critic.

Attention masks are ``bool`` tensors created on the inputs' device (an NPU rejects uint8 masks and masks
on another device).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from diffpolicy_ros.calibration import BLOCK_CENTRE_Z, GOAL_Z
from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.contract import JOINT_STATE_DIM, PROPRIO_DIM, TASK_STATE_SLICE, WORKSPACE_HIGH, WORKSPACE_LOW
from diffpolicy_ros.models.encoders import (
    TEXT_ENCODERS,
    ImageEncoder,
    ImageEncoderConfig,
    KeypointCNN,
    mlp,
    normalized_images,
)
from diffpolicy_ros.models.normalizer import StandardNormalizer

TASK_STATE_ESTIMATORS = ("learned", "calibrated")
ESTIMATED_POINTS = ("block", "goal")  # the calibrated estimator's keypoints, in proprio's task-state order


def project_points(projection: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """World points [B, N, 3] -> pixels [B, N, 2] through projections [B, 3, 4]."""
    homogeneous = points @ projection[:, :, :3].transpose(1, 2) + projection[:, None, :, 3]
    return homogeneous[..., :2] / homogeneous[..., 2:]


def table_point(projection: torch.Tensor, pixels: torch.Tensor, heights: torch.Tensor) -> torch.Tensor:
    """Back-projection: pixels [B, N, 2] through projections [B, 3, 4] onto the planes z = heights [N] -> world
    points [B, N, 3]. Solves [p0 p1 -pixel] (x, y, s) = -(p2 z + p3) by the adjugate (Cramer's rule: batched,
    traceable, the same on every backend)."""
    p = projection[:, None]  # [B, 1, 3, 4]
    ray = torch.cat([pixels, torch.ones_like(pixels[..., :1])], dim=-1)  # [B, N, 3]
    a0, a1, a2 = p[..., 0].expand_as(ray), p[..., 1].expand_as(ray), -ray
    b = -(p[..., 2] * heights.view(1, -1, 1) + p[..., 3])
    det = (a0 * torch.linalg.cross(a1, a2)).sum(-1)
    x = (b * torch.linalg.cross(a1, a2)).sum(-1) / det
    y = (a0 * torch.linalg.cross(b, a2)).sum(-1) / det
    return torch.stack([x, y, heights.view(1, -1).expand_as(x)], dim=-1)


def _image_span(image: torch.Tensor) -> torch.Tensor:
    """(W - 1, H - 1) of images [B, C, H, W]: the pixel span the keypoints' [-1, 1] covers."""
    return torch.tensor([image.shape[-1] - 1, image.shape[-2] - 1], dtype=torch.float32, device=image.device)


def _points_xy(keypoints: torch.Tensor) -> torch.Tensor:
    """A keypoint CNN's [B, 2K] ([x_0..x_K-1, y_0..y_K-1]) as [B, K, 2]."""
    return keypoints.view(keypoints.shape[0], 2, -1).transpose(1, 2)


@dataclass
class FusionConfig:
    dim: int = 128
    heads: int = 4
    layers: int = 2
    # 0: no image tokens: the cameras feed only the task-state estimator (estimate_task_state), so the actor
    # reads a state policy's inputs and trains without pixels (staged BC: rl/estimator.py)
    image_tokens_per_camera: int = 4
    cameras: tuple[str, ...] = ("top", "side")
    use_images: bool = True
    use_text: bool = True
    # "hashed": learned word embeddings (no download); "minilm": frozen pretrained all-MiniLM-L6-v2 sentence
    # embedding + a learned projection (instructions a demo set never contained still land near their meaning)
    text_encoder: str = "hashed"
    proprio_dim: int = PROPRIO_DIM
    extra_state_dim: int = 0  # e.g. 4 for the two-goal task's goals[2, 2]
    # False: only the joint-state slots of proprio reach the model (no privileged block / goal pose): what a
    # real cell can feed; the block and the goal must then be seen in the images
    use_task_state: bool = True
    # with use_task_state false: weight of an auxiliary BC loss that predicts the block and goal xy from the
    # fused representation (privileged labels from the sim or the demonstrations, never an input), so the
    # image encoder is taught where they are instead of finding it through the action loss alone; 0: off
    aux_task_state_weight: float = 0.0
    # with use_task_state false and the auxiliary loss on: a keypoint CNN on each camera (spatial soft-argmax)
    # and the auxiliary head estimate the block and goal xy, and the estimate (detached: trained by the
    # auxiliary loss alone) fills their slots of the state token, so the actor reads a state policy's layout,
    # from the cameras. Why (docs/experiments.md): the actor conditioned on fused image tokens reached 0.22
    # while a head on the same representation placed the block within ~7 mm
    estimate_task_state: bool = False
    task_state_keypoints: int = 16  # soft-argmax keypoints per camera of the "learned" estimator
    # how the estimator maps pixels to the table: "learned" (keypoints of both cameras -> an MLP head: a mapping
    # learnt for the cameras it trained with) or "calibrated" (per camera a block and a goal keypoint, each
    # back-projected through the camera's calibration, obs["camera_projection"], onto the plane at its height:
    # a camera moved or zoomed and calibrated again needs no new policy). Calibrated needs the staged recipe.
    task_state_estimator: str = "learned"
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)

    def obs_mode(self) -> str:
        """The sim observations this encoder reads (so the demos and envs it needs): "image" or "state"."""
        return "image" if self.use_images else "state"

    def cameras_feed_only_estimator(self) -> bool:
        """A staged vision policy: the cameras feed only the task-state estimator, the actor reads its estimate
        (what staged BC and PPO on simulated estimates need)."""
        return self.use_images and self.estimate_task_state and self.image_tokens_per_camera == 0


class AttentionPool2d(nn.Module):
    """Learned queries attend over the positions of a feature map: [B, C, h, w] -> [B, Q, D]."""

    def __init__(self, in_channels: int, dim: int, queries: int, heads: int, max_positions: int = 256):
        super().__init__()
        self.proj = nn.Linear(in_channels, dim)
        self.pos = nn.Parameter(torch.randn(max_positions, dim) * 0.02)
        self.queries = nn.Parameter(torch.randn(queries, dim) * 0.02)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        tokens = self.proj(fmap.flatten(2).transpose(1, 2))  # [B, h*w, D]
        tokens = tokens + self.pos[: tokens.shape[1]]
        q = self.queries.expand(fmap.shape[0], -1, -1)
        return self.attn(q, tokens, tokens, need_weights=False)[0]


class MultimodalEncoder(nn.Module):
    """Observation dict -> global representation [B, dim]."""

    def __init__(self, config: FusionConfig | None = None):
        super().__init__()
        self.config = cfg = config or FusionConfig()
        if not (cfg.use_task_state or cfg.use_images):
            raise ConfigError("fusion: use_task_state false needs use_images: nothing would show the block and goal")
        self.estimates_task_state = cfg.estimate_task_state and not cfg.use_task_state
        if self.estimates_task_state and (cfg.aux_task_state_weight <= 0 or cfg.extra_state_dim):
            raise ConfigError(
                "fusion: estimate_task_state needs aux_task_state_weight > 0 (the loss that trains the estimate) "
                "and a one-goal task (extra_state_dim 0)"
            )
        self.calibrated = self.estimates_task_state and cfg.task_state_estimator == "calibrated"
        if cfg.task_state_estimator not in TASK_STATE_ESTIMATORS:
            raise ConfigError(
                f"fusion.task_state_estimator must be one of {TASK_STATE_ESTIMATORS}, got {cfg.task_state_estimator!r}"
            )
        if cfg.task_state_estimator == "calibrated" and not cfg.cameras_feed_only_estimator():
            raise ConfigError(
                "fusion.task_state_estimator calibrated needs the staged recipe: use_task_state false, "
                "estimate_task_state true, image_tokens_per_camera 0"
            )
        self.image_tokens = cfg.use_images and cfg.image_tokens_per_camera > 0
        if cfg.use_images and not (self.image_tokens or self.estimates_task_state):
            raise ConfigError("fusion: image_tokens_per_camera 0 needs estimate_task_state (nothing would read images)")
        reads_task_state = cfg.use_task_state or self.estimates_task_state
        state_dim = cfg.proprio_dim + cfg.extra_state_dim if reads_task_state else JOINT_STATE_DIM
        self.state_norm = StandardNormalizer(state_dim)
        self.proprio = mlp([state_dim, cfg.dim, cfg.dim])
        self.cls = nn.Parameter(torch.randn(1, 1, cfg.dim) * 0.02)
        self.type_embed = nn.Parameter(torch.zeros(4, cfg.dim))  # cls, image, text, proprio
        if self.image_tokens:
            self.images = ImageEncoder(cfg.cameras, cfg.image)
            self.pools = nn.ModuleList(
                AttentionPool2d(self.images.out_channels, cfg.dim, cfg.image_tokens_per_camera, cfg.heads)
                for _ in cfg.cameras
            )
        if cfg.use_text:
            if cfg.text_encoder not in TEXT_ENCODERS:
                raise ConfigError(f"text_encoder must be one of {sorted(TEXT_ENCODERS)}, got {cfg.text_encoder!r}")
            self.text = TEXT_ENCODERS[cfg.text_encoder](cfg.dim)
        layer = nn.TransformerEncoderLayer(
            cfg.dim, cfg.heads, dim_feedforward=2 * cfg.dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.transformer = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.out_norm = nn.LayerNorm(cfg.dim)
        self.aux_task_state = None  # block xy, goal xy in [-1, 1] over the workspace
        if cfg.aux_task_state_weight > 0 and not cfg.use_task_state:
            head_in = cfg.dim  # the fused representation, or the keypoints of the estimator
            if self.calibrated:
                self.keypoints = KeypointCNN(len(ESTIMATED_POINTS))  # the block's and the goal's pixel, any camera
            elif self.estimates_task_state:
                self.keypoints = KeypointCNN(cfg.task_state_keypoints)  # shared by the cameras
                head_in = 2 * cfg.task_state_keypoints * len(cfg.cameras)
            self.aux_task_state = None if self.calibrated else mlp([head_in, cfg.dim, 4])
        heights = torch.tensor([BLOCK_CENTRE_Z, GOAL_Z], dtype=torch.float32)
        self.register_buffer("point_heights", heights, persistent=False)  # where each estimated point lies
        low, high = (torch.tensor(b[:2], dtype=torch.float32).repeat(2) for b in (WORKSPACE_LOW, WORKSPACE_HIGH))
        self.register_buffer("task_state_low", low, persistent=False)  # constants, not checkpoint entries
        self.register_buffer("task_state_high", high, persistent=False)

    def auxiliary_loss(self, obs: dict, prediction: torch.Tensor | None) -> torch.Tensor:
        """The weighted auxiliary task-state loss of a BC step (0 when off): MSE of the predicted block and goal
        xy (``features``' second output), both scaled to [-1, 1] over the workspace."""
        if prediction is None:
            return obs["proprio"].new_zeros((), dtype=torch.float32)
        target = self.to_workspace_units(obs["proprio"].float()[..., TASK_STATE_SLICE])
        return self.config.aux_task_state_weight * nn.functional.mse_loss(prediction.float(), target)

    def to_workspace_units(self, task_state: torch.Tensor) -> torch.Tensor:
        """Block and goal xy in metres -> [-1, 1] over the workspace: what the estimator's head predicts."""
        return 2 * (task_state - self.task_state_low) / (self.task_state_high - self.task_state_low) - 1

    def to_metres(self, prediction: torch.Tensor) -> torch.Tensor:
        """The inverse of ``to_workspace_units``."""
        return self.task_state_low + (prediction + 1) / 2 * (self.task_state_high - self.task_state_low)

    def state_vector(self, obs: dict) -> torch.Tensor:
        """The state the model reads: proprio (+ the goals of the two-goal task), or the joint state only.
        An encoder that estimates the task state gets proprio here (its normalizer is fitted on the true
        values), and ``features`` replaces the block and goal slots with the estimate."""
        state = obs["proprio"]
        if not (self.config.use_task_state or self.estimates_task_state):
            return state[..., :JOINT_STATE_DIM].float()
        if self.config.extra_state_dim:
            state = torch.cat([state, obs["goals"].flatten(1)], dim=-1)
        return state.float()

    def forward(self, obs: dict) -> torch.Tensor:
        return self.features(obs, predict=False)[0]

    def estimator_modules(self) -> dict[str, nn.Module]:
        """The task-state estimator (keypoint CNN, and the learned estimator's head) by attribute name; empty when
        there is none."""
        if not self.estimates_task_state:
            return {}
        return {"keypoints": self.keypoints} | ({} if self.calibrated else {"aux_task_state": self.aux_task_state})

    def estimator_parameters(self) -> list[nn.Parameter]:
        """The task-state estimator's weights: what staged BC trains first."""
        return [param for module in self.estimator_modules().values() for param in module.parameters()]

    def estimate_task_state(self, images: list[torch.Tensor], projection: torch.Tensor | None = None) -> torch.Tensor:
        """Normalized camera images (and, calibrated, each camera's projection [B, cameras, 3, 4]) -> the block
        and goal xy [B, 4] in metres."""
        if not self.calibrated:
            return self.to_metres(self.aux_task_state(torch.cat([self.keypoints(x) for x in images], dim=-1)))
        if projection is None:
            raise ConfigError("this policy's estimator is calibrated: the observation needs camera_projection")
        # Each camera's point on the table, weighted by the inverse of its variance there: the keypoint's attention
        # spread carried through the back-projection (metres). A camera that loses a point (the arm over the
        # block, a light unlike training's) spreads its attention and is outweighed by the one that sees it;
        # the cameras' plain mean erred 19 mm at p90 on held-out cells, almost all of it one camera's
        # (docs/experiments.md).
        points, precisions = [], []
        for i, image in enumerate(images):
            camera = projection[:, i].float()
            keypoints, spread = self.keypoints.attend(image)
            span = _image_span(image)
            pixels = (_points_xy(keypoints) + 1) / 2 * span  # [B, 2 points, 2] (u, v; pixel centres at integers)
            spread_px = spread[..., None] / 2 * span  # [B, 2 points, 2]: the keypoint's one spread in pixels of u, of v
            point = table_point(camera, pixels, self.point_heights)[..., :2]
            zero = torch.zeros_like(spread_px[..., 0])
            along_u, along_v = torch.stack([spread_px[..., 0], zero], -1), torch.stack([zero, spread_px[..., 1]], -1)
            variance = sum(  # the table's displacement for one spread along u, and for one along v
                ((table_point(camera, pixels + step, self.point_heights)[..., :2] - point) ** 2).sum(-1)
                for step in (along_u, along_v)
            )
            points.append(point)
            precisions.append(1.0 / variance.clamp_min(1e-12))
        weights = torch.stack(precisions)  # [cameras, B, 2 points]
        weights = weights / weights.sum(0)
        return (torch.stack(points) * weights[..., None]).sum(0).flatten(1)  # block xy, goal xy

    def point_keypoints(self, image: torch.Tensor) -> torch.Tensor:
        """The calibrated estimator's block and goal keypoints in one image [B, 2 points, 2] (x, y in [-1, 1])."""
        return _points_xy(self.keypoints(image))

    def estimator_loss(self, images: list[torch.Tensor], truth: torch.Tensor, projection: torch.Tensor | None):
        """Stage one's loss on true block and goal xy [B, 4] (metres). Learned: MSE in workspace units.
        Calibrated: MSE of each keypoint against its true point projected through that camera, in keypoint units
        ([-1, 1] over the image): the pixel the back-projection needs, so nothing about the camera is learnt."""
        if not self.calibrated:
            prediction = self.aux_task_state(torch.cat([self.keypoints(x) for x in images], dim=-1))
            return nn.functional.mse_loss(prediction.float(), self.to_workspace_units(truth))
        points = torch.cat([truth.view(-1, 2, 2), self.point_heights.view(1, 2, 1).expand(truth.shape[0], 2, 1)], -1)
        loss = 0.0
        for i, x in enumerate(images):
            target = 2 * project_points(projection[:, i].float(), points) / _image_span(x) - 1
            loss = loss + nn.functional.mse_loss(self.point_keypoints(x).float(), target)
        return loss / len(images)

    def features(self, obs: dict, predict: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The global representation [B, dim], and the auxiliary block/goal-xy prediction [B, 4] in workspace
        units (None when the auxiliary head is off, or not asked for and not the state token's estimate).

        ``obs["task_state_estimate"]`` (block and goal xy [B, 4] in metres), where given, stands in for the
        estimator's output: staged BC trains the actor on it without touching the images."""
        cfg = self.config
        state = self.state_vector(obs)
        batch, device = state.shape[0], state.device
        tokens = [self.cls.expand(batch, -1, -1) + self.type_embed[0]]
        masks = [torch.zeros(batch, 1, dtype=torch.bool, device=device)]
        given_estimate = obs.get("task_state_estimate") if self.estimates_task_state else None
        if cfg.use_images and (self.image_tokens or given_estimate is None):
            images = normalized_images({cam: obs[f"image_{cam}"] for cam in cfg.cameras}, cfg.cameras)
        if self.image_tokens:
            for pool, fmap in zip(self.pools, self.images.encode(images)):
                tokens.append(pool(fmap) + self.type_embed[1])
                masks.append(torch.zeros(batch, cfg.image_tokens_per_camera, dtype=torch.bool, device=device))
        prediction = None
        if self.estimates_task_state:
            if given_estimate is not None:
                estimate = given_estimate
            else:
                estimate = self.estimate_task_state(images, obs.get("camera_projection"))
                prediction = self.to_workspace_units(estimate)  # the auxiliary loss's units (joint training)
                estimate = estimate.detach()
            state = torch.cat([state[..., :JOINT_STATE_DIM], estimate.to(state.dtype)], dim=-1)
        if cfg.use_text:
            # pre-encoded instructions (the traced inference graph takes tensors only), or the strings
            text_inputs = obs if "instruction_pad" in obs else self.text.inputs(obs["instruction"], device)
            text, pad = self.text.encode(text_inputs)
            tokens.append(text + self.type_embed[2])
            masks.append(pad)
        tokens.append(self.proprio(self.state_norm.normalize(state)).unsqueeze(1) + self.type_embed[3])
        masks.append(torch.zeros(batch, 1, dtype=torch.bool, device=device))
        with torch.autocast(device.type, enabled=False):  # attention (softmax over a few tokens) stays fp32 under AMP
            seq = self.transformer(torch.cat(tokens, dim=1).float(), src_key_padding_mask=torch.cat(masks, dim=1))
            cond = self.out_norm(seq[:, 0])
        if predict and self.aux_task_state is not None and not self.estimates_task_state:  # head on the representation
            prediction = self.aux_task_state(cond)
        return cond, prediction
