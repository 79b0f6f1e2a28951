"""Other writers' files, damaged: every reader refuses in words or skips what is lost, never a traceback.

A property-based harness (hypothesis): a real export of each format (and a `.rec`'s `.idx`, a
`.lst`, a shard manifest) is damaged at random (cut short, a byte flipped, four bytes made a
huge number: a length that lies) and read back by the command a user would run. Whatever the
damage, the command ends with exit status 0 (what is damaged skipped and listed) or 1 with one
`Error: ...` line naming the file, raises no exception of its own (a traceback), ends within
the deadline, and allocates no more than a bounded amount (a length taken from the file
without checking it against the file would allocate gigabytes).
"""

import shutil
import tracemalloc

import pytest
from conftest import DATA, deadline, run
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

SOURCE = DATA / "im2rec_pack_pass" / "all.rec"
MEMORY = 200 * 2**20  # bytes Python may allocate while reading a damaged source of 0.2 MB
FORMATS = ["webdataset", "parquet", "mds", "litdata"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A real export of the golden pass-through pack in each format whose writer is here."""
    base = tmp_path_factory.mktemp("exports")
    made = {}
    for fmt in FORMATS:
        result = run("export", SOURCE, base / fmt, "--format", fmt, "--shard-size", "64KB")
        if result.exit_code == 0:
            made[fmt] = base / fmt
    assert {"webdataset", "parquet", "mds"} <= set(made), made
    return made


DAMAGE = st.tuples(st.sampled_from(["cut", "flip", "lie"]), st.floats(0, 1, exclude_max=True), st.integers(0, 255), st.sampled_from([2**31 - 1, 2**32 - 1, 2**40, 2**63 - 1]))


def damage(path, how):
    """Damage the file ``path`` in place: cut it short, flip a byte, or make 4 (or 8) bytes a huge number."""
    kind, where, value, huge = how
    data = bytearray(path.read_bytes())
    if not data:
        return
    at = int(where * len(data))
    if kind == "cut":
        del data[at:]
    elif kind == "flip":
        data[at] ^= value or 0xFF
    else:
        width = 8 if huge > 2**32 else 4
        data[at : at + width] = huge.to_bytes(8, "little")[:width]
    path.write_bytes(bytes(data))


def refused_in_words(result, named):
    """The invariant: exit 0 or 1; no exception of its own; every line on stderr is an
    ``Error: ...``, a ``warning: ...`` or a report line that starts with the file it is about,
    and a failed command names one of the files ``named``."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"a traceback: {result.exception!r}") from result.exception
    assert result.exit_code in (0, 1), (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    for line in lines:
        assert line.startswith(("Error: ", "warning: ", "/")), result.stderr
    if result.exit_code == 1:
        assert lines and any(name in line for line in lines for name in named), (result.stderr, named)


def _read_with_bounds(args):
    tracemalloc.start()
    try:
        with deadline(60, f"im2rec {' '.join(map(str, args))}"):
            result = run(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY, f"{peak:,} bytes allocated"
    return result


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pick=st.floats(0, 1, exclude_max=True), how=DAMAGE)
def test_import_of_a_damaged_export(exports, tmp_path_factory, fmt, pick, how):
    if fmt not in exports:
        pytest.skip(f"no {fmt} writer here")
    work = tmp_path_factory.mktemp(fmt)
    src = work / "src"
    shutil.copytree(exports[fmt], src)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    target = files[int(pick * len(files))]
    damage(target, how)
    result = _read_with_bounds(["import", src, work / "out.rec", "--format", fmt, "-q"])
    refused_in_words(result, [str(src), target.name])


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["rec", "idx", "lst"]), how=DAMAGE)
def test_commands_on_a_damaged_rec_idx_or_lst(tmp_path_factory, which, how):
    """verify, inspect, extract and export of a damaged .rec or .idx, and a pack of a damaged .lst."""
    work = tmp_path_factory.mktemp("rec")
    for ext in ("rec", "idx", "lst"):
        shutil.copy(SOURCE.with_suffix(f".{ext}"), work / f"all.{ext}")
    damage(work / f"all.{which}", how)
    rec = work / "all.rec"
    if which == "lst":
        result = _read_with_bounds(["pack", work / "all.lst", DATA / "tree", work / "o.rec", "--pass-through", "-q"])
        refused_in_words(result, ["all.lst", "o.failed.tsv"])  # a list whose lines name no image: they fail, listed
        return
    for args in (["verify", rec], ["inspect", rec], ["extract", rec, work / "x", "--overwrite"], ["export", rec, work / "w", "--format", "webdataset", "--overwrite"]):
        result = _read_with_bounds(args)
        refused_in_words(result, ["all.rec", "all.idx"])


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=DAMAGE)
def test_a_damaged_shard_manifest(tmp_path_factory, how):
    work = tmp_path_factory.mktemp("manifest")
    result = run("pack", DATA / "im2rec" / "all.lst", DATA / "tree", work / "s.rec", "--pass-through", "--shard-size", "60KB", "-q")
    assert result.exit_code == 0, result.output
    damage(work / "s.shards.json", how)
    for args in (["export", work / "s.shards.json", work / "w", "--format", "webdataset"], ["verify", work / "s.shards.json"]):
        result = _read_with_bounds(args)
        refused_in_words(result, ["s.shards.json", "s-0000"])


FACES = DATA / "insightface"


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["py3.bin", "py2.bin", "ndarray.bin", "property", "train.idx"]), how=DAMAGE)
@example(which="py3.bin", how=("flip", 0.0, 22, 2**31 - 1))  # PROTO became BYTEARRAY8: its length, 2.7 GB, was allocated
def test_a_damaged_face_set_or_verification_set(tmp_path_factory, which, how):
    """insightface's files: a .bin (a restricted unpickler reads it), property, the .idx."""
    work = tmp_path_factory.mktemp("faces")
    for name in ("train.rec", "train.idx", "property", "py3.bin", "py2.bin", "ndarray.bin"):
        shutil.copy(FACES / name, work / name)
    damage(work / which, how)
    if which.endswith(".bin"):
        result = _read_with_bounds(["bin", "extract", work / which, work / "pairs"])
        refused_in_words(result, [which])
    else:
        for args in (["export", work / "train.rec", work / "w", "--format", "webdataset", "--overwrite"], ["convert", work / "train.rec", work / "plain.rec", "--layout", "plain", "--overwrite"]):
            result = _read_with_bounds(args)
            refused_in_words(result, ["train.rec", "train.idx", "property"])


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=DAMAGE)
def test_a_damaged_resume_file(tmp_path_factory, how):
    """An interrupted pack (stopped by --max-errors) leaves OUT.resume.json: damaged, --resume says so."""
    work = tmp_path_factory.mktemp("resume")
    lines = (DATA / "im2rec" / "all.lst").read_text().splitlines(keepends=True)
    (work / "l.lst").write_text("".join(lines[:6]) + "99\t0.000000\tgone.jpg\n" + "".join(lines[6:]))
    result = run("pack", work / "l.lst", DATA / "tree", work / "o.rec", "--pass-through", "--max-errors", "0", "-q")
    assert result.exit_code == 1 and (work / "o.resume.json").exists(), result.output
    damage(work / "o.resume.json", how)
    result = _read_with_bounds(["pack", work / "l.lst", DATA / "tree", work / "o.rec", "--pass-through", "--resume", "-q"])
    refused_in_words(result, ["o.resume.json", "o.rec", "o.failed.tsv"])


# --------------------------------------------------------------------------- the cases the trial found, exactly


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_im2rec_json_that_is_not_json(exports, tmp_path, fmt):
    if fmt not in exports:
        pytest.skip(f"no {fmt} writer here")
    shutil.copytree(exports[fmt], tmp_path / "src")
    (tmp_path / "src" / "im2rec.json").write_text("{not json")
    result = run("import", tmp_path / "src", tmp_path / "o.rec", "--format", fmt)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr == (
        f"Error: {tmp_path / 'src' / 'im2rec.json'}: not JSON (Expecting property name enclosed in double quotes at line 1 column 2): "
        "an export's im2rec.json is damaged; remove it to read the shards without it\n"
    )


@pytest.mark.parametrize("how", ["cut", "footer length"])
def test_a_damaged_parquet_file(exports, tmp_path, how):
    shutil.copytree(exports["parquet"], tmp_path / "src")
    shard = sorted((tmp_path / "src").glob("*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    if how == "cut":
        del data[len(data) // 2 :]
    else:  # the footer's length (the 4 bytes before the closing PAR1) claims more than the file
        data[-8:-4] = (len(data) * 4).to_bytes(4, "little")
    shard.write_bytes(bytes(data))
    result = run("import", tmp_path / "src", tmp_path / "o.rec", "--format", "parquet")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.startswith(f"Error: {shard}: not a readable Parquet file: ") and result.stderr.count("\n") == 1
