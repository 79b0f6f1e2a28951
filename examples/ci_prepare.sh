#!/usr/bin/env bash
# A data-prep job as a CI system runs it: list the images, pack them, and fail
# the job on any bad image, keeping the stats (and the list of failures) as artifacts.
#
#   IMAGES=/data/images OUT=artifacts bash examples/ci_prepare.sh
#
# Without IMAGES it builds a small synthetic folder to show the job end to end.
# Exit status: that of the failing step (im2rec pack --strict exits 1 if any
# image failed; its outputs and stats are still written for inspection).
set -euo pipefail

OUT=${OUT:-artifacts}
if [ -z "${IMAGES:-}" ]; then
  IMAGES="$OUT/demo-images"
  python -m im2rec.synthetic "$IMAGES" --classes 5 --per-class 20
fi

# Deterministic lists: the same folder always gives the same lists and bytes.
im2rec list "$IMAGES" "$OUT/data" --train-ratio 0.9 --stratify --seed 100 --quiet

status=0
for split in train val; do
  im2rec pack "$OUT/data_$split.lst" "$IMAGES" "$OUT/$split.rec" \
    --resize 256 --quality 95 --strict --stats "$OUT/$split.stats.json" --overwrite || status=$?
done
exit $status
