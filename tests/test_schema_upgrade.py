"""Partitions stored by an earlier version stay readable after columns are added to a table's schema: weekly crawl
partitions written before ``products.variant_id`` or ``images.fg_signature`` existed are read with those columns as
nulls, and concatenate with partitions of the new shape."""

import pyarrow as pa
import pyarrow.parquet as pq

from assets.io import read_stored_table, stored_path
from lookbench_pipeline import schemas


def test_an_old_partition_gets_the_new_columns_as_nulls(tmp_path):
    for asset, schema, added in [("products", schemas.PRODUCTS, ["variant_id"]),
                                 ("images", schemas.IMAGES, ["fg_signature", "block_codes"]),
                                 ("image_refs", schemas.IMAGE_REFS, ["detail"])]:
        rows = schemas.from_rows([{}], schema).drop_columns(added)  # one row of an earlier version
        p = stored_path(tmp_path, asset, "demo|2026-W27").with_suffix(".parquet")
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, p)
        t = read_stored_table(tmp_path, asset, "demo|2026-W27")
        assert set(schema.names) <= set(t.column_names)
        assert all(t[c].null_count == 1 for c in added)
        new = schemas.from_rows([{}], schema)
        both = pa.concat_tables([t, new], promote_options="default")
        assert both.num_rows == 2 and schemas.conform(both, schema).schema == schema


def test_a_current_table_is_unchanged():
    t = schemas.from_rows([{}], schemas.IMAGES)
    assert schemas.upgrade(t, schemas.IMAGES) is t
