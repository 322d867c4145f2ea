"""Timestamps are timestamp[us, tz=UTC] and survive pyarrow -> Parquet -> DuckDB -> Parquet -> pyarrow unchanged;
a value in another zone is the same instant in UTC; sub-microsecond digits are refused, not truncated."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lookbench_pipeline import schemas
from lookbench_pipeline.releases import parquet_bytes

SCHEMA = pa.schema([("id", pa.string()), ("first_seen_at", schemas.TS)])

VALUES = [
    datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc),
    # 02:30 does not exist in New York that day (DST starts 8 March 2026): use a real local time there
    datetime(2026, 3, 8, 1, 59, 59, 999999, tzinfo=ZoneInfo("America/New_York")),  # = 06:59:59.999999Z
    datetime(2026, 6, 30, 23, 59, 59, 999999, tzinfo=ZoneInfo("Asia/Kolkata")),  # +05:30 -> 18:29:59.999999Z
    datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=timezone(timedelta(hours=-3))),  # before the epoch
]


def test_sub_microsecond_digits_are_refused_not_truncated():
    ns = pd.Timestamp("2026-03-01 12:00:00.123456789", tz="UTC")
    with pytest.raises(schemas.SchemaError, match="sub-microsecond"):
        schemas.from_rows([{"id": "a", "first_seen_at": ns}], SCHEMA)
    with pytest.raises(schemas.SchemaError, match="sub-microsecond"):
        schemas.from_rows([{"id": "a", "first_seen_at": np.datetime64("2026-03-01T12:00:00.123456789")}], SCHEMA)
    # an Arrow nanosecond column with sub-microsecond digits cannot be conformed either
    t = pa.table({"id": ["a"], "first_seen_at": pa.array([ns.value], pa.timestamp("ns", tz="UTC"))})
    with pytest.raises(schemas.SchemaError, match="lose data"):
        schemas.conform(t, SCHEMA)
    # whole microseconds in a finer type are fine, and stay the same instant
    ok = pd.Timestamp("2026-03-01 12:00:00.123456", tz="Europe/Paris")
    assert schemas.from_rows([{"id": "a", "first_seen_at": ok}], SCHEMA)["first_seen_at"][0].as_py() == ok
    t = pa.table({"id": ["a"], "first_seen_at": pa.array([ok.value], pa.timestamp("ns", tz="Europe/Paris"))})
    got = schemas.conform(t, SCHEMA)
    assert got.schema.field("first_seen_at").type == schemas.TS
    assert got["first_seen_at"][0].as_py() == ok.to_pydatetime()


def test_timestamps_round_trip_through_parquet_and_duckdb_unchanged(tmp_path):
    table = schemas.from_rows([{"id": str(i), "first_seen_at": v} for i, v in enumerate(VALUES)], SCHEMA)
    assert table.schema.field("first_seen_at").type == pa.timestamp("us", tz="UTC")
    # the same instants, shown in UTC
    assert table["first_seen_at"].to_pylist() == VALUES
    assert table["first_seen_at"][1].as_py() == datetime(2026, 3, 8, 6, 59, 59, 999999, tzinfo=timezone.utc)
    path = tmp_path / "t.parquet"
    path.write_bytes(parquet_bytes(table))
    back = pq.read_table(path)
    assert back.schema.field("first_seen_at").type == schemas.TS and back.equals(table)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Asia/Tokyo'")  # a session zone other than UTC changes nothing stored
    assert con.execute(f"SELECT typeof(first_seen_at) FROM read_parquet('{path}') LIMIT 1").fetchone()[0] == \
        "TIMESTAMP WITH TIME ZONE"
    rows = con.execute(f"SELECT id, first_seen_at FROM read_parquet('{path}') ORDER BY id").fetchall()
    assert [r[1] for r in rows] == VALUES  # aware datetimes compare as instants
    epoch_us = con.execute(f"SELECT epoch_us(first_seen_at) FROM read_parquet('{path}') ORDER BY id").fetchall()
    assert [r[0] for r in epoch_us] == table["first_seen_at"].cast(pa.int64()).to_pylist()
    # DuckDB writes them back as the same Parquet type and values
    out = tmp_path / "duck.parquet"
    con.execute(f"COPY (SELECT * FROM read_parquet('{path}') ORDER BY id) TO '{out}' (FORMAT parquet)")
    again = pq.read_table(out)
    assert again.schema.field("first_seen_at").type == schemas.TS
    assert again["first_seen_at"].equals(table["first_seen_at"])
    # and a filter on a UTC instant selects exactly what pyarrow would
    n = con.execute(f"SELECT count(*) FROM read_parquet('{path}') "
                    "WHERE first_seen_at >= TIMESTAMPTZ '2026-03-08 06:59:59.999999+00'").fetchone()[0]
    assert n == sum(v >= VALUES[1] for v in VALUES)


def test_release_schema_round_trips_with_its_hugging_face_metadata():
    t = schemas.empty(schemas.RELEASE)
    back = pq.read_table(io.BytesIO(parquet_bytes(t)))
    assert back.schema.equals(schemas.RELEASE, check_metadata=False)
    assert back.schema.metadata[b"huggingface"] == schemas.HF_FEATURES_METADATA[b"huggingface"]
