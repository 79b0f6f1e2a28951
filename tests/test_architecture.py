"""The layout rules ARCHITECTURE.md states, checked on the source: public seams only."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "im2rec"
MODULES = sorted(PACKAGE.glob("*.py"))
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
