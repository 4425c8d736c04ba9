"""hwregress: a pytest hardware regression suite for deep learning."""

__version__ = "0.1.0"
