"""Write images and labels into a .rec/.idx pair with the drop-in API.

    python examples/write_records.py out.rec image1.jpg image2.png ...
"""

import sys

import cv2

from im2rec import recordio

out = sys.argv[1]
with recordio.MXIndexedRecordIO(out[: -len(".rec")] + ".idx", out, "w") as record:
    for i, path in enumerate(sys.argv[2:]):
        img = cv2.imread(path, cv2.IMREAD_COLOR)
        header = recordio.IRHeader(flag=0, label=float(i), id=i, id2=0)
        record.write_idx(i, recordio.pack_img(header, img, quality=95, img_fmt=".jpg"))
print(f"wrote {len(sys.argv) - 2} records to {out}")
