"""lookbench_pipeline.memo: the digests a stage's fingerprint is made of, and the record of what it was last
computed from."""

import os
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from lookbench_pipeline.memo import (MemoStore, code_digest, files_digest, fingerprint, json_digest, table_digest,
                                     value_digest)


def _table(n=1000):
    return pa.table({"id": [f"item-{i}" for i in range(n)], "score": [i / 7 for i in range(n)],
                     "seen": [datetime(2026, 12, 1, tzinfo=timezone.utc)] * n,
                     "tags": [["a", "b"] if i % 3 else None for i in range(n)]})


def test_a_table_has_the_same_digest_in_any_chunking_and_after_a_parquet_round_trip(tmp_path):
    t = _table()
    chunked = pa.concat_tables([t.slice(0, 10), t.slice(10, 500), t.slice(510)])
    assert chunked.column(0).num_chunks == 3
    assert table_digest(chunked) == table_digest(t)
    pq.write_table(t, tmp_path / "t.parquet")
    assert table_digest(pq.read_table(tmp_path / "t.parquet")) == table_digest(t)


def test_any_change_of_a_value_or_the_schema_changes_a_table_digest():
    t = _table()
    d = table_digest(t)
    changed = t.set_column(1, "score", pa.array([99.0] + t["score"].to_pylist()[1:]))
    assert table_digest(changed) != d
    assert table_digest(t.slice(1)) != d  # a row fewer
    assert table_digest(t.rename_columns(["id", "value", "seen", "tags"])) != d
    assert table_digest(t.set_column(0, "id", t["id"].cast(pa.large_string()))) != d


def test_json_digest_is_canonical_and_equal_for_a_dict_and_its_json_file_read_back():
    import json

    a = {"b": 1, "a": [1, 2, {"z": None}], "when": datetime(2026, 1, 1, tzinfo=timezone.utc)}
    b = {"a": [1, 2, {"z": None}], "b": 1, "when": datetime(2026, 1, 1, tzinfo=timezone.utc)}
    assert json_digest(a) == json_digest(b)
    assert json_digest(json.loads(json.dumps(a, indent=1, sort_keys=True, default=str))) == json_digest(a)
    assert json_digest({**a, "b": 2}) != json_digest(a)
    assert value_digest(None) == "none" and value_digest(_table()) == table_digest(_table())


def test_files_digest_sees_an_edit_an_added_file_a_removed_file_and_a_missing_path(tmp_path):
    tree = tmp_path / "legacy"
    (tree / "img").mkdir(parents=True)
    (tree / "img" / "a.jpg").write_bytes(b"a" * 10)
    (tree / "list.txt").write_text("a\n")
    d0 = files_digest([tree])
    assert files_digest([tree]) == d0  # stable
    (tree / "img" / "b.jpg").write_bytes(b"b")
    d1 = files_digest([tree])
    assert d1 != d0
    st = (tree / "list.txt").stat()
    (tree / "list.txt").write_text("b\n")  # same size, content edited: the modification time moves
    os.utime(tree / "list.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    d2 = files_digest([tree])
    assert d2 != d1
    st2 = (tree / "list.txt").stat()
    (tree / "list.txt").write_text("c\n")  # edited, then size and modification time set back by hand
    os.utime(tree / "list.txt", ns=(st2.st_atime_ns, st2.st_mtime_ns))
    assert (tree / "list.txt").stat().st_mtime_ns == st2.st_mtime_ns
    d3 = files_digest([tree])
    assert d3 != d2, "the status-change time moves"
    (tree / "img" / "b.jpg").unlink()
    assert files_digest([tree]) not in (d1, d2, d3)
    assert files_digest([tmp_path / "nowhere"]) != files_digest([])
    assert files_digest([None]) == files_digest([])


def test_code_digest_is_stable_within_a_process_and_names_the_extra_folders(tmp_path):
    (tmp_path / "stage.py").write_text("X = 1\n")
    d = code_digest(tmp_path)
    assert len(d) == 64 and code_digest(tmp_path) == d
    assert code_digest() != d  # the extra folder is part of it
    code_digest.cache_clear()
    (tmp_path / "stage.py").write_text("X = 2\n")
    assert code_digest(tmp_path) != d


def test_a_record_round_trips_and_names_the_parts_that_changed(tmp_path):
    memo = MemoStore(tmp_path / "memo")
    assert memo.get("evaluation", "2026-07-01") is None
    parts = {"code": "c1", "config": "k1", "input:release": "r1"}
    rec = memo.put("evaluation", "2026-07-01", parts, "run-1", {"metadata": {"evaluation": "{}"}})
    got = memo.get("evaluation", "2026-07-01")
    assert got == rec and got.fingerprint == fingerprint(parts) == fingerprint(dict(reversed(parts.items())))
    assert got.changed(parts) == []
    assert got.changed({**parts, "config": "k2", "reads": "f"}) == ["config", "reads"]
    assert memo.get("evaluation", "2026-01-01") is None  # another partition
    memo.put("evaluation", "2026-07-01", {**parts, "code": "c2"}, "run-2")
    assert memo.get("evaluation", "2026-07-01").run_id == "run-2"  # the last record wins
    memo.forget("evaluation", "2026-07-01")
    assert memo.get("evaluation", "2026-07-01") is None


def test_an_unreadable_record_reads_as_none(tmp_path):
    memo = MemoStore(tmp_path)
    memo.put("detect_garments", "a|b", {"code": "c"}, "run-1")
    [p] = list((tmp_path / "detect_garments").iterdir())
    assert "|" not in p.name
    p.write_text("{torn")
    assert memo.get("detect_garments", "a|b") is None


def test_a_record_of_another_shape_reads_as_none(tmp_path):
    import json

    memo = MemoStore(tmp_path)
    memo.put("evaluation", "p", {"code": "c"}, "run-1")
    [p] = list((tmp_path / "evaluation").iterdir())
    good = json.loads(p.read_text())
    for bad in ({**good, "parts": [1, 2]}, {**good, "extra": []}, {**good, "parts": {"code": 3}},
                {**good, "run_id": None}, [1, 2], "text"):
        p.write_text(json.dumps(bad))
        assert memo.get("evaluation", "p") is None, bad
