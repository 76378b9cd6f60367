"""segtrain: a small 2D semantic segmentation trainer (UNet, CE+Dice, sliding-window eval)."""
__version__ = "0.4.1"
