"""The layout rules ARCHITECTURE.md states, checked on the source: public seams only."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "im2rec"
MODULES = sorted(PACKAGE.rglob("*.py"))
#: Underscored names that are public all the same: NamedTuple's ``_replace``, ``_make`` and ``_asdict``, ``os._exit``,
#: and numpy's ``_reconstruct``, the global every pickled array (an insightface .bin) names.
PUBLIC_ANYWAY = {"_replace", "_make", "_asdict", "_exit", "_reconstruct"}


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
