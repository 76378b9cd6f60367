"""diagnose: why did this distributed training job die?

The library entry point is `diagnose.api.analyze`; the command line lives in `diagnose.cli`.
"""

__version__ = "0.1.0"
