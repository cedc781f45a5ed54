"""Public corpora of the recipes in a data folder (``$GLASSFORMER_DATA`` or ``./data``) laid out as ``URLS``,
fetched only with ``download=True`` (tinyshakespeare is also shipped); Tang poems from Debian's fortunes-zh."""

import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..data.seq2seq import read_pairs
from ..data.text import read_text
from ..errors import GlassformerError, MissingFileError
from ..io.checks import check_number
from ..io.fileio import atomic_write
from ..validate import check_choice

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{file}"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
TANG300 = Path("/usr/share/games/fortunes/tang300")

URLS: dict[str, str] = {"tinyshakespeare/input.txt": TINYSHAKESPEARE_URL} | {
    f"multi30k/{split}.{lang}.gz": MULTI30K_URL.format(file=f"{split}.{lang}.gz")
    for split in MULTI30K_SPLITS for lang in ("de", "en")}  # path inside data_dir -> public URL
SHIPPED = Path(__file__).with_name("data")  # corpora shipped with the package (the repository's data/)
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def download(url: str, target: str | Path, timeout: float = 60.0) -> Path:
    """Fetch ``url`` into ``target`` atomically (``timeout``: seconds per network wait); returns ``target``."""
    check_number("timeout", timeout, 0.0, low_open=True)
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            atomic_write(target, iter(lambda: response.read(1 << 20), b""), what="download")  # streamed, fsynced
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        raise MissingFileError(f"could not download {url} ({reason}); without network, save the file as "
                               f"{str(target)!r} yourself") from error
    return target


def corpus_file(relative: str, data_dir: str | Path | None = None, download_missing: bool = False) -> Path:
    """The path of one corpus file (a key of ``URLS``) in ``data_dir``: downloaded when missing and
    ``download_missing``, else the shipped copy if any, else a MissingFileError naming the URL."""
    check_choice("corpus file", relative, sorted(URLS))
    folder = data_dir if data_dir is not None else os.environ.get("GLASSFORMER_DATA") or "data"
    path = Path(folder) / relative
    if path.is_file():
        return path
    if download_missing:
        return download(URLS[relative], path)
    if (SHIPPED / relative).is_file():
        return SHIPPED / relative
    raise MissingFileError(f"{str(path)!r} is missing: fetch it with download=True (or --download), or "
                           f"save {URLS[relative]} there, or point data_dir/$GLASSFORMER_DATA at a copy")


def tinyshakespeare(data_dir: str | Path | None = None, download: bool = False) -> Path:
    """Path of tinyshakespeare's ``input.txt`` (1,115,394 characters; char-rnn's and nanoGPT's corpus)."""
    return corpus_file("tinyshakespeare/input.txt", data_dir, download)


def multi30k(split: str, data_dir: str | Path | None = None, download: bool = False) -> tuple[Path, Path]:
    """(German, English) files of a Multi30k task-1 split: "train" (29,000 pairs), "val" (1,014) or
    "test_2016_flickr" (1,000). One caption per line, gzip; cite Elliott et al. 2016."""
    check_choice("split", split, MULTI30K_SPLITS)
    de, en = (corpus_file(f"multi30k/{split}.{lang}.gz", data_dir, download) for lang in ("de", "en"))
    return de, en


def multi30k_pairs(split: str, data_dir: str | Path | None = None, download: bool = False) -> list[tuple[str, str]]:
    """The (German, English) sentence pairs of a Multi30k split."""
    return read_pairs(*multi30k(split, data_dir, download))


def read_fortunes(path: str | Path) -> list[str]:
    """The entries of a fortune file (separated by lines holding only ``%``), ANSI colour codes stripped."""
    text = ANSI_ESCAPE.sub("", read_text(path, "fortune file"))
    entries = [entry.strip("\n") for entry in re.split(r"^%\n", text + "\n", flags=re.MULTILINE)]
    return [entry for entry in entries if entry.strip()]


@dataclass
class Poem:
    """One poem of a fortune file: its title (without 《》), author and lines."""

    title: str
    author: str
    lines: list[str]


def tang_poems(path: str | Path = TANG300) -> list[Poem]:
    """The 313 Tang poems of Debian's ``fortunes-zh``: entries ``《title》``, ``作者：author``, then the lines."""
    if not Path(path).exists():
        raise MissingFileError(f"{str(path)!r} does not exist; install Debian's fortunes-zh "
                               "(apt-get install fortunes-zh) or pass the path of a copy")
    poems = []
    for number, entry in enumerate(read_fortunes(path), 1):
        lines = [line.strip() for line in entry.splitlines() if line.strip()]
        if len(lines) < 3 or not lines[0].startswith("《") or not lines[1].startswith("作者："):
            raise GlassformerError(f"{path}: entry {number} is not '《title》 / 作者：author / lines': {lines[:2]!r}")
        poems.append(Poem(lines[0].strip("《》"), lines[1].removeprefix("作者："), lines[2:]))
    return poems


def write_poem_text(poems: list[Poem], path: str | Path) -> Path:
    """Write the poems' lines as training text: one line per line of verse, a blank line between poems."""
    if not poems:
        raise GlassformerError("no poems to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "\n\n".join("\n".join(p.lines) for p in poems) + "\n", what="poem text")
    return path
