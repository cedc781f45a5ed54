"""Seeing inside: shape traces and attention plots."""

from .plots import plot_attention
from .trace import shape_trace

__all__ = ["plot_attention", "shape_trace"]
