"""Read a .rec/.idx pair the way MXNet code does, with only the import changed.

    python examples/read_records.py train.rec

Before: `from mxnet import recordio`. After: `from im2rec import recordio`.
"""

import sys

import cv2
import numpy as np

from im2rec import recordio

rec_path = sys.argv[1]
idx_path = rec_path[: -len(".rec")] + ".idx"
record = recordio.MXIndexedRecordIO(idx_path, rec_path, "r")
print(f"{len(record.keys)} records")
for key in record.keys[:5]:
    header, img = recordio.unpack(record.read_idx(key))
    image = cv2.imdecode(np.frombuffer(img, np.uint8), cv2.IMREAD_COLOR)
    print(f"key {key}: label {header.label}, id {header.id}, image {image.shape}")
record.close()
