"""The benchmark agent: measures conv layers and whole training steps on one machine type."""

__version__ = "0.2.0"
