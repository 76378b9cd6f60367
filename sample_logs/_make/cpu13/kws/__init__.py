"""Tiny keyword-spotting project (1-D conv on raw 8 kHz waveforms)."""
