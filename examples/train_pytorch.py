"""Train a small classifier on a .rec with PyTorch: random access, transforms, 2 workers.

    pip install 'im2rec[torch]'
    python -m im2rec.synthetic images/ --classes 10 --per-class 40   # or use your own folder
    im2rec list images/ data/train && im2rec pack data/train.lst images/ --resize 64
    python examples/train_pytorch.py data/train.rec --epochs 2

RecordDataset needs no MXNet: it reads the .rec through a memory map, decodes with
OpenCV (RGB, HWC uint8) and works in DataLoader workers under fork and spawn.
"""

import argparse

import numpy as np
import torch
from torch import nn

from im2rec import RecordDataset


def to_tensor(image: np.ndarray, size: int = 56, train: bool = True) -> torch.Tensor:
    """A random (train) or centre (eval) crop, a random flip, then CHW float in [0, 1]."""
    h, w = image.shape[:2]
    if train:
        y, x = np.random.randint(0, h - size + 1), np.random.randint(0, w - size + 1)
    else:
        y, x = (h - size) // 2, (w - size) // 2
    crop = image[y : y + size, x : x + size]
    if train and np.random.rand() < 0.5:
        crop = crop[:, ::-1]
    return torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1).float() / 255.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rec")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    train = RecordDataset(args.rec, transform=to_tensor, target_transform=int)
    classes = int(max(train.header(i).label for i in range(len(train)))) + 1
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        total, correct, loss_sum = 0, 0, 0.0
        for images, labels in loader:
            logits = model(images)
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(labels)
            correct += (logits.argmax(1) == labels).sum().item()
            total += len(labels)
        print(f"epoch {epoch}: {total} images, loss {loss_sum / total:.3f}, train accuracy {correct / total:.1%}")


if __name__ == "__main__":
    main()
