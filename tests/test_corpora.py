"""Corpus loaders: local layouts, no network (downloads are tested with file:// URLs), fortune parsing."""

import gzip
from pathlib import Path

import pytest

from glassformer.recipes import corpora

FORTUNE = ("\x1b[32m《静夜思》\x1b[m\n\x1b[33m作者：李白\x1b[m\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n%\n"
           "\x1b[32m《登鹳雀楼》\x1b[m\n\x1b[33m作者：王之涣\x1b[m\n白日依山尽，黄河入海流。\n欲穷千里目，更上一层楼。\n")


def write_gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def test_multi30k_reads_a_local_layout(tmp_path):
    write_gz(tmp_path / "multi30k/val.de.gz", ["Ein Hund läuft.", "Zwei Männer."])
    write_gz(tmp_path / "multi30k/val.en.gz", ["A dog runs.", "Two men."])
    assert corpora.multi30k_pairs("val", tmp_path) == [("Ein Hund läuft.", "A dog runs."), ("Zwei Männer.", "Two men.")]


def test_missing_file_names_the_url_and_does_not_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="raw.githubusercontent.com/multi30k"):
        corpora.multi30k("val", tmp_path)
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match="split must be one of"):
        corpora.multi30k("test", tmp_path)


def test_tinyshakespeare_is_shipped(tmp_path):
    path = corpora.tinyshakespeare(tmp_path)  # not in the data folder: the package's copy, no network
    text = path.read_text(encoding="utf-8")
    assert len(text) == 1_115_394 and len(set(text)) == 65 and text.startswith("First Citizen:")
    assert not any(tmp_path.iterdir())


def test_data_dir_defaults_to_the_environment(tmp_path, monkeypatch):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare/input.txt").write_text("First Citizen:\n")
    monkeypatch.setenv("GLASSFORMER_DATA", str(tmp_path))
    assert corpora.tinyshakespeare() == tmp_path / "tinyshakespeare/input.txt"


def test_download_fetches_into_the_cache_atomically(tmp_path, monkeypatch):
    source = tmp_path / "mirror.txt"
    source.write_text("Before we proceed any further, hear me speak.\n")
    monkeypatch.setitem(corpora.URLS, "tinyshakespeare/input.txt", source.as_uri())
    path = corpora.tinyshakespeare(tmp_path / "cache", download=True)
    assert path.read_text() == source.read_text()
    assert [p.name for p in path.parent.iterdir()] == ["input.txt"]  # no .partial left behind


def test_failed_download_leaves_nothing(tmp_path):
    with pytest.raises(OSError):
        corpora.download((tmp_path / "absent.txt").as_uri(), tmp_path / "out" / "x.txt")
    assert list((tmp_path / "out").iterdir()) == []


def test_tang_poems_strip_colour_codes(tmp_path):
    path = tmp_path / "tang"
    path.write_text(FORTUNE, encoding="utf-8")
    poems = corpora.tang_poems(path)
    assert [(p.title, p.author) for p in poems] == [("静夜思", "李白"), ("登鹳雀楼", "王之涣")]
    assert poems[0].lines == ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。"]
    text = corpora.write_poem_text(poems, tmp_path / "out.txt").read_text(encoding="utf-8")
    assert "\x1b" not in text and "作者" not in text
    assert text.startswith("床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n\n白日依山尽")


def test_malformed_fortune_entry_is_named(tmp_path):
    path = tmp_path / "bad"
    path.write_text("just a quotation\n%\n", encoding="utf-8")
    with pytest.raises(ValueError, match="entry 1 is not"):
        corpora.tang_poems(path)
    with pytest.raises(FileNotFoundError, match="fortunes-zh"):
        corpora.tang_poems(tmp_path / "absent")


def test_the_installed_tang300_has_313_poems():
    if not corpora.TANG300.exists():
        pytest.skip("fortunes-zh is not installed (.ci/system-deps installs it)")
    poems = corpora.tang_poems()
    assert len(poems) == 313
    assert all("\x1b" not in line for p in poems for line in p.lines)


def test_the_shared_copies_match_the_documented_sizes(shared_data):
    assert len(corpora.tinyshakespeare(shared_data).read_text(encoding="utf-8")) == 1_115_394
    assert [len(corpora.multi30k_pairs(s, shared_data)) for s in corpora.MULTI30K_SPLITS] == [29_000, 1_014, 1_000]
