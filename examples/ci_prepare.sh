#!/usr/bin/env bash
# A data-prep job as a CI system runs it: list the images, pack them, and fail
# the job on any bad image, keeping the stats (and the list of failures) as artifacts.
#
#   IMAGES=/data/images OUT=artifacts bash examples/ci_prepare.sh
#
# Exit status: that of the failing step (im2rec pack --strict exits 1 if any
# image failed; its outputs and stats are still written for inspection).
set -euo pipefail

IMAGES=${IMAGES:?set IMAGES to the image folder (one sub-folder per class)}
OUT=${OUT:-artifacts}
mkdir -p "$OUT"

# Deterministic lists: the same folder always gives the same lists and bytes.
im2rec list "$IMAGES" "$OUT/data" --train-ratio 0.9 --stratify --seed 100 --quiet

status=0
for split in train val; do
  im2rec pack "$OUT/data_$split.lst" "$IMAGES" "$OUT/$split.rec" \
    --resize 256 --quality 95 --strict --stats "$OUT/$split.stats.json" --overwrite || status=$?
done
exit $status
