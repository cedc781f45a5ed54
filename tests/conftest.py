"""Shared test settings: small thread count, deterministic seeds, and the suite runs as a user's fresh
clone would: offline, and without the ``../shared`` folder our machines have beside the repository.

- Offline: this process cannot open a network connection (only local ones: loopback and Unix sockets;
  :func:`_refuse_remote`), and subprocesses inherit an environment that points every HTTP client at a
  port where nothing listens and tells Hugging Face and W&B to stay offline (OFFLINE_ENV).
- ``../shared/data`` (the full corpora) is seen only when ``GLASSFORMER_SHARED_DATA`` names it; the
  few tests that need a large corpus ask for the ``shared_data`` fixture and are skipped otherwise.
- A busy machine is slow, not wrong: no test decides by elapsed time (hypothesis has no deadline; waits
  are hang guards), and a file another process writes beside the suite is not blamed on a test.
So `make test` on our machines, in CI and in a user's clone runs the same tests on the same files.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

# Property tests judge values, never time: no per-example deadline (200 ms by default) and no "too slow"
# health check, both of which a busy machine trips. A test's own @settings inherits these.
settings.register_profile("glassformer", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("glassformer")

# The suite fixes torch's threads (one, below): glassformer's thread policy, which follows the machine's
# load, stays out of its way (tests/test_threads.py tests the policy with the variable removed).
os.environ["GLASSFORMER_THREADS"] = "fixed"

# Kernel choices measured during the tests go to a throw-away folder, never to the user's cache;
# subprocesses (the CLI tests) inherit it.
os.environ["GLASSFORMER_CACHE_DIR"] = tempfile.mkdtemp(prefix="glassformer-test-cache-")

NOWHERE = "http://127.0.0.1:9"  # the discard port: a connection there is refused at once
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PIP_NO_INDEX": "1",
               "http_proxy": NOWHERE, "https_proxy": NOWHERE, "HTTP_PROXY": NOWHERE, "HTTPS_PROXY": NOWHERE,
               "no_proxy": "localhost,127.0.0.1,::1", "NO_PROXY": "localhost,127.0.0.1,::1"}
os.environ.update(OFFLINE_ENV)

_connect = socket.socket.connect


def _is_local(address: object) -> bool:
    """Whether a socket address is on this machine (a Unix socket path, loopback, or localhost)."""
    if not isinstance(address, tuple):
        return True  # AF_UNIX paths (and abstract names)
    host = str(address[0])
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # a host name: it would be resolved on the network


def _refuse_remote(self: socket.socket, address: object) -> None:
    if not _is_local(address):
        raise ConnectionRefusedError(f"the test suite runs offline: no connection to {address!r}")
    return _connect(self, address)


socket.socket.connect = _refuse_remote  # type: ignore[method-assign]

SHARED_DATA = Path(os.environ["GLASSFORMER_SHARED_DATA"]) if os.environ.get("GLASSFORMER_SHARED_DATA") else None


STARTED_IN = Path.cwd()  # where pytest runs (the repository): no test leaves a file here
TOOL_CACHES = {".hypothesis", ".pytest_cache", "__pycache__", ".ruff_cache"}  # the tools' own, made on first use

# Who made a new entry of STARTED_IN: this process (Python's audit events for what creates a name: open for
# writing, mkdir, rename/replace, symlink, link) or a process it started there. An entry that another
# process (an editor, a build, a second test run) writes during a test is not that test's doing.
_CREATE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT
_MADE_HERE: set[str] = set()  # entries of STARTED_IN this process made during the current test
_CHILDREN_HERE: list[str] = []  # processes the current test started with STARTED_IN as their folder


def _entry_of(path: object, at: str | None = None) -> str | None:
    """The entry of STARTED_IN that ``path`` (relative to ``at``, default the current folder) lies in, else None."""
    if isinstance(path, (bytes, os.PathLike)):
        path = os.fsdecode(path)
    if not isinstance(path, str):  # a file descriptor
        return None
    full = os.path.normpath(os.path.join(at or os.getcwd(), path))
    inside = os.path.relpath(full, STARTED_IN)
    return None if inside == "." or inside.startswith("..") else inside.split(os.sep)[0]


def _audit(event: str, args: tuple) -> None:
    """Note what this process creates in STARTED_IN, and the processes it starts there. Never raises (an
    exception here would fail the audited call): a path it cannot place is not noted."""
    if event not in _AUDITED:
        return
    try:
        if event in _STARTS:
            cwd = args[2] if event == "subprocess.Popen" and args[2] is not None else os.getcwd()
            if os.path.realpath(os.fsdecode(cwd)) == str(STARTED_IN.resolve()):
                _CHILDREN_HERE.append(event)
            return
        if event == "open":
            path, mode, flags = args
            if not (any(c in mode for c in "wax+") if isinstance(mode, str) else flags & _CREATE_FLAGS):
                return
        else:
            path = args[0] if event == "os.mkdir" else args[1]  # rename, symlink, link: the new name
        entry = _entry_of(path)
        if entry is not None:
            _MADE_HERE.add(entry)
    except Exception:  # a folder gone (a test's tmp cwd), a path that is not text: nothing noted
        return


_STARTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.fork", "os.system"})
_AUDITED = _STARTS | {"open", "os.mkdir", "os.rename", "os.symlink", "os.link"}


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny models: one thread is fastest and keeps runs comparable
    before = set(os.listdir(STARTED_IN))
    _MADE_HERE.clear()
    _CHILDREN_HERE.clear()
    yield
    new = set(os.listdir(STARTED_IN)) - before - TOOL_CACHES
    left = sorted(new if _CHILDREN_HERE else new & _MADE_HERE)  # a child's files cannot be told from others'
    assert not left, f"the test left {left} in {STARTED_IN} (write into tmp_path, or pass --out)"


@pytest.fixture
def shared_data() -> Path:
    """The full corpora (tinyshakespeare/, multi30k/ laid out as data/), only when GLASSFORMER_SHARED_DATA
    names their folder (e.g. ../shared/data): a user's clone has none, so the test is skipped."""
    if SHARED_DATA is None or not SHARED_DATA.is_dir():
        pytest.skip("needs the full corpora: set GLASSFORMER_SHARED_DATA to their folder (e.g. ../shared/data)")
    return SHARED_DATA


# ------------------------------------------------------------------ the browser of the HTML tests
CHROMIUM = Path("/usr/bin/chromium")
# Root in a container without network: no sandbox, no GPU, nothing that phones home.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run",
        "--disable-default-apps", "--disable-extensions"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed at {CHROMIUM} (run .ci/system-deps as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=ARGS, viewport={"width": 1200, "height": 900})
        context.set_default_timeout(120_000)  # ms, for every wait: a bound on a hang on a busy machine, not a verdict
        yield context
        context.close()
