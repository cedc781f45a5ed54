"""The docs are tests: every shell command and Python block of README.md, README.zh-CN.md, docs/ and
docs/learn/ runs as written, in a fresh shell, from a folder laid out like a clone after the README's
set-up (`make demo`: the package installed, `demo-output/` written).

- Blocks run in the page's order. Python blocks run in this test's interpreter, one namespace per
  page (a later block may use an earlier one's names), in that folder.
- Shell blocks (```bash, and the `$ ` lines of ```console) run in bash, one block per call, with the
  virtual environment's tools first on PATH (what `source .venv/bin/activate` gives), under
  ``set -eo pipefail``. Training, recipe and benchmark commands get overrides appended (SHORTEN):
  the documented command, cut to a few steps of a smaller model. Nothing else is changed. A command
  (or Python block) that already ran in this session, on an earlier page, is not run again (RAN); nor is a
  ```console block identical to one checked earlier (the same commands and output).
- docs/learn/zh-CN/ (the lessons in Chinese) runs last. Its code blocks are byte-identical to its
  English twins' (tests/test_docs_zh.py checks that), so they ran already with the English pages: what
  runs again is a block that differs, and a command with `$`.
- A ```console block's output lines are the command's expected output: numbers must agree within
  TOLERANCE (float results of training differ a little between CPU kinds), text exactly.
- A block right below the HTML comment ``<!-- not run by tests/test_docs.py: REASON -->`` (a line a
  rendered page does not show) is skipped; SKIPPED lists every such block and why, so none is skipped
  silently.
- Offline, from any clone: Multi30k is the few pairs of tests/fixtures/multi30k, the Tang poems (Debian's
  fortunes-zh) those of tests/fixtures/fortunes, and nothing is read from ../shared.
- Every fenced block names its language: python, bash and console run; text is output or a diagram.

Speed: a `glassformer` command spends ~3 s importing torch and the package before it starts, and the
docs hold some 60 of them. The `glassformer` these shells find is a small client (WARM_CLIENT) of a
process that imported everything once (WARM_SERVER) and forks a child per command; the child runs the
same ``glassformer.cli.main`` with the command's arguments, folder, environment and standard streams,
and its exit status is the command's. (`python ...` commands, and torchrun's workers, start fresh.)
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MULTI30K_FIXTURE = ROOT / "tests" / "fixtures" / "multi30k"  # a few pairs in Multi30k's layout, for 2-step runs
TANG_FIXTURE = ROOT / "tests" / "fixtures" / "fortunes" / "tang300"  # Tang poems in Debian's fortunes-zh layout
PAGES = ["README.md", "README.zh-CN.md",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "learn").glob("*.md")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "learn" / "zh-CN").glob("*.md"))]
LANGUAGES = {"python", "bash", "console", "text"}
SKIP_MARK = re.compile(r"^<!-- not run by tests/test_docs\.py: (.+?) -->\s*$")
OLD_SKIP_MARK = "# not run by the docs test:"  # the former marker, inside the block: readers saw it
# Every block below a SKIP_MARK comment, with a word of its reason: (page, reason fragment).
SKIPPED = {
    ("README.md", "the set-up"),            # make demo / make test: this test runs after them (CI is `make test`)
    ("README.zh-CN.md", "the set-up"),
    ("docs/training.md", "two machines"),   # torchrun over a network to 10.0.0.1: no second machine here
    ("docs/training.md", "PyPI"),           # pip install of the tracker extras: `make test` installed them
    ("docs/training.md", "a server"),       # tensorboard serves until stopped; wandb sync uploads
    ("docs/benchmarks.md", "CUDA"),         # --device cuda: CI has no GPU
    ("docs/transcoders.md", "minutes"),     # the induction model and its transcoders: ~15 min; output quoted
    ("docs/learn/08-from-heads-to-features.md", "minutes"),  # examples/21_graph_mechanisms.py: its JSON is read
    ("docs/learn/zh-CN/08-from-heads-to-features.md", "minutes"),  # the Chinese twin of the block above
    ("docs/learn/report.md", "root"),       # sudo apt install: CI installs the package with .ci/system-deps
    ("docs/learn/report.md", "the suite"),  # pytest -m browser: `make test` runs those tests already
    ("docs/learn/zh-CN/report.md", "root"),  # the Chinese twin of the two above (the same blocks)
    ("docs/learn/zh-CN/report.md", "the suite"),
}
# Not a speed limit (a busy machine may take many times the usual minutes; the suite asserts no time):
# only a guard that ends a block that hangs (a server that never stops), well inside CI's 90 minutes.
HANG_GUARD_S = 1800
TOLERANCE = 0.03  # |expected - got| allowed for each number of a console block's output
# A few optimizer steps of a small model: what the test appends to training commands (later words win).
TINY_TRAINING = ["--max_steps", "2", "--eval_every", "0", "--eval_batches", "2", "--progress", "false",
                 "--model.d_model", "16", "--model.n_heads", "2", "--model.d_ff", "32"]
SHORTEN = [  # (regex searched in a command, words appended to it)
    (r"\bglassformer (train|recipe)\b|-m glassformer(\.cli)? train\b", TINY_TRAINING),
    (r"\bglassformer recipe \S*multi30k", ["--model.n_enc", "1", "--model.n_dec", "1", "--tokenizer_vocab_size",
                                           "300", "--recipe.beams", "[2]"]),
    (r"\bglassformer recipe \S*(mlm_shakespeare_bpe|tang_poems)", ["--tokenizer_vocab_size", "300"]),
    (r"\bglassformer recipe \S*mlm_shakespeare_bpe", ["--recipe.examples", "2"]),  # an MLM recipe's key
    (r"\bglassformer recipe \S*tang_poems", ["--recipe.source", shlex.quote(str(TANG_FIXTURE))]),  # no fortunes-zh
    (r"\bglassformer recipe \S*prefix_", ["--recipe.eval_examples", "16"]),
    (r"\bglassformer recipe \S*induction", ["--recipe.gpt2_steps", "2", "--recipe.measure_every", "1",
                                           "--recipe.probe_batch", "4"]),
    # a benchmark runs for minutes by design: each documented command runs its cheapest part once
    # (tests/test_bench.py runs every part shortened)
    (r"\bglassformer bench\b|benchmarks/bench_train.py", ["--only", "attn", "--quick", "--rounds", "1", "--sizes",
                                                          "small", "--no_hf", "--precision", "float32"]),
    (r"benchmarks/bench_matvec.py", ["--rounds", "1", "--rows", "1", "--layers", "1"]),
    (r"\bglassformer transcoders\b", ["--steps", "3", "--batch_size", "64", "--buffer_size", "256",
                                      "--feature_windows", "2", "--eval_batches", "1", "--progress", "false"]),
    # an SAE, alone or after a recipe's model, as the transcoders: a few steps of small batches
    (r"\bglassformer sae\b", ["--steps", "3", "--batch_size", "64", "--buffer_size", "256", "--feature_windows", "2",
                               "--eval_batches", "1", "--progress", "false"]),
    (r"\bglassformer recipe \S*_sae\b", ["--recipe.steps", "3", "--recipe.batch_size", "64", "--recipe.buffer_size",
                                         "256", "--recipe.feature_windows", "2", "--recipe.eval_batches", "1",
                                         "--recipe.naming_batches", "1"]),
]
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# Python code (comments aside) and shell commands that ran in this session's folder: the same command
# on another page (README.zh-CN.md repeats README.md's) is not run twice; its files are there.
RAN: set[str] = set()


def _without_comments(code: str) -> str:
    return re.sub(r"\s*#[^\n]*", "", code).strip()


@dataclass
class Block:
    page: str
    line: int
    language: str
    text: str
    skip_reason: str | None = None  # the REASON of a SKIP_MARK comment on the line above the fence


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```([^\n]*)\n(.*?)^```\s*$", text, re.S | re.M):
        language = match.group(1).split()[0] if match.group(1).strip() else ""
        above = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = SKIP_MARK.match(above)
        found.append(Block(page, text[:match.start()].count("\n") + 1, language, match.group(2),
                           mark.group(1).strip() if mark else None))
    return found


def _strip_comment(line: str) -> str:
    """``line`` without a trailing shell comment (a ``#`` after a space, outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_commands(block: Block) -> tuple[list[str], list[str]]:
    """(commands, expected output lines) of a bash or console block; continuation lines joined."""
    commands, expected, pending = [], [], None
    for raw in block.text.splitlines():
        if pending is not None:
            pending += " " + raw.strip()
        elif block.language == "console" and not raw.startswith("$ "):
            expected.append(raw)
            continue
        else:
            pending = raw[2:] if block.language == "console" else raw
        if pending.rstrip().endswith("\\"):
            pending = pending.rstrip()[:-1].rstrip()
            continue
        command = _strip_comment(pending)
        pending = None
        if command.strip():
            commands.append(command)
    return commands, expected


def shortened(command: str) -> str:
    """``command`` with the SHORTEN words of every rule that matches appended."""
    extra = [word for pattern, words in SHORTEN if re.search(pattern, command) for word in words]
    return command + "".join(f" {word}" for word in extra)


def same_output(expected: list[str], got: list[str]) -> bool:
    """Equal text, numbers within TOLERANCE (whitespace runs count as one space)."""
    if len(expected) != len(got):
        return False
    for want, have in zip(expected, got, strict=True):
        want_text, have_text = NUMBER.split(" ".join(want.split())), NUMBER.split(" ".join(have.split()))
        want_nums, have_nums = NUMBER.findall(want), NUMBER.findall(have)
        if want_text != have_text or len(want_nums) != len(have_nums):
            return False
        if any(abs(float(a) - float(b)) > TOLERANCE for a, b in zip(want_nums, have_nums, strict=True)):
            return False
    return True


# ------------------------------------------------------------------------------------------- the folder
WARM_SERVER = r"""
import json, os, socket, sys, traceback
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
import torch
import torch._dynamo
import glassformer.cli
import glassformer.bench, glassformer.generation, glassformer.interop.hf_dir, glassformer.lessons.tiny_char
import glassformer.recipes, glassformer.training, glassformer.viz.report
import transformers  # the version `glassformer bench` records
from glassformer.interpret.points import act_name

act_name("embed")  # hook names, read once from models on the meta device (torch's meta kernels load then)

server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
server.bind(sys.argv[1])
server.listen(4)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:  # the command: its own streams, folder and environment
        status = 1
        try:
            server.close()
            for fd, target in zip(fds, (0, 1, 2)):
                os.dup2(fd, target)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()))
            sys.argv = ["glassformer", *request["argv"]]
            try:
                status = glassformer.cli.main(request["argv"])
            except SystemExit as done:
                status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    for fd in fds:
        os.close(fd)
    _, wait = os.waitpid(pid, 0)
    conn.send(str(os.waitstatus_to_exitcode(wait)).encode())
    conn.close()
"""
WARM_CLIENT = """#!{python} -S
import json, os, socket, sys
try:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    client.connect({socket!r})
except OSError:  # no warm process: the real command
    os.execv({real!r}, [{real!r}, *sys.argv[1:]])
request = {{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}
socket.send_fds(client, [json.dumps(request).encode()], [0, 1, 2])
sys.exit(int(client.recv(16)))
"""
WARM_BIN: Path | None = None  # the folder of the warm `glassformer`, first on PATH while the fixture lives


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder laid out like a clone after `make demo`: configs/, examples/, benchmarks/, data/ (the
    shipped corpus; Multi30k from ../shared/data when there), demo-output/ written by `glassformer demo`."""
    global WARM_BIN
    work = tmp_path_factory.mktemp("docs")
    for name in ("configs", "examples", "benchmarks", "docs"):
        (work / name).symlink_to(ROOT / name)
    (work / "data").mkdir()
    (work / "data" / "tinyshakespeare").symlink_to(ROOT / "data" / "tinyshakespeare")
    (work / "data" / "multi30k").symlink_to(MULTI30K_FIXTURE)  # `--download` finds it there: no network
    warm = Path(tempfile.mkdtemp(prefix="gf-docs-"))  # short: a socket path has at most 107 bytes
    server = subprocess.Popen([sys.executable, "-c", WARM_SERVER, str(warm / "socket")], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        (warm / "bin").mkdir()
        client = warm / "bin" / "glassformer"
        client.write_text(WARM_CLIENT.format(python=sys.executable, socket=str(warm / "socket"),
                                             real=str(Path(sys.executable).parent / "glassformer")))
        client.chmod(0o755)
        WARM_BIN = warm / "bin"
        _bash("glassformer demo", work, "the set-up (make demo)")
        yield work
    finally:
        WARM_BIN = None
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=600)
        shutil.rmtree(warm, ignore_errors=True)


def _env() -> dict[str, str]:
    """A fresh shell's environment after `source .venv/bin/activate`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLASSFORMER_DATA", "MPLCONFIGDIR")}
    path = [str(WARM_BIN)] if WARM_BIN else []
    env["PATH"] = os.pathsep.join([*path, str(Path(sys.executable).parent), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(Path(sys.executable).parent.parent)
    env["MPLBACKEND"] = "Agg"
    env["OMP_NUM_THREADS"] = "1"  # small models; and 2 threads on a busy 2-core machine spin against each other
    return env


def _bash(script: str, cwd: Path, where: str) -> str:
    done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, f"{where} failed (status {done.returncode}):\n{script}\n--- stdout\n" \
                                 f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    return done.stdout


# ------------------------------------------------------------------------------------------- the tests
def test_every_block_names_a_known_language():
    unnamed = [f"{b.page}:{b.line} {b.language!r}" for p in PAGES for b in blocks(p) if b.language not in LANGUAGES]
    assert unnamed == [], f"fenced blocks need one of {sorted(LANGUAGES)}: {unnamed}"


def test_skipped_blocks_are_the_listed_ones():
    old = [f"{b.page}:{b.line}" for p in PAGES for b in blocks(p) if b.text.lstrip("\n").startswith(OLD_SKIP_MARK)]
    assert old == [], f"put '<!-- not run by tests/test_docs.py: REASON -->' above these blocks instead: {old}"
    marked = {(b.page, b.skip_reason) for p in PAGES for b in blocks(p) if b.skip_reason is not None}
    listed = {(page, reason) for page, fragment in SKIPPED for p, reason in marked if p == page and fragment in reason}
    assert marked == listed and len(listed) == len(SKIPPED), (sorted(marked), sorted(SKIPPED))


@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_written(page, workdir, monkeypatch):
    runnable = [b for b in blocks(page) if b.language in ("python", "bash", "console") and b.skip_reason is None]
    if not runnable:
        pytest.skip(f"{page} has no runnable block")
    monkeypatch.chdir(workdir)  # Python blocks write their files where the shell blocks do
    namespace: dict = {"__name__": "__docs__"}  # one per page: a later block may use an earlier one's names
    for block in runnable:  # in the page's order: a block may use what an earlier one wrote
        where = f"{page}:{block.line}"
        if block.language == "python":
            code = _without_comments(block.text)
            if code not in RAN:  # the same code on another page (README.zh-CN.md) ran already
                exec(compile(block.text, where, "exec"), namespace)
                RAN.add(code)
            continue
        if block.language == "console" and block.text in RAN:  # the same commands and output, checked already
            continue
        commands, expected = shell_commands(block)
        changed = [shortened(c) for c in commands]
        todo = changed if expected else [c for c in changed if c not in RAN or "$" in c]
        if not todo:
            continue
        out = _bash("\n".join(todo), workdir, where)
        RAN.update(todo)
        if expected and changed == commands:
            got = out.rstrip("\n").splitlines()
            assert same_output(expected, got), f"{where}: the output differs\n--- documented\n" \
                                               + "\n".join(expected) + "\n--- got\n" + "\n".join(got)
            RAN.add(block.text)


def test_shortening_and_comparing_rules():
    block = Block("x.md", 1, "console", '$ glassformer recipe prefix_reverse \\\n    --seed 1  # note\nok 0.500 "#"\n')
    commands, expected = shell_commands(block)
    assert commands == ["glassformer recipe prefix_reverse --seed 1"] and expected == ['ok 0.500 "#"']
    assert shortened(commands[0]).endswith("--recipe.eval_examples 16") and "--max_steps 2" in shortened(commands[0])
    assert _strip_comment("echo '# not a comment' # a comment") == "echo '# not a comment'"
    assert same_output(["none  accuracy 0.208"], ["none accuracy 0.211"])
    assert not same_output(["none  accuracy 0.208"], ["none accuracy 0.308"])
    assert not same_output(["rope accuracy 1.000"], ["alibi accuracy 1.000"])


def test_readme_and_its_translation_have_the_same_sections():
    """README.zh-CN.md follows README.md: the same ## sections in the same order, the same code blocks."""
    def outline(page: str) -> tuple[list[int], list[str], list[str]]:
        text = (ROOT / page).read_text(encoding="utf-8")
        sections = [part.count("\n```") for part in re.split(r"^## ", text, flags=re.M)]  # fences per section
        code = [_without_comments(b.text) for b in blocks(page) if b.language in ("python", "bash")]
        verbs = sorted(set(re.findall(rf"glassformer ({'|'.join(VERBS)})\b", text)))
        return len(sections), code, verbs

    from glassformer.cli import VERBS

    english, chinese = outline("README.md"), outline("README.zh-CN.md")
    assert english[0] == chinese[0], "README.md and README.zh-CN.md have different numbers of ## sections"
    assert english[1] == chinese[1], "the Python examples differ (comments aside)"
    assert english[2] == chinese[2], f"verbs shown: {english[2]} vs {chinese[2]}"
    assert set(english[2]) == set(VERBS), f"the README should show every verb: missing {set(VERBS) - set(english[2])}"
    en_links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.md").read_text(encoding="utf-8"))
    zh_links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.zh-CN.md").read_text(encoding="utf-8"))
    assert sorted(set(en_links)) == sorted(set(zh_links)), "both READMEs link the same pages"


def test_the_folder_needs_nothing_outside_the_repository():
    """The docs run from what a clone holds: the Multi30k fixture is committed (conftest.py keeps the
    whole suite away from ../shared and the network)."""
    tracked = subprocess.run(["git", "ls-files", str(MULTI30K_FIXTURE)], cwd=ROOT, capture_output=True, text=True)
    names = sorted(f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("de", "en"))
    assert all((MULTI30K_FIXTURE / name).is_file() for name in names) and TANG_FIXTURE.is_file()
    if tracked.returncode == 0:  # a git checkout (an unpacked sdist has no history to ask)
        assert sorted(Path(line).name for line in tracked.stdout.split() if line.endswith(".gz")) == names
        assert subprocess.run(["git", "ls-files", "--error-unmatch", str(TANG_FIXTURE)], cwd=ROOT,
                              capture_output=True).returncode == 0


def test_docs_reference_no_missing_file():
    """Every repository path a page names in backticks (examples/..., configs/..., docs/...) exists."""
    missing = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        pattern = r"`((?:examples|configs|benchmarks|docs|tests|src)/[\w./-]+\.(?:py|yaml|md|ipynb))"
        for path in re.findall(pattern, text):
            if not (ROOT / path).exists() and not (ROOT / "src" / path).exists():
                missing.append(f"{page}: {path}")
    assert missing == []
    assert shutil.which("bash")


def test_prefix_lookahead_table_is_the_measured_one():
    """docs/results.md's look-ahead table is docs/results/prefix_lookahead.json (the runs' results.json)."""
    import json

    measured = json.loads((ROOT / "docs" / "results" / "prefix_lookahead.json").read_text(encoding="utf-8"))
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    section = text[text.index("### Look-ahead inside the input"):]
    rows = [line for line in section.split("\n\n")[2].splitlines() if line.startswith("| ") and "---" not in line]
    columns = [(model, key) for key in ("val_loss", "exact_match") for model in ("prefix-LM", "causal LM")] + [
        ("prefix-LM", "symbol_accuracy"), ("causal LM", "symbol_accuracy")]
    expected = {str(run["seed"]): [run[model][key] for model, key in columns] for run in measured["runs"]}
    expected["mean"] = [sum(v[i] for v in expected.values()) / len(expected) for i in range(len(columns))]
    shown = {}
    for row in rows[1:]:
        first, *rest = [cell.strip() for cell in row.strip("|").split("|")]
        shown[first.split()[0]] = [float(n) for n in NUMBER.findall(" ".join(rest).replace("**", ""))]
    assert set(shown) == set(expected), (sorted(shown), sorted(expected))
    for name, numbers in shown.items():
        assert [f"{n:.3f}" for n in numbers] == [f"{v:.3f}" for v in expected[name]], name
