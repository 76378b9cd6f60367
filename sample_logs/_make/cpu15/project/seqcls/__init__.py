"""seqcls: a small transformer that classifies multichannel sensor windows, trained with Ray Train."""
__version__ = "0.3.1"
