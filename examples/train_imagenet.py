"""MXNet's ImageNet training recipe (example/image-classification/train_imagenet.py), ported to PyTorch.

The data side is MXNet's `common/data.py` as it was, with `im2rec.ImageRecordIter` in place
of `mx.io.ImageRecordIter`: the same arguments, the same augmentation levels, the same
batches. Only the model and the loop are PyTorch's.

    pip install -e . 'torch==2.13.0'      # or any torch; CPU is fine for this demo
    python -m im2rec.synthetic images/ --classes 10 --per-class 40
    im2rec list images/ data/imagenet --train-ratio 0.9
    im2rec pack data/imagenet_train.lst images/ --resize 80
    im2rec pack data/imagenet_val.lst images/ --resize 80
    python examples/train_imagenet.py --data-train data/imagenet_train.rec --data-train-idx data/imagenet_train.idx \\
        --data-val data/imagenet_val.rec --data-val-idx data/imagenet_val.idx \\
        --image-shape 3,64,64 --num-classes 10 --batch-size 32 --num-epochs 2 --data-aug-level 3

On real ImageNet (`im2rec pack ... --resize 480 --quality 95`, as MXNet's README packs it),
`--image-shape 3,224,224 --batch-size 256` and a real model; `--kv-rank`/`--kv-workers`
(or torchrun's RANK/WORLD_SIZE) split the records as MXNet's `num_parts`/`part_index` did.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

import im2rec


def add_data_args(parser: argparse.ArgumentParser) -> None:
    """MXNet's add_data_args and add_data_aug_args, with their defaults."""
    data = parser.add_argument_group("Data", "the input images")
    data.add_argument("--data-train", type=str, required=True)
    data.add_argument("--data-train-idx", type=str, default="")
    data.add_argument("--data-val", type=str)
    data.add_argument("--data-val-idx", type=str, default="")
    data.add_argument("--rgb-mean", type=str, default="123.68,116.779,103.939")
    data.add_argument("--rgb-std", type=str, default="1,1,1")
    data.add_argument("--pad-size", type=int, default=0)
    data.add_argument("--fill-value", type=int, default=127)
    data.add_argument("--image-shape", type=str, default="3,224,224")
    data.add_argument("--num-classes", type=int, required=True)
    data.add_argument("--data-nthreads", type=int, default=4)
    aug = parser.add_argument_group("Image augmentations", "as MXNet's src/io/image_aug_default.cc")
    aug.add_argument("--random-crop", type=int, default=0)
    aug.add_argument("--random-mirror", type=int, default=0)
    aug.add_argument("--max-random-h", type=int, default=0)
    aug.add_argument("--max-random-s", type=int, default=0)
    aug.add_argument("--max-random-l", type=int, default=0)
    aug.add_argument("--min-random-aspect-ratio", type=float, default=None)
    aug.add_argument("--max-random-aspect-ratio", type=float, default=0)
    aug.add_argument("--max-random-rotate-angle", type=int, default=0)
    aug.add_argument("--max-random-shear-ratio", type=float, default=0)
    aug.add_argument("--max-random-scale", type=float, default=1)
    aug.add_argument("--min-random-scale", type=float, default=1)
    aug.add_argument("--max-random-area", type=float, default=1)
    aug.add_argument("--min-random-area", type=float, default=1)
    aug.add_argument("--min-crop-size", type=int, default=-1)
    aug.add_argument("--max-crop-size", type=int, default=-1)
    aug.add_argument("--brightness", type=float, default=0)
    aug.add_argument("--contrast", type=float, default=0)
    aug.add_argument("--saturation", type=float, default=0)
    aug.add_argument("--pca-noise", type=float, default=0)
    aug.add_argument("--random-resized-crop", type=int, default=0)
    aug.add_argument("--data-aug-level", type=int, default=0, help="MXNet's set_data_aug_level: 1 crop and mirror, 2 + HSL, 3 + rotate, shear, aspect")


def set_data_aug_level(args: argparse.Namespace) -> None:
    """MXNet's common/data.py set_data_aug_level."""
    level = args.data_aug_level
    if level >= 1:
        args.random_crop, args.random_mirror = 1, 1
    if level >= 2:
        args.max_random_h, args.max_random_s, args.max_random_l = 36, 50, 50
    if level >= 3:
        args.max_random_rotate_angle, args.max_random_shear_ratio, args.max_random_aspect_ratio = 10, 0.1, 0.25


def get_rec_iter(args: argparse.Namespace, rank: int = 0, nworker: int = 1) -> tuple[im2rec.ImageRecordIter, im2rec.ImageRecordIter | None]:
    """MXNet's get_rec_iter, word for word but for `im2rec.` in place of `mx.io.` (and the
    validation's round_batch)."""
    image_shape = tuple(int(v) for v in args.image_shape.split(","))
    rgb_mean = [float(i) for i in args.rgb_mean.split(",")]
    rgb_std = [float(i) for i in args.rgb_std.split(",")]
    train = im2rec.ImageRecordIter(
        path_imgrec=args.data_train,
        path_imgidx=args.data_train_idx,
        label_width=1,
        mean_r=rgb_mean[0],
        mean_g=rgb_mean[1],
        mean_b=rgb_mean[2],
        std_r=rgb_std[0],
        std_g=rgb_std[1],
        std_b=rgb_std[2],
        data_name="data",
        label_name="softmax_label",
        data_shape=image_shape,
        batch_size=args.batch_size,
        rand_crop=args.random_crop,
        max_random_scale=args.max_random_scale,
        pad=args.pad_size,
        fill_value=args.fill_value,
        random_resized_crop=args.random_resized_crop,
        min_random_scale=args.min_random_scale,
        max_aspect_ratio=args.max_random_aspect_ratio,
        min_aspect_ratio=args.min_random_aspect_ratio,
        max_random_area=args.max_random_area,
        min_random_area=args.min_random_area,
        min_crop_size=args.min_crop_size,
        max_crop_size=args.max_crop_size,
        brightness=args.brightness,
        contrast=args.contrast,
        saturation=args.saturation,
        pca_noise=args.pca_noise,
        random_h=args.max_random_h,
        random_s=args.max_random_s,
        random_l=args.max_random_l,
        max_rotate_angle=args.max_random_rotate_angle,
        max_shear_ratio=args.max_random_shear_ratio,
        rand_mirror=args.random_mirror,
        preprocess_threads=args.data_nthreads,
        shuffle=True,
        num_parts=nworker,
        part_index=rank,
    )
    if args.data_val is None:
        return train, None
    val = im2rec.ImageRecordIter(
        path_imgrec=args.data_val,
        path_imgidx=args.data_val_idx,
        label_width=1,
        mean_r=rgb_mean[0],
        mean_g=rgb_mean[1],
        mean_b=rgb_mean[2],
        std_r=rgb_std[0],
        std_g=rgb_std[1],
        std_b=rgb_std[2],
        data_name="data",
        label_name="softmax_label",
        batch_size=args.batch_size,
        data_shape=image_shape,
        preprocess_threads=args.data_nthreads,
        rand_crop=False,
        rand_mirror=False,
        num_parts=nworker,
        part_index=rank,
        # not in MXNet's recipe: with round_batch (the default) the last batch is filled from
        # the start and the next epoch starts after those records, so that every validation
        # after the first would skip some; without it, each pass reads every record once
        round_batch=False,
    )
    return train, val


def small_resnet(num_classes: int) -> nn.Module:
    def block(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    return nn.Sequential(block(3, 32, 2), block(32, 64, 2), block(64, 128, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, num_classes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(parser)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--kv-rank", type=int, default=int(os.environ.get("RANK", 0)))
    parser.add_argument("--kv-workers", type=int, default=int(os.environ.get("WORLD_SIZE", 1)))
    args = parser.parse_args()
    set_data_aug_level(args)
    train, val = get_rec_iter(args, args.kv_rank, args.kv_workers)
    model = small_resnet(args.num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.num_epochs):
        model.train()
        start, seen, total = time.perf_counter(), 0, 0.0
        for batch in train:  # MXNet's loop wrote batch.data[0].asnumpy(): these are numpy arrays already
            n = batch.data[0].shape[0] - batch.pad
            x = torch.from_numpy(batch.data[0][:n])  # no copy
            y = torch.from_numpy(batch.label[0][:n]).long()
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            seen, total = seen + n, total + loss.item() * n
        train.reset()
        line = f"epoch {epoch}: train loss {total / max(seen, 1):.3f}, {seen / (time.perf_counter() - start):.0f} samples/s"
        if val is not None:
            model.eval()
            right = count = 0
            with torch.no_grad():
                for batch in val:
                    n = batch.data[0].shape[0] - batch.pad
                    pred = model(torch.from_numpy(batch.data[0][:n])).argmax(1)
                    right += int((pred == torch.from_numpy(batch.label[0][:n]).long()).sum())
                    count += n
            val.reset()
            line += f", validation accuracy {right / max(count, 1):.3f}"
        print(line, flush=True)
    train.close()
    if val is not None:
        val.close()


if __name__ == "__main__":
    main()
