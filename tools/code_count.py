"""Count what a reader meets in src/: code lines, `raise` statements, and check code against model math.

The counts the issue on declaring the block once (43) asks to be rerunnable:

- **code lines**: lines of src/**/*.py that hold a Python token, without comments, blank lines and
  docstrings (a string that is the first statement of a module, class or function);
- **raises**: `raise` statements;
- **check lines**: code lines that only check: a `raise` statement, an `if` block whose body only
  raises, a statement that calls a `check_*` function, and the body of a function named `check_*` or
  `_check_*`;
- **model math**: code lines of `nn/` and `models/` that are not check lines.

    python tools/code_count.py [--src src/glassformer] [--json out.json]

Prints one table line per package and the totals; `--json` also writes them. A last line sets apart the
files of the features added since 6ed5783 (issues 44-46: :data:`ADDED`), so the code of the features
6ed5783 had can be held against that issue's goal (14,101 code lines then, at least 1,000 fewer now). The
split is by whole file: lines those issues (and issue 47) added to older files count as old features.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATH = ("nn", "models")  # the packages whose code is the model's math
# Files (or folders) of the features added after 6ed5783, relative to src/glassformer: transcoders, attribution
# graphs and their verbs and page (issue 44); prepare/shards/sources and their verb (45); bfloat16 attention,
# huge pages, loss series (46).
ADDED = ("interpret/transcoders", "interpret/graph", "cli/commands/graph.py", "cli/commands/transcoders.py",
         "viz/report_graph.py", "data/prepare.py", "data/shards.py", "data/sources.py", "cli/commands/prepare.py",
         "runtime/attention.py", "runtime/pages.py", "training/series.py")
GOAL = 14_101 - 1_000  # issue 43: the features 6ed5783 had, at least 1,000 code lines fewer than its 14,101
SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
        tokenize.ENCODING, tokenize.ENDMARKER}


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of every module, class and function docstring."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def _span(node: ast.AST) -> set[int]:
    return set(range(node.lineno, node.end_lineno + 1))


def _calls_check(node: ast.AST) -> bool:
    """Whether a statement's own expression calls a function named check_* (not inside nested blocks)."""
    value = getattr(node, "value", None)
    if not isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return)) or value is None:
        return False
    for sub in ast.walk(value):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name.startswith(("check_", "_check_")):
                return True
    return False


def _is_check(node: ast.AST) -> bool:
    """A raise, a statement calling check_*, an `if` whose body only raises, or a check_* function."""
    if isinstance(node, ast.If):
        return bool(node.body) and all(isinstance(s, ast.Raise) for s in node.body) and not node.orelse
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name.startswith(("check_", "_check_"))
    return isinstance(node, ast.Raise) or _calls_check(node)


def _check_lines(tree: ast.AST) -> set[int]:
    """Line numbers of check code (see the module docstring)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if _is_check(node):
            lines |= _span(node)
    return lines


def count_file(path: Path) -> dict[str, int | set[int]]:
    """Code lines, raise count and check lines of one file."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in SKIP:
            code.update(range(token.start[0], token.end[0] + 1))
    code -= _docstring_lines(tree)
    raises = sum(isinstance(node, ast.Raise) for node in ast.walk(tree))
    return {"code": code, "raises": raises, "checks": _check_lines(tree) & code}


def count_tree(src: Path) -> dict:
    """Per top-level package (or root module) and in total: code lines, raises, check lines, math lines."""
    packages: dict[str, dict[str, int]] = {}
    added = 0
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        name = rel.parts[0] if len(rel.parts) > 1 else "(root)"
        counted = count_file(path)
        if any(rel.as_posix() == a or rel.as_posix().startswith(a + "/") for a in ADDED):
            added += len(counted["code"])
        row = packages.setdefault(name, {"code_lines": 0, "raises": 0, "check_lines": 0, "math_lines": 0})
        row["code_lines"] += len(counted["code"])
        row["raises"] += counted["raises"]
        row["check_lines"] += len(counted["checks"])
        if name in MATH:
            row["math_lines"] += len(counted["code"] - counted["checks"])
    total = {key: sum(row[key] for row in packages.values())
             for key in ("code_lines", "raises", "check_lines", "math_lines")}
    total["check_to_math"] = round(total["check_lines"] / max(total["math_lines"], 1), 2)
    total["added_feature_lines"] = added
    total["old_feature_lines"] = total["code_lines"] - added
    return {"src": str(src), "packages": packages, "total": total}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src" / "glassformer")
    parser.add_argument("--json", type=Path, default=None, help="also write the counts here")
    args = parser.parse_args(argv)
    counts = count_tree(args.src)
    print(f"{'package':<14} {'code':>7} {'raises':>7} {'checks':>7} {'math':>6}")
    for name, row in sorted(counts["packages"].items()):
        print(f"{name:<14} {row['code_lines']:>7} {row['raises']:>7} {row['check_lines']:>7} {row['math_lines']:>6}")
    t = counts["total"]
    print(f"{'total':<14} {t['code_lines']:>7} {t['raises']:>7} {t['check_lines']:>7} {t['math_lines']:>6}"
          f"   check : math = {t['check_to_math']} : 1")
    print(f"features added since 6ed5783 (ADDED): {t['added_feature_lines']}; the features 6ed5783 had: "
          f"{t['old_feature_lines']} (goal <= {GOAL:,})")
    if args.json:
        args.json.write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
