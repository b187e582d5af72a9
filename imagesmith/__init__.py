"""imagesmith: a compatibility matrix in, vetted GPU images out."""

__version__ = "0.1.0"
