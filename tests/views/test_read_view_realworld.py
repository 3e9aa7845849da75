"""read_view on real-world files: BOMs, compressed CSV, encodings, integers beyond 64 bits,
truncated / corrupt parquet, dictionary-encoded strings."""
from __future__ import annotations

import bz2
import gzip

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fbrapids  # noqa: F401
from fbrapids import ops, read_view
from fbrapids.errors import ViewError

pytestmark = pytest.mark.cpu_only(reason="asserts the host reader's pandas dtypes, decompression and messages (compressed files are read on the host on every backend)")

CSV = "user_id,q\n1,a b\n2,c\n"


def test_utf8_bom_is_dropped_from_the_header(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + CSV.encode())
    for frame in (read_view(path, eager=True), read_view(path).compute()):
        assert list(frame.columns) == ["user_id", "q"] and frame["user_id"].tolist() == [1, 2]
    assert read_view(path, columns=["user_id"], eager=True)["user_id"].tolist() == [1, 2]


@pytest.mark.parametrize("suffix,writer", [
    (".csv.gz", gzip.compress), (".csv.bz2", bz2.compress), (".csv.zst", "zstd")])
def test_compressed_csv_inferred_from_suffix_or_named(tmp_path, suffix, writer):
    path = tmp_path / f"v{suffix}"
    if writer == "zstd":
        with pa.CompressedOutputStream(str(path), "zstd") as fh:
            fh.write(CSV.encode())
    else:
        path.write_bytes(writer(CSV.encode()))
    assert read_view(path, eager=True).to_dict("list") == {"user_id": [1, 2], "q": ["a b", "c"]}
    assert read_view(tmp_path / f"*{suffix}").compute()["q"].tolist() == ["a b", "c"]
    renamed = tmp_path / "plain.csv"
    renamed.write_bytes(path.read_bytes())
    named = {".csv.gz": "gzip", ".csv.bz2": "bz2", ".csv.zst": "zstd"}[suffix]
    assert read_view(renamed, compression=named, eager=True)["user_id"].tolist() == [1, 2]
    with pytest.raises(ViewError, match="plain.csv"):
        read_view(renamed, eager=True)  # compressed bytes read as plain text: an error naming the file


def test_encoding_option(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("city,n\nZürich,1\nS\xe3o Paulo,2\n".encode("latin-1"))
    assert read_view(path, encoding="latin-1", eager=True)["city"].tolist() == ["Zürich", "São Paulo"]


def test_integer_beyond_64_bits_is_reported_with_its_row_and_text(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("id,x\n1,a\n18446744073709551615,b\n18446744073709551616,c\n")
    with pytest.raises(ViewError, match=r"big.csv: column 'id' row 2 .*'18446744073709551616' is outside the 64-bit"):
        read_view(path, eager=True)
    ok = tmp_path / "ok.csv"
    ok.write_text("id\n18446744073709551615\n1\n")
    assert read_view(ok, eager=True)["id"].tolist() == [2**64 - 1, 1]
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("id\n-1\n9223372036854775808\n")
    with pytest.raises(ViewError, match=r"row 1 .*'9223372036854775808' needs uint64, but row 0 holds the negative '-1'"):
        read_view(mixed, eager=True)


def test_truncated_and_corrupt_parquet_name_the_file(tmp_path):
    good = tmp_path / "a.parquet"
    pd.DataFrame({"x": np.arange(1000)}).to_parquet(good)
    truncated = tmp_path / "b.parquet"
    truncated.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(ViewError, match=r"b.parquet is not a readable parquet file"):
        read_view(tmp_path / "*.parquet")
    garbage = tmp_path / "c.parquet"
    garbage.write_bytes(b"\x00" * 100)
    with pytest.raises(ViewError, match=r"c.parquet is not a readable parquet file"):
        read_view(garbage, eager=True)


def test_parquet_corrupted_after_planning_names_it_at_read_time(tmp_path):
    path = tmp_path / "late.parquet"
    pd.DataFrame({"x": np.arange(1000)}).to_parquet(path)
    view = read_view(path)
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data[:8]) + b"\xff" * (len(data) - 16) + bytes(data[-8:]))  # same footer, pages garbage
    with pytest.raises((ViewError, OSError), match="late.parquet"):
        view.compute()


def test_dictionary_encoded_strings_clean_join_and_extract(tmp_path):
    path = tmp_path / "dict.parquet"
    table = pa.table({"k": [1, 2, 3], "city": pa.array(["Paris", None, "Oslo"]).dictionary_encode()})
    pq.write_table(table, path)
    right = pd.DataFrame({"city": ["Paris", "unk"], "pop": [2, 0]})
    for frame in (read_view(path, eager=True), read_view(path)):
        cleaned = frame.fbx.clean(fill={"city": "unk"})
        out = cleaned.fbx.join(right, on="city").fbx.extract(h=ops.hash_bucket("city", 100), u=ops.lower("city"))
        out = out.compute() if hasattr(out, "compute") else out
        out = out.sort_values("k")
        assert out["city"].astype(str).tolist() == ["Paris", "unk", "Oslo"]
        assert out["pop"].isna().tolist() == [False, False, True] and out["pop"].iloc[:2].tolist() == [2, 0]
        assert out["u"].tolist() == ["paris", "unk", "oslo"]
        plain = pd.DataFrame({"city": ["Paris", "unk", "Oslo"]}).fbx.extract(h=ops.hash_bucket("city", 100))
        assert out["h"].tolist() == plain["h"].tolist()
