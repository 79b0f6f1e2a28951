"""``mx.image.detection`` without MXNet: augmenters that move boxes with pixels, and ``ImageDetIter``.

MXNet 1.9.1's Python detection module written anew on ``mx.nd``, drawing from Python's
``random`` in MXNet's order. A label is an ``(objects, width)`` array of ``[class, xmin, ymin,
xmax, ymax, extra...]`` rows, coordinates relative to the image (0-1); a packed record label
is ``[header_width, object_width, header..., objects...]``, as ``im2rec pack --pack-label`` writes.
"""

from __future__ import annotations

import json
import logging
import numbers
import random
import warnings
from math import sqrt
from typing import Any

import numpy as np

from . import nd
from .image import (
    EIGVAL,
    EIGVEC,
    Augmenter,
    CastAug,
    ColorJitterAug,
    ColorNormalizeAug,
    ForceResizeAug,
    HueJitterAug,
    ImageIter,
    LightingAug,
    RandomGrayAug,
    ResizeAug,
    copyMakeBorder,
    fixed_crop,
    mean_std,
)
from .nd import NDArray

log = logging.getLogger(__name__)

__all__ = [
    "CreateDetAugmenter",
    "CreateMultiRandCropAugmenter",
    "DetAugmenter",
    "DetBorrowAug",
    "DetHorizontalFlipAug",
    "DetRandomCropAug",
    "DetRandomPadAug",
    "DetRandomSelectAug",
    "ImageDetIter",
]


class DetAugmenter:
    """``mx.image.DetAugmenter``: ``(image, label)`` in, ``(image, label)`` out."""

    def __init__(self, **kwargs: Any):
        self._kwargs = {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}

    def dumps(self) -> Any:
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __call__(self, src: Any, label: np.ndarray) -> tuple[Any, np.ndarray]:
        raise NotImplementedError("Must override implementation.")


class DetBorrowAug(DetAugmenter):
    """An image ``Augmenter`` that leaves the boxes as they are (resizes, colour)."""

    def __init__(self, augmenter: Augmenter):
        if not isinstance(augmenter, Augmenter):
            raise TypeError("Borrowing from invalid Augmenter")
        super().__init__(augmenter=augmenter.dumps())
        self.augmenter = augmenter

    def dumps(self) -> Any:
        return [type(self).__name__.lower(), self.augmenter.dumps()]

    def __call__(self, src: Any, label: np.ndarray) -> tuple[Any, np.ndarray]:
        return self.augmenter(src), label


class DetRandomSelectAug(DetAugmenter):
    """One of ``aug_list``, drawn by ``random.shuffle``; none with probability ``skip_prob``."""

    def __init__(self, aug_list: Any, skip_prob: float = 0):
        super().__init__(skip_prob=skip_prob)
        if not isinstance(aug_list, (list, tuple)):
            aug_list = [aug_list]
        for aug in aug_list:
            if not isinstance(aug, DetAugmenter):
                raise ValueError("Allow DetAugmenter in list only")
        self.aug_list = list(aug_list)
        self.skip_prob = skip_prob if aug_list else 1

    def dumps(self) -> Any:
        return [type(self).__name__.lower(), [x.dumps() for x in self.aug_list]]

    def __call__(self, src: Any, label: np.ndarray) -> tuple[Any, np.ndarray]:
        if random.random() < self.skip_prob:
            return src, label
        random.shuffle(self.aug_list)
        return self.aug_list[0](src, label)


class DetHorizontalFlipAug(DetAugmenter):
    """With probability ``p``, the image and its boxes mirrored (the label changed in place)."""

    def __init__(self, p: float):
        super().__init__(p=p)
        self.p = p

    def __call__(self, src: Any, label: np.ndarray) -> tuple[Any, np.ndarray]:
        if random.random() < self.p:
            src = nd.flip(src, axis=1)
            self._flip_label(label)
        return src, label

    def _flip_label(self, label: np.ndarray) -> None:
        tmp = 1.0 - label[:, 1]
        label[:, 1] = 1.0 - label[:, 3]
        label[:, 3] = tmp


def _areas(boxes: np.ndarray) -> np.ndarray:
    return np.maximum(0, boxes[:, 3] - boxes[:, 1]) * np.maximum(0, boxes[:, 2] - boxes[:, 0])


def _pair(value: Any, what: str, name: str) -> tuple[float, float]:
    if isinstance(value, (tuple, list)):
        return (float(value[0]), float(value[1]))
    if not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name}: {what} must be a number or a pair, got {value!r}")
    log.info("Using fixed %s: %s in %s", what, value, name)
    return (float(value), float(value))


def _proposal_size(ratio: float, min_area: float, max_area: float, width: int, height: int, grow: bool) -> tuple[int, int]:
    """A box's ``(w, h)`` for aspect ``ratio`` between the areas, fitted to (``grow``: around) the image."""
    h = round(sqrt(min_area / ratio))
    max_h = round(sqrt(max_area / ratio))
    if grow:
        if round(h * ratio) < width:
            h = int((width + 0.499999) / ratio)
        if h < height:
            h = height
    else:
        if round(max_h * ratio) > width:
            max_h = int((width + 0.4999999) / ratio)
        if max_h > height:
            max_h = height
    if h > max_h:
        h = max_h
    if h < max_h:
        h = random.randint(h, max_h)
    return round(h * ratio), h


class DetRandomCropAug(DetAugmenter):
    """A random crop that keeps enough of the objects (``min_object_covered`` of each kept box;
    boxes with less than ``min_eject_coverage`` left are dropped), up to ``max_attempts`` tries."""

    def __init__(self, min_object_covered: float = 0.1, aspect_ratio_range: Any = (0.75, 1.33), area_range: Any = (0.05, 1.0), min_eject_coverage: float = 0.3, max_attempts: int = 50):
        aspect_ratio_range = _pair(aspect_ratio_range, "aspect ratio", "DetRandomCropAug")
        area_range = _pair(area_range, "area range", "DetRandomCropAug")
        super().__init__(min_object_covered=min_object_covered, aspect_ratio_range=aspect_ratio_range, area_range=area_range, min_eject_coverage=min_eject_coverage, max_attempts=max_attempts)
        self.min_object_covered, self.min_eject_coverage, self.max_attempts = min_object_covered, min_eject_coverage, max_attempts
        self.aspect_ratio_range, self.area_range = aspect_ratio_range, area_range
        self.enabled = False
        if area_range[1] <= 0 or area_range[0] > area_range[1]:
            warnings.warn(f"Skip DetRandomCropAug due to invalid area_range: {area_range}", stacklevel=2)
        elif aspect_ratio_range[0] > aspect_ratio_range[1] or aspect_ratio_range[0] <= 0:
            warnings.warn(f"Skip DetRandomCropAug due to invalid aspect_ratio_range: {aspect_ratio_range}", stacklevel=2)
        else:
            self.enabled = True

    def __call__(self, src: Any, label: np.ndarray) -> tuple[Any, np.ndarray]:
        crop = self._random_crop_proposal(label, src.shape[0], src.shape[1])
        if crop:
            x, y, w, h, label = crop
            src = fixed_crop(src, x, y, w, h, None)
        return src, label

    def _intersect(self, boxes: np.ndarray, xmin: float, ymin: float, xmax: float, ymax: float) -> np.ndarray:
        left, right = np.maximum(boxes[:, 0], xmin), np.minimum(boxes[:, 2], xmax)
        top, bot = np.maximum(boxes[:, 1], ymin), np.minimum(boxes[:, 3], ymax)
        out = boxes.copy()
        out[:, 0], out[:, 1], out[:, 2], out[:, 3] = left, top, right, bot
        out[np.where(np.logical_or(left >= right, top >= bot))[0], :] = 0
        return out

    def _check_satisfy_constraints(self, label: np.ndarray, xmin: int, ymin: int, xmax: int, ymax: int, width: int, height: int) -> bool:
        if (xmax - xmin) * (ymax - ymin) < 2:
            return False
        x1, y1, x2, y2 = float(xmin) / width, float(ymin) / height, float(xmax) / width, float(ymax) / height
        object_areas = _areas(label[:, 1:])
        valid = np.where(object_areas * width * height > 2)[0]
        if valid.size < 1:
            return False
        coverages = _areas(self._intersect(label[valid, 1:], x1, y1, x2, y2)) / object_areas[valid]
        coverages = coverages[np.where(coverages > 0)[0]]
        return bool(coverages.size > 0 and np.amin(coverages) > self.min_object_covered)

    def _update_labels(self, label: np.ndarray, box: tuple[int, int, int, int], height: int, width: int) -> np.ndarray | None:
        xmin, ymin = float(box[0]) / width, float(box[1]) / height
        w, h = float(box[2]) / width, float(box[3]) / height
        out = label.copy()
        out[:, (1, 3)] -= xmin
        out[:, (2, 4)] -= ymin
        out[:, (1, 3)] /= w
        out[:, (2, 4)] /= h
        out[:, 1:5] = np.minimum(1, np.maximum(0, out[:, 1:5]))
        coverage = _areas(out[:, 1:]) * w * h / _areas(label[:, 1:])
        valid = np.logical_and(np.logical_and(out[:, 3] > out[:, 1], out[:, 4] > out[:, 2]), coverage > self.min_eject_coverage)
        kept = np.where(valid)[0]
        return out[kept, :] if kept.size else None

    def _random_crop_proposal(self, label: np.ndarray, height: int, width: int) -> tuple:
        if not self.enabled or height <= 0 or width <= 0:
            return ()
        min_area = self.area_range[0] * height * width
        max_area = self.area_range[1] * height * width
        for _ in range(self.max_attempts):
            ratio = random.uniform(*self.aspect_ratio_range)
            if ratio <= 0:
                continue
            w, h = _proposal_size(ratio, min_area, max_area, width, height, grow=False)
            area = w * h
            if area < min_area:
                h += 1
                w = round(h * ratio)
                area = w * h
            if area > max_area:
                h -= 1
                w = round(h * ratio)
                area = w * h
            if not (min_area <= area <= max_area and 0 <= w <= width and 0 <= h <= height):
                continue
            y = random.randint(0, max(0, height - h))
            x = random.randint(0, max(0, width - w))
            if self._check_satisfy_constraints(label, x, y, x + w, y + h, width, height):
                new_label = self._update_labels(label, (x, y, w, h), height, width)
                if new_label is not None:
                    return (x, y, w, h, new_label)
        return ()


class DetRandomPadAug(DetAugmenter):
    """The image placed at a random spot of a larger canvas of ``pad_val`` (area ``area_range``
    times the image's), its boxes moved with it."""

    def __init__(self, aspect_ratio_range: Any = (0.75, 1.33), area_range: Any = (1.0, 3.0), max_attempts: int = 50, pad_val: Any = (128, 128, 128)):
        if not isinstance(pad_val, (list, tuple)) and not isinstance(pad_val, numbers.Number):
            raise TypeError(f"DetRandomPadAug: pad_val must be a number or a tuple, got {pad_val!r}")
        aspect_ratio_range = _pair(aspect_ratio_range, "aspect ratio", "DetRandomPadAug")
        area_range = _pair(area_range, "area range", "DetRandomPadAug")
        super().__init__(aspect_ratio_range=aspect_ratio_range, area_range=area_range, max_attempts=max_attempts, pad_val=pad_val)
        self.pad_val, self.aspect_ratio_range, self.area_range, self.max_attempts = pad_val, aspect_ratio_range, area_range, max_attempts
        self.enabled = False
        if area_range[1] <= 1.0 or area_range[0] > area_range[1]:
            warnings.warn(f"Skip DetRandomPadAug due to invalid parameters: {area_range}", stacklevel=2)
        elif aspect_ratio_range[0] <= 0 or aspect_ratio_range[0] > aspect_ratio_range[1]:
            warnings.warn(f"Skip DetRandomPadAug due to invalid aspect_ratio_range: {aspect_ratio_range}", stacklevel=2)
        else:
            self.enabled = True

    def __call__(self, src: Any, label: np.ndarray) -> tuple[Any, np.ndarray]:
        height, width = src.shape[:2]
        pad = self._random_pad_proposal(label, height, width)
        if pad:
            x, y, w, h, label = pad
            values = self.pad_val if isinstance(self.pad_val, (list, tuple)) else (self.pad_val,)
            src = copyMakeBorder(src, y, h - y - height, x, w - x - width, 16, values=values)  # BORDER_CONSTANT | BORDER_ISOLATED, as MXNet passes
        return src, label

    def _update_labels(self, label: np.ndarray, box: tuple[int, int, int, int], height: int, width: int) -> np.ndarray:
        out = label.copy()
        out[:, (1, 3)] = (out[:, (1, 3)] * width + box[0]) / box[2]
        out[:, (2, 4)] = (out[:, (2, 4)] * height + box[1]) / box[3]
        return out

    def _random_pad_proposal(self, label: np.ndarray, height: int, width: int) -> tuple:
        if not self.enabled or height <= 0 or width <= 0:
            return ()
        min_area = self.area_range[0] * height * width
        max_area = self.area_range[1] * height * width
        for _ in range(self.max_attempts):
            ratio = random.uniform(*self.aspect_ratio_range)
            if ratio <= 0:
                continue
            w, h = _proposal_size(ratio, min_area, max_area, width, height, grow=True)
            if (h - height) < 2 or (w - width) < 2:
                continue  # too little padding to be worth it
            y = random.randint(0, max(0, h - height))
            x = random.randint(0, max(0, w - width))
            return (x, y, w, h, self._update_labels(label, (x, y, w, h), height, width))
        return ()


def CreateMultiRandCropAugmenter(min_object_covered: Any = 0.1, aspect_ratio_range: Any = (0.75, 1.33), area_range: Any = (0.05, 1.0), min_eject_coverage: Any = 0.3, max_attempts: Any = 50, skip_prob: float = 0) -> DetRandomSelectAug:
    """One ``DetRandomCropAug`` per set of values (a list gives several), one of them drawn per image."""
    params = [p if isinstance(p, list) else [p] for p in (min_object_covered, aspect_ratio_range, area_range, min_eject_coverage, max_attempts)]
    num = max(len(p) for p in params)
    for k, p in enumerate(params):
        if len(p) != num:
            if len(p) != 1:
                raise ValueError(f"CreateMultiRandCropAugmenter: lists of different lengths ({len(p)} and {num})")
            params[k] = p * num
    augs: list[DetAugmenter] = [DetRandomCropAug(min_object_covered=a, aspect_ratio_range=b, area_range=c, min_eject_coverage=d, max_attempts=e) for a, b, c, d, e in zip(*params)]
    return DetRandomSelectAug(augs, skip_prob=skip_prob)


def CreateDetAugmenter(
    data_shape: tuple[int, int, int],
    resize: int = 0,
    rand_crop: float = 0,
    rand_pad: float = 0,
    rand_gray: float = 0,
    rand_mirror: bool = False,
    mean: Any = None,
    std: Any = None,
    brightness: float = 0,
    contrast: float = 0,
    saturation: float = 0,
    pca_noise: float = 0,
    hue: float = 0,
    inter_method: int = 2,
    min_object_covered: Any = 0.1,
    aspect_ratio_range: Any = (0.75, 1.33),
    area_range: Any = (0.05, 3.0),
    min_eject_coverage: Any = 0.3,
    max_attempts: Any = 50,
    pad_val: Any = (127, 127, 127),
) -> list[DetAugmenter]:
    """``mx.image.CreateDetAugmenter``: MXNet's detection augmenters for these options, in its
    order: resize, random crop, mirror, random pad, force-resize to ``data_shape``, cast,
    colour, hue, PCA lighting, gray, normalisation."""
    auglist: list[DetAugmenter] = []
    if resize > 0:
        auglist.append(DetBorrowAug(ResizeAug(resize, inter_method)))
    if rand_crop > 0:
        auglist.append(CreateMultiRandCropAugmenter(min_object_covered, aspect_ratio_range, area_range, min_eject_coverage, max_attempts, skip_prob=(1 - rand_crop)))
    if rand_mirror > 0:
        auglist.append(DetHorizontalFlipAug(0.5))
    if rand_pad > 0:
        pad_aug = DetRandomPadAug(aspect_ratio_range, (1.0, area_range[1]), max_attempts, pad_val)
        auglist.append(DetRandomSelectAug([pad_aug], 1 - rand_pad))
    auglist.append(DetBorrowAug(ForceResizeAug((data_shape[2], data_shape[1]), inter_method)))
    auglist.append(DetBorrowAug(CastAug()))
    if brightness or contrast or saturation:
        auglist.append(DetBorrowAug(ColorJitterAug(brightness, contrast, saturation)))
    if hue:
        auglist.append(DetBorrowAug(HueJitterAug(hue)))
    if pca_noise > 0:
        auglist.append(DetBorrowAug(LightingAug(pca_noise, EIGVAL, EIGVEC)))
    if rand_gray > 0:
        auglist.append(DetBorrowAug(RandomGrayAug(rand_gray)))
    mean, std = mean_std(mean, std, np.array)
    if mean is not None or std is not None:
        auglist.append(DetBorrowAug(ColorNormalizeAug(mean, std)))
    return auglist


class ImageDetIter(ImageIter):
    """``mx.image.ImageDetIter``: ``ImageIter`` for detection: labels are packed detection labels,
    the augmenters ``CreateDetAugmenter``'s, each batch's label ``(batch, max objects, width)``
    padded with -1 (the most objects of any image, counted at construction)."""

    def __init__(self, batch_size: int, data_shape: tuple[int, int, int], path_imgrec: str | None = None, path_imglist: str | None = None, path_root: str | None = None, path_imgidx: str | None = None, shuffle: bool = False, part_index: int = 0, num_parts: int = 1, aug_list: list[Any] | None = None, imglist: list[Any] | None = None, data_name: str = "data", label_name: str = "label", last_batch_handle: str = "pad", **kwargs: Any):
        super().__init__(batch_size=batch_size, data_shape=data_shape, path_imgrec=path_imgrec, path_imglist=path_imglist, path_root=path_root, path_imgidx=path_imgidx, shuffle=shuffle, part_index=part_index, num_parts=num_parts, aug_list=[], imglist=imglist, data_name=data_name, label_name=label_name, last_batch_handle=last_batch_handle)
        self.auglist = CreateDetAugmenter(data_shape, **kwargs) if aug_list is None else aug_list
        label_shape = self._estimate_label_shape()
        self.provide_label: list[Any] = [(label_name, (self.batch_size, label_shape[0], label_shape[1]))]
        self.label_shape = label_shape

    def _check_valid_label(self, label: np.ndarray) -> None:
        if len(label.shape) != 2 or label.shape[1] < 5:
            raise RuntimeError(f"Label with shape (1+, 5+) required, {label!s} received.")
        valid = np.where(np.logical_and(label[:, 0] >= 0, np.logical_and(label[:, 3] > label[:, 1], label[:, 4] > label[:, 2])))[0]
        if valid.size < 1:
            raise RuntimeError("Invalid label occurs.")

    def _estimate_label_shape(self) -> tuple[int, int]:
        max_count, width = 0, 0
        self.reset()
        try:
            while True:
                label, _ = self.next_sample()
                label = self._parse_label(label)
                max_count, width = max(max_count, label.shape[0]), label.shape[1]
        except StopIteration:
            pass
        self.reset()
        return (max_count, width)

    def _parse_label(self, label: Any) -> np.ndarray:
        raw = np.asarray(label).ravel()
        if raw.size < 7:
            raise RuntimeError("Label shape is invalid: " + str(raw.shape))
        header_width, obj_width = int(raw[0]), int(raw[1])
        if (raw.size - header_width) % obj_width != 0:
            raise RuntimeError(f"Label shape {raw.shape} inconsistent with annotation width {obj_width}.")
        out = np.reshape(raw[header_width:], (-1, obj_width))
        valid = np.where(np.logical_and(out[:, 3] > out[:, 1], out[:, 4] > out[:, 2]))[0]
        if valid.size < 1:
            raise RuntimeError("Encounter sample with no valid label.")
        return np.array(out[valid, :])

    def reshape(self, data_shape: tuple[int, int, int] | None = None, label_shape: tuple[int, int] | None = None) -> None:
        """A new data shape and/or label shape (at least as many objects, the same width)."""
        if data_shape is not None:
            self.check_data_shape(data_shape)
            self.provide_data = [(self.provide_data[0][0], (self.batch_size, *data_shape))]
            self.data_shape = data_shape
        if label_shape is not None:
            self.check_label_shape(label_shape)
            self.provide_label = [(self.provide_label[0][0], (self.batch_size, *label_shape))]
            self.label_shape = label_shape

    def check_label_shape(self, label_shape: tuple[int, ...]) -> None:
        if len(label_shape) != 2:
            raise ValueError("label_shape should have length 2")
        if label_shape[0] < self.label_shape[0]:
            raise ValueError(f"Attempts to reduce label count from {self.label_shape[0]} to {label_shape[0]}, not allowed.")
        if label_shape[1] != self.provide_label[0][1][2]:
            raise ValueError(f"label_shape object width inconsistent: {self.provide_label[0][1][2]} vs {label_shape[1]}.")

    def _batchify(self, batch_data: NDArray, batch_label: NDArray, start: int = 0) -> int:
        i = start
        try:
            while i < self.batch_size:
                label, s = self.next_sample()
                data = self.imdecode(s)
                try:
                    self.check_valid_image([data])
                    label = self._parse_label(label)
                    data, label = self.augmentation_transform(data, label)
                    self._check_valid_label(label)
                except RuntimeError as e:
                    log.debug("Invalid image, skipping:  %s", e)
                    continue
                batch_data[i] = self.postprocess_data(data)
                num_object = label.shape[0]
                batch_label[i][0:num_object] = nd.array(label)
                if num_object < batch_label[i].shape[0]:
                    batch_label[i][num_object:] = -1
                i += 1
        except StopIteration:
            if not i:
                raise
        return i

    def _new_label(self) -> NDArray:
        """A batch's labels: -1 where no object is written (MXNet's)."""
        return nd.full(self.provide_label[0][1], -1)

    def augmentation_transform(self, data: Any, label: Any = None) -> Any:
        for aug in self.auglist:
            data, label = aug(data, label)
        return data, label

    def sync_label_shape(self, it: ImageDetIter, verbose: bool = False) -> ImageDetIter:
        """Both iterators' label shapes made the larger of the two."""
        if not isinstance(it, ImageDetIter):
            raise TypeError("Synchronize with invalid iterator.")
        train, val = self.label_shape, it.label_shape
        if train[1] != val[1]:
            raise ValueError("object width mismatch.")
        max_count = max(train[0], val[0])
        if max_count > train[0]:
            self.reshape(None, (max_count, train[1]))
        if max_count > val[0]:
            it.reshape(None, (max_count, val[1]))
        if verbose and max_count > min(train[0], val[0]):
            log.info("Resized label_shape to (%d, %d).", max_count, train[1])
        return it
