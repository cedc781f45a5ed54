"""Reading text files (plain, .gz, .zst) with one-line errors: missing, empty, a folder, not UTF-8."""

import gzip
import io
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import BadFileError, GlassformerError, MissingFileError, UsageError
from ..io.checks import first_line

CHUNK_CHARS = 1 << 22
LONG_LINE_CHARS = 1 << 20  # a line longer than this is cut (before a space) rather than held whole


def check_file(path: str | Path, what: str = "corpus file") -> Path:
    """``path`` as a Path; FileNotFoundError / ValueError naming it when missing, a folder or empty."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"{what} {str(path)!r} does not exist")
    if path.is_dir():
        raise GlassformerError(f"{what} {str(path)!r} is a folder; expected a text file")
    if path.stat().st_size == 0:
        raise GlassformerError(f"{what} {str(path)!r} is empty")
    return path


def iter_text(path: str | Path, chunk_chars: int = CHUNK_CHARS, what: str = "corpus file") -> Iterator[str]:
    """The text of ``path`` in pieces of about ``chunk_chars`` characters, each cut after a newline (a
    line longer than :data:`LONG_LINE_CHARS` before its last space), never holding the whole file.
    A missing, empty, non-UTF-8 or whitespace-only file is a one-line error."""
    path = check_file(path, what)
    carry, seen_text = "", False
    with io.TextIOWrapper(open_binary(path), encoding="utf-8", newline="") as handle:
        while True:
            try:
                piece = handle.read(chunk_chars)
            except UnicodeDecodeError as error:
                raise BadFileError(f"file {str(path)!r} is not UTF-8 text: byte 0x{error.object[error.start]:02x} "
                                   f"cannot be decoded ({error.reason})") from None
            except (OSError, EOFError, zlib.error) as error:
                reason = first_line(error)[:200]
                kind = {".gz": "gzip ", ".zst": "zstd "}.get(path.suffix.lower(), "")
                raise BadFileError(f"cannot read {what} {str(path)!r}: {reason} (a corrupt or truncated "
                                   f"{kind}file?)") from None
            if not piece:
                break
            seen_text = seen_text or bool(piece.strip())
            piece = carry + piece
            cut = piece.rfind("\n") + 1
            if cut == 0 and len(piece) >= max(chunk_chars, LONG_LINE_CHARS):  # one long line: cut elsewhere
                cut = max(piece.rfind(" "), piece.rfind("\t"))  # the space starts the next piece (BPE's " word")
                cut = cut if cut > 0 else len(piece)
            if cut == 0:
                carry = piece
                continue
            carry = piece[cut:]
            yield piece[:cut]
    if not seen_text:
        raise GlassformerError(f"{what} {str(path)!r} has no text (only whitespace)")
    if carry:
        yield carry


def open_binary(path: Path) -> io.BufferedIOBase:
    """``path`` opened for reading bytes, through gzip (``.gz``) or zstandard (``.zst``, an optional extra)."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix != ".zst":
        return open(path, "rb")  # noqa: SIM115 (the caller's with closes it)
    try:
        import zstandard
    except ImportError:
        raise UsageError(f"{str(path)!r} is zstd-compressed: install the extra (pip install "
                         "'glassformer[data]', or zstandard)") from None
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))


def read_text(path: str | Path, what: str = "corpus file") -> str:
    """The whole text of a UTF-8 file (plain or .gz), with the errors of :func:`iter_text`."""
    return "".join(iter_text(path, what=what))


def read_lines(path: str | Path, what: str = "file") -> list[str]:
    """The lines of a UTF-8 text file (plain or .gz) without their line endings."""
    return read_text(path, what).splitlines()
