"""examples/notebook.ipynb runs top to bottom in a real Jupyter kernel, and its rich outputs show."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="the dev extra installs nbclient (pip install -e '.[dev]')")
nbformat = pytest.importorskip("nbformat")
from jupyter_client import KernelManager  # noqa: E402  (installed with nbclient)

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "notebook.ipynb"


def _outputs(cell) -> list[dict]:
    return [dict(o) for o in cell.get("outputs", [])]


def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    notebook = nbformat.read(tmp_path / NOTEBOOK.name, as_version=4)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)  # the kernel's IPC sockets go here
    kernel = KernelManager(kernel_name="python3", transport="ipc")  # local sockets, no TCP port
    client = nbclient.NotebookClient(notebook, km=kernel, timeout=600, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, when one fails

    code = [c for c in notebook.cells if c.cell_type == "code"]
    streams = [o for c in code for o in _outputs(c) if o["output_type"] == "stream"]
    stderr = "".join(o["text"] for o in streams if o["name"] == "stderr")
    assert "Warning" not in stderr, stderr  # no font, tqdm or deprecation warnings
    rich = {i: [o for o in _outputs(c) if o["output_type"] == "execute_result"] for i, c in enumerate(code)}

    def html_of(fragment: str) -> str:
        (index,) = [i for i, c in enumerate(code) if fragment in c.source]
        (result,) = rich[index]
        return result["data"]["text/html"]

    trace = html_of("trace = trace_generation(")
    assert trace.startswith("<table>") and trace.count("<tr>") == 13  # the head and 12 steps
    assert "<b><code>&#x27;花&#x27;</code>" in trace  # the chosen character, in bold
    report = html_of("report = Report.build(")
    assert report.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in report and "gf-data" in report
    assert "image/png" in rich[[i for i, c in enumerate(code) if "plot_attention" in c.source][0]][0]["data"]
    assert "花开了。\n夏天来了，蝉叫" in "".join(o["text"] for o in streams if o["name"] == "stdout")
    assert (tmp_path / "notebook-output" / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
