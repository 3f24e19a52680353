"""Device selection: npu > cuda > cpu, device strings only, no silent fallback."""

from __future__ import annotations

import pytest
import torch

from diffpolicy_ros import device as dev
from diffpolicy_ros.errors import UserError


@pytest.mark.quick
def test_auto_resolves_to_an_available_device_string():
    resolved = dev.resolve_device("auto")
    assert isinstance(resolved, str)
    torch.zeros(1, device=resolved)  # usable as is
    if not dev.npu_available() and not torch.cuda.is_available():
        assert resolved == "cpu"


@pytest.mark.quick
def test_explicit_requests():
    assert dev.resolve_device("cpu") == "cpu"
    assert dev.resolve_device(" CPU ") == "cpu"
    with pytest.raises(ValueError):
        dev.resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="cuda"):
            dev.resolve_device("cuda")
    if not dev.npu_available():
        with pytest.raises(UserError, match="npu"):
            dev.resolve_device("npu")


@pytest.mark.quick
def test_auto_prefers_npu_then_cuda(monkeypatch):
    monkeypatch.setattr(dev, "npu_available", lambda: True)
    assert dev.resolve_device("auto") == "npu:0"
    monkeypatch.setattr(dev, "npu_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert dev.resolve_device("auto", index=1) == "cuda:1"
    assert dev.resolve_device("cuda:2") == "cuda:2"
    with pytest.raises(UserError, match="cuda:3 requested but torch sees 3 CUDA devices"):
        dev.resolve_device("auto", index=3)  # a fourth rank on a 3-GPU node
    with pytest.raises(UserError, match="must be a number"):
        dev.resolve_device("cuda:first")


@pytest.mark.quick
def test_autocast_settings_per_device(monkeypatch):
    cpu = dev.autocast_settings("cpu")
    assert not cpu.enabled and not cpu.use_grad_scaler
    with torch.autocast(**cpu.kwargs()):
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.float32
    npu = dev.autocast_settings("npu:0")
    assert npu.enabled and npu.dtype == torch.bfloat16 and npu.device_type == "npu"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    cuda = dev.autocast_settings("cuda:0")
    assert cuda.dtype == torch.float16 and cuda.use_grad_scaler
    assert not dev.autocast_settings("cuda:0", enabled=False).enabled


@pytest.mark.quick
def test_training_autocast_runs_bf16_where_asked_or_where_the_device_computes_it(monkeypatch):
    assert not dev.training_autocast("fp32", "cpu").enabled
    forced = dev.training_autocast("bf16", "cpu")
    assert forced.enabled and forced.dtype == torch.bfloat16 and not forced.use_grad_scaler
    with torch.autocast(**forced.kwargs()):
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.bfloat16
    for native in (True, False):
        monkeypatch.setattr(dev, "cpu_computes_bf16", lambda native=native: native)
        assert dev.training_autocast("auto", "cpu").enabled is native
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda native=native: native)
        assert dev.training_autocast("auto", "cuda:0").enabled is native
    assert dev.training_autocast("auto", "npu:0").enabled
    with pytest.raises(UserError, match="precision must be one of"):
        dev.training_autocast("fp16", "cpu")
