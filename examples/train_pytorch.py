"""Train a small classifier on a .rec, local or in S3, on one process or many (DDP), resumable.

    pip install -e '.[torch,s3]'
    python -m im2rec.synthetic images/ --classes 10 --per-class 40   # or use your own folder
    im2rec list images/ data/train && im2rec pack data/train.lst images/ --resize 64
    python examples/train_pytorch.py data/train.rec --epochs 2

    # DDP on 2 processes (CPU, gloo), the .rec in S3, fetched blocks kept on local disk:
    torchrun --nproc-per-node 2 examples/train_pytorch.py s3://bucket/train.rec \\
        --cache-dir /tmp/im2rec-cache --checkpoint ckpt.pt --epochs 2
    # stopped (Ctrl-C, a lost node, a preempted job)? the same command resumes from ckpt.pt,
    # in the middle of the epoch, on any number of processes: the rest of the epoch reads
    # each remaining image once. (Killing torchrun with SIGKILL leaves its ranks running:
    # kill them, or use Ctrl-C / SIGTERM, which torchrun passes on.)

What each piece does:
- RecordDataset reads the .rec (a memory map locally; from a store, a batch's records are
  fetched at once, in blocks of neighbouring records, kept in --cache-dir if given).
- RecordLoader decodes and transforms in threads of this process, straight into each
  batch's tensor; its RecordSampler deals each epoch over the ranks of torch.distributed
  exactly (same number each, every image once), in an order that depends only on (seed,
  epoch, ranks).
- The checkpoint holds the model, the optimizer and loader.state_dict(): the epoch and
  how far it went, as of the batches the loop took.
"""

import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from im2rec import RecordDataset, RecordLoader


def to_tensor(image: np.ndarray, size: int = 56) -> torch.Tensor:
    """A random crop and flip, then CHW float in [0, 1] (runs in the loader's threads)."""
    h, w = image.shape[:2]
    y, x = np.random.randint(0, h - size + 1), np.random.randint(0, w - size + 1)
    crop = image[y : y + size, x : x + size]
    if np.random.rand() < 0.5:
        crop = crop[:, ::-1]
    return torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1).float() / 255.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rec", help="a .rec (with its .idx), a shard manifest, or a URL (s3://...)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="decoding threads [default: the cores, plus 2]")
    ap.add_argument("--classes", type=int, default=None, help="[default: from the labels, one pass over the headers (from a store: every block, once, through --cache-dir)]")
    ap.add_argument("--cache-dir", default=None, help="keep fetched blocks here (a URL .rec); shared by every process")
    ap.add_argument("--checkpoint", default=None, help="save here after each --save-every batches and each epoch; resume from it")
    ap.add_argument("--save-every", type=int, default=20)
    args = ap.parse_args()

    distributed = "WORLD_SIZE" in os.environ  # started by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0

    train = RecordDataset(args.rec, cache_dir=args.cache_dir)
    classes = args.classes or int(max(train.header(i).label for i in range(len(train)))) + 1
    # the ranks come from torch.distributed; a new order each epoch, drawn from seed
    loader = RecordLoader(train, args.batch_size, transform=to_tensor, target_transform=int, shuffle=True, seed=0, drop_last=True, threads=args.threads)
    model: nn.Module = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start_epoch = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        loader.load_state_dict(ckpt["loader"])  # the same epoch, from where it stopped, on any number of ranks
        start_epoch = ckpt["loader"]["epoch"]
        if rank == 0:
            print(f"resumed epoch {start_epoch} after {ckpt['loader']['sampler']['consumed']} samples")
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)

    def save() -> None:
        if args.checkpoint and rank == 0:  # every rank's loader state is the same
            state = {"model": model.state_dict() if not distributed else model.module.state_dict(), "optimizer": optimizer.state_dict(), "loader": loader.state_dict()}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # a kill mid-save leaves the old one whole

    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)  # keeps a resume loaded for this epoch
        total, correct, loss_sum = 0, 0, 0.0
        for step, (images, labels) in enumerate(loader, 1):
            logits = model(images)
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(labels)
            correct += (logits.argmax(1) == labels).sum().item()
            total += len(labels)
            if step % args.save_every == 0:
                save()
        if rank == 0 and total:
            print(f"epoch {epoch}: {total} images on rank 0, loss {loss_sum / total:.3f}, train accuracy {correct / total:.1%}")
        loader.set_epoch(epoch + 1)  # a state saved at the end of an epoch says: the next, from its start
        save()
    loader.close()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
