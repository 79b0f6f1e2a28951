"""``im2rec pack`` as a package: the pipeline and what it is made of.

* ``pipeline``: ``pack``/``pack_source``, the options, the three stages, where the records go, the report;
* ``pool``: ``OrderedPool``, worker processes whose results come back in list order;
* ``shards``: size-limited shards, a pack's parts and their ``merge``;
* ``distributed``: ``--dask``, the parts packed on a Dask cluster, then merged.

(The drop-in ``im2rec.pack`` is ``recordio.pack``, MXNet's; ``pack`` here is the command.)
"""

from .pipeline import (
    Checked,
    ListSource,
    PackOptions,
    PackSummary,
    Progress,
    Result,
    Source,
    Task,
    check_list,
    default_workers,
    encode_record,
    leaves_root,
    pack,
    pack_source,
    summary_line,
    write_stats,
)

__all__ = [
    "Checked",
    "ListSource",
    "PackOptions",
    "PackSummary",
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
    "summary_line",
    "write_stats",
]
