"""The suite's own guard (conftest.py): a test that leaves a file in the folder pytest runs in fails, and a
file another process writes there meanwhile is not blamed on the test. An inner pytest run, no timing: the
other process writes when the test asks (a file) and the test waits for its file to exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

INNER = '''
import os
import subprocess
import sys
import time
from pathlib import Path

GO, DONE = Path(os.environ["GUARD_GO"]), Path("other-process.txt")
# Another process, started before any test: it writes into the folder when the test asks.
WRITER = subprocess.Popen([sys.executable, "-c", "import os, pathlib, time\\n"
                           "go = pathlib.Path(os.environ['GUARD_GO'])\\n"
                           "while not go.exists(): time.sleep(0.01)\\n"
                           "pathlib.Path('other-process.txt').write_text('not the test')\\n"])


def test_another_process_writes_here():
    GO.write_text("go")
    for _ in range(60_000):  # bounded: 10 minutes at most, never a verdict by time
        if DONE.exists():
            break
        time.sleep(0.01)
    WRITER.wait()
    assert DONE.read_text() == "not the test"


def test_this_test_writes_here():
    Path("left-by-the-test.txt").write_text("mine")


def test_this_test_renames_a_folder_in():
    os.rename(os.environ["GUARD_FOLDER"], "moved-in")


def test_a_child_of_this_test_writes_here():
    subprocess.run([sys.executable, "-c", "open('left-by-a-child.txt', 'w')"], check=True)
'''


def test_only_the_test_that_wrote_a_file_is_blamed(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("conftest.py"), repo / "tests" / "conftest.py")
    (repo / "tests" / "test_inner.py").write_text(INNER, encoding="utf-8")
    (tmp_path / "folder").mkdir()
    env = {"GUARD_GO": str(tmp_path / "go"), "GUARD_FOLDER": str(tmp_path / "folder")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_inner.py",
                           "-rA"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)
    report = done.stdout
    assert "PASSED tests/test_inner.py::test_another_process_writes_here" in report, report[-3000:]
    for name, left in (("test_this_test_writes_here", "left-by-the-test.txt"),
                       ("test_this_test_renames_a_folder_in", "moved-in"),
                       ("test_a_child_of_this_test_writes_here", "left-by-a-child.txt")):
        assert f"ERROR tests/test_inner.py::{name} - " in report, report[-3000:]
        assert f"AssertionError: the test left ['{left}'] in {repo}" in report
