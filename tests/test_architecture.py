"""The layout rules ARCHITECTURE.md states, checked on the source: public seams only."""

import ast
import functools
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "im2rec"
MODULES = sorted(PACKAGE.rglob("*.py"))
#: Underscored names that are public all the same: NamedTuple's ``_replace``, ``_make`` and ``_asdict``, ``os._exit``,
#: and numpy's ``_reconstruct``, the global every pickled array (an insightface .bin) names.
PUBLIC_ANYWAY = {"_replace", "_make", "_asdict", "_exit", "_reconstruct"}


@functools.cache
def _tree(path: pathlib.Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_private_name_is_imported_from_another_module(path):
    found = [
        f"{path.name}:{node.lineno}: from .{node.module} import {alias.name}"
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert found == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_private_attribute_of_another_object_is_read(path):
    """``other._private`` only on ``self``/``cls``: another module's objects are used through
    their public names (a reader's bytes through ``source``/``words``/``buffer``, not ``_mm``)."""
    found = [
        f"{path.name}:{node.lineno}: .{node.attr}"
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and node.attr not in PUBLIC_ANYWAY
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert found == []


def test_format_constants_live_in_the_core_only():
    """The IRHeader struct, the length mask and the padding table are declared in recordio alone."""
    facts = ('"<IfQQ"', "(1 << 29) - 1", 'b"\\0\\0\\0"')
    found = [f"{p.name}: {fact}" for p in MODULES if p.name != "recordio.py" for fact in facts if fact in p.read_text(encoding="utf-8")]
    assert found == []


def _framing_arithmetic(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module computes a framing fact itself: a shift by 29 (the cflag), a mask of the
    29 length bits, ``IRHEADER_SIZE + 4 * ...`` (a header's size), ``8 + IRHEADER_SIZE`` (a part head)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.BinOp):
            continue
        ints = [side.value for side in (node.left, node.right) if isinstance(side, ast.Constant) and isinstance(side.value, int)]
        names = [side.id for side in (node.left, node.right) if isinstance(side, ast.Name)]
        if isinstance(node.op, ast.RShift) and 29 in ints:
            found.append((node.lineno, ">> 29: use recordio.cflag_of"))
        elif isinstance(node.op, ast.BitAnd) and ("LENGTH_MASK" in names or (1 << 29) - 1 in ints):
            found.append((node.lineno, "& LENGTH_MASK: use recordio.length_of"))
        elif isinstance(node.op, ast.Add) and "IRHEADER_SIZE" in names:
            other = node.right if isinstance(node.left, ast.Name) and node.left.id == "IRHEADER_SIZE" else node.left
            if isinstance(other, ast.BinOp) and isinstance(other.op, ast.Mult):
                found.append((node.lineno, "IRHEADER_SIZE + 4 * flag: use recordio.header_size"))
            elif isinstance(other, ast.Constant) and other.value == 8:
                found.append((node.lineno, "8 + IRHEADER_SIZE: use recordio.FRAME_HEAD_SIZE"))
    return found


@pytest.mark.parametrize("path", [p for p in MODULES if p.name != "recordio.py"], ids=lambda p: p.name)
def test_framing_facts_are_used_from_the_core_not_recomputed(path):
    assert [f"{path.name}:{line}: {what}" for line, what in _framing_arithmetic(_tree(path))] == []


def test_the_framing_check_finds_each_kind():
    """The check above cannot pass by finding nothing: each form it looks for is found."""
    source = "a = lrec >> 29\nb = lrec & LENGTH_MASK\nc = IRHEADER_SIZE + 4 * flag\nd = 8 + IRHEADER_SIZE\n"
    assert [line for line, _ in _framing_arithmetic(ast.parse(source))] == [1, 2, 3, 4]


# --------------------------------------------------------------------------- the layers of ARCHITECTURE.md

MAP = PACKAGE.parent / "ARCHITECTURE.md"
OUTSIDE_THE_LAYERS = {"", "__main__"}  # the package's public API (re-exports), and `python -m im2rec`


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _folder(module: str) -> str:
    """The folder a module lives in: ``storage`` for ``storage.urls`` and for ``storage`` itself, else ''."""
    top = module.split(".")[0]
    return top if (PACKAGE / top).is_dir() else ""


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Every module of im2rec -> the modules of im2rec it imports, anywhere in it (in functions too)."""
    modules = {_module_name(p): p for p in MODULES}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{target}.{alias.name}" if target else alias.name
                    found.add(sub if sub in modules else target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found |= {n.removeprefix("im2rec").lstrip(".") for n in names if n == "im2rec" or n.startswith("im2rec.")}
        graph[name] = found - {name}
    return graph


def read_layers(text: str) -> tuple[dict[str, int], list[str]]:
    """The numbered layers of the map: module -> layer number; and the rows longer than 20 words."""
    layers: dict[str, int] = {}
    long_rows = []
    number = 0
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        heading = re.match(r"^(\d+)\. ", line)
        row = re.match(r"^   - `([\w.]+)/?`: (.+)$", line)
        if heading:
            number = int(heading.group(1))
        elif row:
            assert row.group(1) not in layers, f"{row.group(1)} is listed twice"
            layers[row.group(1)] = number
            if len(row.group(2).split()) > 20:
                long_rows.append(row.group(1))
    return layers, long_rows


def layer_violations(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Imports that point up or sideways: a module may import lower layers, and its own folder."""
    found = []
    for module, imported in sorted(graph.items()):
        if module in OUTSIDE_THE_LAYERS:
            continue
        for other in sorted(imported - OUTSIDE_THE_LAYERS):
            if _folder(module) and _folder(module) == _folder(other):
                continue
            if layers[other] >= layers[module]:
                found.append(f"{module} (layer {layers[module]}) imports {other} (layer {layers[other]})")
    return found


def test_every_module_has_one_row_of_at_most_20_words_in_a_layer():
    layers, long_rows = read_layers(MAP.read_text(encoding="utf-8"))
    assert sorted(set(import_graph()) - OUTSIDE_THE_LAYERS - set(layers)) == []  # every module is on the map
    assert sorted(set(layers) - set(import_graph())) == []  # and the map names no module that is not there
    assert long_rows == []


def test_imports_point_down_the_layers():
    layers, _ = read_layers(MAP.read_text(encoding="utf-8"))
    assert layer_violations(import_graph(), layers) == []


def test_the_layer_check_finds_an_upward_and_a_sideways_import():
    layers = {"errors": 1, "recordio": 3, "lst": 4, "image": 4, "storage": 2, "storage.urls": 2}
    graph = {"errors": {"recordio"}, "lst": {"image", "recordio"}, "storage.urls": {"storage", "errors"}, "recordio": {"storage.urls"}}
    assert layer_violations(graph, layers) == ["errors (layer 1) imports recordio (layer 3)", "lst (layer 4) imports image (layer 4)"]


def test_the_flow_is_ten_lines_and_every_folder_is_a_package():
    flow = MAP.read_text(encoding="utf-8").split("## The flow", 1)[1].split("```")[1].strip().splitlines()
    assert len(flow) <= 10
    folders = {p.parent for p in MODULES}
    assert sorted(str(f) for f in folders if not (f / "__init__.py").exists()) == []  # else the wheel leaves it out


def test_the_errors_the_readme_names_are_the_packages():
    """The README says readers raise ImageError and StorageError: a user catches them as im2rec's."""
    import im2rec
    from im2rec import errors

    assert (im2rec.ImageError, im2rec.StorageError) == (errors.ImageError, errors.StorageError)
    assert {"Im2recError", "ImageError", "StorageError"} <= set(im2rec.__all__)
