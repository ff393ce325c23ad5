"""bench/train_e2e.py's CPU version: a few training steps of a small
BatchNorm2d net and the UNet-style GroupNorm + SiLU stack, with torch.nn's
layers and with miopen_bn.torch's, give the same losses (float32, 1e-3), and
the script writes its table's JSON."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("torch")
from support import REPO  # noqa: E402

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import train_e2e  # noqa: E402


def test_cpu_training_losses_agree_with_torchs_layers(tmp_path, capsys):
    out = tmp_path / "e2e.json"
    train_e2e.main(["--device", "cpu", "--steps", "4", "--time-steps", "1", "--early-steps", "4",
                    "--json", str(out)])
    results = json.loads(out.read_text())
    assert set(results["models"]) == {"small_bn", "unet"}
    for name, entry in results["models"].items():
        assert entry["agreement"]["agree"], (name, entry["agreement"])
        assert len(entry["losses"]["ours"]) == 4
        assert all(0 < loss < 100 for loss in entry["losses"]["ours"])  # finite, a real loss
        assert set(entry["step_ms"]) == {"eager"}
    assert "ours/torch" in capsys.readouterr().out
