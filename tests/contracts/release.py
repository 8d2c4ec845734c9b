"""Released engine sources for the contract tests: fetch wheels, read definitions with `ast`.

Nothing here imports an engine. A wheel is fetched once with `pip download --no-deps` into a cache
outside the repository (REPLAY_WHEEL_CACHE, default ~/.cache/replay/wheels) and its Python files
are unpacked beside it; later runs read the unpacked tree. The readers turn the release's own
definitions (argparse calls, dataclass fields behind generated flags, Prometheus metric names,
request models) into plain sets and maps, and the `check_*` functions compare an adapter's names
with them, naming the release checked and the one the adapter was last checked against.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path

CACHE = Path(os.environ.get("REPLAY_WHEEL_CACHE", Path.home() / ".cache" / "replay" / "wheels"))
FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
METRIC_SUFFIXES = ("_total", "_sum", "_count", "_bucket", "_created")


def release_root(package: str, version: str) -> Path:
    """The unpacked Python files of `package==version` (downloaded and unpacked on first use)."""
    src = CACHE / "src" / f"{package}-{version}"
    if (src / ".unpacked").exists():
        return src
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(CACHE.glob(f"{package}-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
            + [f"{package}=={version}", "-d", str(CACHE)],
            check=True,
        )
        wheels = sorted(CACHE.glob(f"{package}-{version}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"pip download {package}=={version} left no wheel in {CACHE}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(src, [n for n in wheel.namelist() if n.endswith(".py")])
    (src / ".unpacked").touch()
    return src


@cache
def parse(path: Path) -> ast.Module:
    with warnings.catch_warnings():  # a release's own invalid escapes are not ours to report
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def py_files(root: Path, *subdirs: str) -> list[Path]:
    return sorted(p for d in subdirs for p in (root / d).rglob("*.py"))


def _annotation_type(node: ast.expr) -> str:
    """Source text of a field's type; for `Annotated[T, ...]` (SGLang's `A[T, help]`) just T."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name | ast.Attribute):
        name = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
        if name in ("A", "Annotated") and isinstance(node.slice, ast.Tuple):
            return ast.unparse(node.slice.elts[0])
    return ast.unparse(node)


def dataclass_fields(files: Iterable[Path], classes: set[str] | None = None) -> dict[str, str]:
    """{field name: type text} of the class-level annotated fields in `files` (only the named
    classes when given): where a release generates `--field-name` flags from them."""
    out: dict[str, str] = {}
    for path in files:
        for cls in ast.walk(parse(path)):
            if not isinstance(cls, ast.ClassDef) or (classes and cls.name not in classes):
                continue
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    out.setdefault(stmt.target.id, _annotation_type(stmt.annotation))
    return out


def argparse_flags(files: Iterable[Path]) -> dict[str, str | None]:
    """{flag: `type=` text or None} from every `add_argument("--flag", ...)` call in `files`."""
    out: dict[str, str | None] = {}
    for path in files:
        if "add_argument" not in path.read_text(encoding="utf-8"):
            continue  # parsing is the slow part: skip files that cannot hold a definition
        for node in ast.walk(parse(path)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "add_argument":
                continue
            kind = next((ast.unparse(k.value) for k in node.keywords if k.arg == "type"), None)
            for arg in node.args:
                if (
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and FLAG.match(arg.value)
                ):
                    out.setdefault(arg.value, kind)
    return out


def arg_aliases(files: Iterable[Path]) -> set[str]:
    """Flags named in `Arg(aliases=[...], cli_name=...)` metadata (SGLang's field options)."""
    out: set[str] = set()
    for path in files:
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Arg":
                for kw in node.keywords:
                    if kw.arg in ("aliases", "cli_name"):
                        out |= {
                            c.value
                            for c in ast.walk(kw.value)
                            if isinstance(c, ast.Constant) and isinstance(c.value, str)
                        }
    return out


def _is_arg(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Arg"


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def arg_field_flags(files: Iterable[Path]) -> dict[str, str]:
    """{flag: type text} of the dataclass fields SGLang turns into flags: those annotated
    `Annotated[T, Arg(...)]` or `Annotated[T, "help"]` (`A` is its alias there), under
    `Arg(cli_name=...)` or `--field-name`, leaving out `Arg(no_cli=True)`: what
    `sglang/srt/arg_groups/arg_utils.py` (`_unwrap_annotated`, the `no_cli` skip) registers."""
    out: dict[str, str] = {}
    for path in files:
        for cls in ast.walk(parse(path)):
            if not isinstance(cls, ast.ClassDef):
                continue
            for stmt in cls.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                ann = stmt.annotation
                if not (
                    isinstance(ann, ast.Subscript)
                    and getattr(ann.value, "id", "") in ("Annotated", "A")
                ):
                    continue
                parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
                meta = next((p for p in parts[1:] if _is_arg(p) or _is_text(p)), None)
                if meta is None:
                    continue
                kw = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
                no_cli = kw.get("no_cli")
                if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                    continue
                name = kw.get("cli_name")
                flag = (
                    name.value
                    if isinstance(name, ast.Constant) and isinstance(name.value, str)
                    else "--" + stmt.target.id.replace("_", "-")
                )
                out.setdefault(flag, _annotation_type(parts[0]))
    return out


def string_constants(
    files: Iterable[Path], pattern: re.Pattern[str], contains: str = ""
) -> set[str]:
    """Every string literal in `files` that matches `pattern` as a whole (only files whose text
    holds `contains` are parsed)."""
    return {
        node.value
        for path in files
        if contains in path.read_text(encoding="utf-8")
        for node in ast.walk(parse(path))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and pattern.match(node.value)
    }


def flags_of(sources: Iterable[Path], argv: Iterable[str]) -> set[str]:
    """The flags an adapter can emit: every flag literal in its `sources` and every flag of `argv`
    (a launch with its options set, for flags built from parts)."""
    return string_constants(sources, FLAG) | {a for a in argv if FLAG.match(a)}


def metric_names(files: Iterable[Path], prefix: str) -> set[str]:
    """Every `prefix:name` metric literal in `files` (an adapter's reads, or a release's names)."""
    return string_constants(files, re.compile(rf"^{prefix}:[a-z0-9_]+$"), f"{prefix}:")


def metric_kinds(files: Iterable[Path], prefix: str) -> dict[str, str]:
    """{`prefix:name`: counter | histogram | gauge | summary} for each metric a release creates
    with its name as a literal argument, the kind read from the constructor's name (vLLM's
    `self._counter_cls(...)`, SGLang's `Counter(...)`)."""
    literal = re.compile(rf"^{prefix}:[a-z0-9_]+$")
    kinds: dict[str, str] = {}
    for path in files:
        for call in ast.walk(parse(path)):
            if not isinstance(call, ast.Call):
                continue
            made = ast.unparse(call.func).lower()
            kind = next(
                (k for k in ("counter", "histogram", "gauge", "summary") if k in made), None
            )
            args = [*call.args, *(k.value for k in call.keywords)]
            for arg in args:
                if kind and isinstance(arg, ast.Constant) and literal.match(str(arg.value)):
                    kinds.setdefault(arg.value, kind)
    return kinds


def check_metric_kinds(
    read: Iterable[str],
    kinds: Mapping[str, str],
    *,
    adapter: str,
    engine: str,
    checked: str,
    pinned: str,
) -> list[str]:
    """One problem per metric the adapter reads with a suffix its kind does not expose: `_total`
    is a counter's, `_sum`/`_count`/`_bucket` a histogram's, none a gauge's. A counter turned
    histogram still has the name, and the `_total` the adapter reads would be missing."""
    wanted = {"_total": {"counter"}, "_sum": {"histogram", "summary"}}
    problems = []
    for name in sorted(set(read)):
        base = metric_base(name)
        suffix = name[len(base) :]
        kind = kinds.get(base) or kinds.get(name)
        allowed = wanted.get(suffix, {"histogram"} if suffix else {"gauge"})
        if kind is not None and kind not in allowed:
            problems.append(
                f"{adapter} reads {name} as a {'/'.join(sorted(allowed))}, which {engine} "
                f"{checked} makes a {kind} (the adapter was last checked against {engine} {pinned})"
            )
    return problems


def names_both_versions(
    problems: list[str], name: str, *, engine: str, checked: str, pinned: str
) -> bool:
    """Whether `problems` is the one problem about `name`, naming the release checked and the one
    the adapter was last checked against (what a user needs to find the change)."""
    return (
        len(problems) == 1
        and name in problems[0]
        and f"{engine} {checked}" in problems[0]
        and f"{engine} {pinned}" in problems[0]
    )


def metric_base(name: str) -> str:
    """A sample name without the suffix prometheus_client adds (`_total`, `_sum`, ...)."""
    for suffix in METRIC_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def method_params(path: Path, cls_name: str) -> dict[str, list[str]]:
    """{method: positional parameter names} of class `cls_name` in `path`."""
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            return {
                f.name: [a.arg for a in f.args.posonlyargs + f.args.args]
                for f in node.body
                if isinstance(f, ast.FunctionDef)
            }
    raise LookupError(f"{path}: no class {cls_name}")


def abstract_methods(path: Path, cls_name: str) -> set[str]:
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            return {
                f.name
                for f in node.body
                if isinstance(f, ast.FunctionDef)
                and any(ast.unparse(d).endswith("abstractmethod") for d in f.decorator_list)
            }
    raise LookupError(f"{path}: no class {cls_name}")


def check_flags(
    emitted: Iterable[str],
    defined: Mapping[str, str | None],
    *,
    adapter: str,
    engine: str,
    checked: str,
    pinned: str,
) -> list[str]:
    """One problem per flag the adapter emits that release `checked` does not define."""
    return _missing(
        emitted, defined.__contains__, f"{adapter} emits {{}}",
        "define in its argument definitions", engine, checked, pinned,
    )  # fmt: skip


def check_flag_types(
    expected: Mapping[str, str],
    defined: Mapping[str, str | None],
    *,
    engine: str,
    checked: str,
    pinned: str,
) -> list[str]:
    """One problem per flag whose declared type in release `checked` lacks the expected type."""
    problems = []
    for flag, kind in sorted(expected.items()):
        declared = defined.get(flag)
        if declared is None or not re.search(rf"\b{kind}\b", declared):
            problems.append(
                f"{engine} {checked} declares {flag} as {declared!r}, the adapter writes a {kind} "
                f"(as in {engine} {pinned})"
            )
    return problems


def check_metrics(
    read: Iterable[str],
    defined: set[str],
    *,
    adapter: str,
    engine: str,
    checked: str,
    pinned: str,
) -> list[str]:
    """One problem per metric the adapter reads that release `checked` does not define."""
    return _missing(
        read, lambda name: name in defined or metric_base(name) in defined,
        f"{adapter} reads metric {{}}", "define", engine, checked, pinned,
    )  # fmt: skip


def check_fields(
    sent: Iterable[str],
    defined: set[str],
    *,
    model: str,
    engine: str,
    checked: str,
    pinned: str,
) -> list[str]:
    """One problem per request or response field the adapter relies on that `model` of release
    `checked` does not declare (an unknown request field is dropped or refused by the server)."""
    return _missing(
        sent, defined.__contains__, f"the adapter relies on {model}.{{}}", "declare",
        engine, checked, pinned,
    )  # fmt: skip


def _missing(
    names: Iterable[str],
    is_defined: Callable[[str], bool],
    subject: str,
    verb: str,
    engine: str,
    checked: str,
    pinned: str,
) -> list[str]:
    """One problem per name that `is_defined` refuses, in name order: `subject` with the name in
    its `{}`, what release `checked` does not `verb`, and the release last checked against."""
    return [
        f"{subject.format(name)}, which {engine} {checked} does not {verb} "
        f"(the adapter was last checked against {engine} {pinned})"
        for name in sorted(set(names))
        if not is_defined(name)
    ]
