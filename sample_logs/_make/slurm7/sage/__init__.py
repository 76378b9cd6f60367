"""sage: a small distributed GraphSAGE trainer (neighbour sampling, message passing, DDP on gloo)."""
__version__ = "0.4.1"
