"""Seeing inside: shape traces, attention and loss plots, and the HTML report."""

from .plots import plot_attention, plot_losses
from .report import Report, write_report
from .shapes import shape_trace

__all__ = ["Report", "plot_attention", "plot_losses", "shape_trace", "write_report"]
