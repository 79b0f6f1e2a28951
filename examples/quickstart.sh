#!/usr/bin/env bash
# The main job on a folder made here: images -> lists -> .rec -> a look -> a check.
#
#   bash examples/quickstart.sh [WORKDIR]
#
# Replace the first step with your own folder (one sub-folder per class).
set -euo pipefail
WORK=${1:-quickstart}

python -m im2rec.synthetic "$WORK/images" --classes 10 --per-class 30      # 300 JPEGs, ImageNet-sized
im2rec list "$WORK/images" "$WORK/data/ds" --train-ratio 0.9 --stratify    # data/ds_train.lst, ds_val.lst
im2rec pack "$WORK/data/ds_train.lst" "$WORK/images" --resize 256 --quality 95
im2rec pack "$WORK/data/ds_val.lst" "$WORK/images" --resize 256 --quality 95
im2rec inspect "$WORK/data/ds_train.rec" --grid "$WORK/train-sheet.jpg" --samples 36   # look at it
im2rec verify "$WORK/data/ds_val.rec" --decode
