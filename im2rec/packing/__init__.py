"""``im2rec pack`` as a package: the pipeline and what it is made of.

* ``options``: ``PackOptions``, every option checked once;
* ``destination``: where the records go, decided once as a ``Plan``, and what follows the loop (lay out, upload);
* ``pipeline``: ``pack``/``pack_source``, the sources and the three stages (check, encode, write), resume;
* ``report``: ``PackSummary``, the summary line, ``--stats``;
* ``pool``: ``OrderedPool``, worker processes whose results come back in list order;
* ``shards``: size-limited shards, a pack's parts and their ``merge``;
* ``distributed``: ``--dask``, the parts packed on a Dask cluster, then merged.

(The drop-in ``im2rec.pack`` is ``recordio.pack``, MXNet's; ``pack`` here is the command.)
"""

from .destination import Plan, plan
from .options import PackOptions, default_workers
from .pipeline import Checked, ListSource, Progress, Result, Source, Task, check_list, encode_record, leaves_root, pack, pack_source
from .report import PackSummary, summary_line, write_stats

__all__ = [
    "Checked",
    "ListSource",
    "PackOptions",
    "PackSummary",
    "Plan",
    "Progress",
    "Result",
    "Source",
    "Task",
    "check_list",
    "default_workers",
    "encode_record",
    "leaves_root",
    "pack",
    "pack_source",
    "plan",
    "summary_line",
    "write_stats",
]
