"""Seeing inside: shape traces, attention and loss plots, the HTML report, and a training run's page."""

from .plots import plot_attention, plot_losses
from .report import Report, write_report
from .report_run import write_run_page
from .shapes import shape_trace

__all__ = ["Report", "plot_attention", "plot_losses", "shape_trace", "write_report", "write_run_page"]
