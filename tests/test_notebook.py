"""The quickstart notebook runs headlessly from start to end (so it never rots) and shows its
two figures inline, as Jupyter would (no backend forced by the notebook), in the session's
temporary cache (tests/conftest.py), never the user's."""
import os
import time

import pytest

from tests import REPO

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")


def test_quickstart_notebook_runs(trained_world, tmp_path):
    notebook = nbformat.read(os.path.join(REPO, "docs", "quickstart.ipynb"), as_version=4)
    started = time.time()
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    seconds = time.time() - started
    outputs = "".join(output.get("text", "") for cell in notebook.cells
                      if cell.cell_type == "code" for output in cell.get("outputs", []))
    assert "mean g on the object" in outputs and "done" in outputs
    shown = [output for cell in notebook.cells if cell.cell_type == "code"
             for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]
    assert len(shown) == 2  # the maps and the deletion curves, inline
    assert (tmp_path / "quickstart_maps.png").stat().st_size > 1000
    assert (tmp_path / "quickstart_deletion.png").stat().st_size > 1000
    print(f"quickstart notebook: {seconds:.1f} s")
