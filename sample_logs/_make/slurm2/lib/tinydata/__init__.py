"""tinydata: minimal sharded feature store used by the MLP pretraining runs.

Layout of a dataset directory::

    meta.json              {"version": 3, "features": F, "num_classes": C,
                            "shards": [{"file": "part-00000.bin", "num_rows": N, "features": F}, ...]}
    part-00000.bin         N*F float32 (row-major) followed by N int64 labels
    part-00000.bin.lock    advisory lock file (exporter holds LOCK_EX while rewriting a shard)
"""
from .shards import ShardReader, load_meta, shard_for_rank  # noqa: F401

__version__ = "0.4.1"
