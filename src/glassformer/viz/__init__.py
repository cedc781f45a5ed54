"""Seeing inside: shape traces, attention plots and the HTML report."""

from .plots import plot_attention, plot_losses
from .report import write_report
from .trace import shape_trace

__all__ = ["plot_attention", "plot_losses", "shape_trace", "write_report"]
