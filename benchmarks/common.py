"""Helpers shared by the benchmark scripts: the corpus, timing, and printing."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from im2rec.synthetic import CorpusSpec, make_corpus

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("IM2REC_BENCH_CACHE", "/tmp/im2rec-bench"))

# The named corpora, built by the project's own generator (python -m im2rec.synthetic)
CORPORA = {
    "imagenet": CorpusSpec(classes=100, per_class=50),  # 5,000 images, shorter side 300-500 px
    "imagenet20k": CorpusSpec(classes=100, per_class=200),  # 20,000 images
    "large": CorpusSpec(classes=10, per_class=20, size="large"),  # 200 phone-sized photos
}


def corpus(name: str = "imagenet") -> Path:
    """The folder of a benchmark corpus, generated on first use (deterministic: same spec, same pixels)."""
    spec = CORPORA[name]
    out = CACHE / f"{name}-synthetic-{spec.seed}"
    if not (out / ".complete").exists():
        print(f"building corpus {name} in {out} ...", file=sys.stderr)
        make_corpus(str(out), spec)
        (out / ".complete").touch()
    return out


def image_files(root: Path) -> list[Path]:
    """Every image under root, sorted."""
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def best_of(fn: Callable[[], object], rounds: int = 5, setup: Callable[[], object] | None = None) -> tuple[float, float]:
    """Run fn `rounds` times, each after an untimed `setup`; return (best, median) seconds."""
    times = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def row(name: str, value: float, unit: str, ratio: float | None = None, note: str = "") -> None:
    ratio_s = f"{ratio:6.2f}x" if ratio is not None else " " * 7
    value_s = f"{value:>12,.3f}" if value < 100 else f"{value:>12,.0f}"
    print(f"  {name:<44} {value_s} {unit:<10} {ratio_s}  {note}")
