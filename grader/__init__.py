"""PaperLeet: grade PyTorch implementations of paper equations against a hidden reference."""

__version__ = "0.1.0"
