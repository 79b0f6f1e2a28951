"""Helpers shared by the benchmark scripts: the corpus, timing, and printing."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
MAKE_CORPUS = ROOT.parent / "shared" / "tools" / "make_corpus.py"
CACHE = Path(os.environ.get("IM2REC_BENCH_CACHE", "/tmp/im2rec-bench"))

# make_corpus.py arguments of each named corpus
CORPORA = {
    "imagenet": ["--classes", "100", "--per-class", "50"],  # 5,000 images
    "imagenet20k": ["--classes", "100", "--per-class", "200"],  # 20,000 images
    "large": ["--size", "large", "--classes", "10", "--per-class", "20"],  # 200 phone-sized photos
}


def corpus(name: str = "imagenet") -> Path:
    """The folder of a benchmark corpus, built with ../shared/tools/make_corpus.py on first use."""
    out = CACHE / name
    if not (out / ".complete").exists():
        if not MAKE_CORPUS.exists():
            sys.exit(f"cannot build the corpus: {MAKE_CORPUS} is missing (pass --corpus DIR)")
        print(f"building corpus {name} in {out} ...", file=sys.stderr)
        subprocess.run([sys.executable, str(MAKE_CORPUS), str(out), *CORPORA[name]], check=True)
        (out / ".complete").touch()
    return out


def image_files(root: Path) -> List[Path]:
    """Every image under root, sorted."""
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def best_of(fn: Callable[[], object], rounds: int = 5) -> Tuple[float, float]:
    """Run fn `rounds` times; return (best, median) seconds."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def row(name: str, value: float, unit: str, ratio: float | None = None, note: str = "") -> None:
    ratio_s = f"{ratio:6.2f}x" if ratio is not None else " " * 7
    value_s = f"{value:>12,.3f}" if value < 100 else f"{value:>12,.0f}"
    print(f"  {name:<44} {value_s} {unit:<10} {ratio_s}  {note}")
