"""An IO manager that keeps each asset's value as a file per partition under ``<data_dir>/assets/``:
``pyarrow.Table`` as Parquet, anything else as JSON. The files are the tables between stages.

Beside each value, ``<partition>.written.json`` says which run wrote it and the file's sha256
(:func:`written_by`): what ``assets/reuse.py`` checks before it reuses a stored value instead of recomputing it."""

import hashlib


import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import ConfigurableIOManager, InitResourceContext, InputContext, MultiPartitionsDefinition, OutputContext

from lookbench_pipeline import schemas
from lookbench_pipeline.config import load_config
from lookbench_pipeline.layout import DataLayout

from .resources import require_location_config
from .step_process import die_with_run_worker
from .tables import ASSET_SCHEMAS


def _read(p: Path, asset: str) -> pa.Table:
    """A stored table, upgraded to its asset's current schema (``assets/tables.ASSET_SCHEMAS``) when it was written
    before columns were added (:func:`lookbench_pipeline.schemas.upgrade`): earlier partitions stay readable after
    an upgrade. A table asset not named there is returned as stored."""
    t = pq.read_table(p)
    schema = ASSET_SCHEMAS.get(asset)
    return schemas.upgrade(t, schema) if schema is not None else t


def stored_path(data_dir: Path, asset: str, partition_key: str) -> Path:
    """Where :class:`TableIOManager` keeps a partition's value (without the ``.parquet`` / ``.json`` suffix)."""
    return DataLayout(Path(data_dir)).asset_dir(asset) / TableIOManager._name(partition_key)


def written_by(data_dir: Path, asset: str, partition_key: str) -> dict | None:
    """``{"run_id", "sha256", "file"}`` of the run that last wrote the stored value of ``asset`` / ``partition_key``
    (None when it was never written by this IO manager, or the record is unreadable)."""
    p = stored_path(data_dir, asset, partition_key).with_suffix(".written.json")
    try:
        w = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return w if isinstance(w, dict) and isinstance(w.get("sha256"), str) else None


def read_stored_value(data_dir: Path, asset: str, partition_key: str, sha256: str) -> object:
    """The stored value of ``asset`` / ``partition_key`` as :class:`TableIOManager` loads it, provided its file's
    sha256 is ``sha256``.

    Raises:
        FileNotFoundError: no stored value.
        ValueError: the file's sha256 differs (it was changed after it was written)."""
    base = stored_path(data_dir, asset, partition_key)
    for suffix in (".parquet", ".json"):
        p = base.with_suffix(suffix)
        if p.is_file():
            data = p.read_bytes()
            if hashlib.sha256(data).hexdigest() != sha256:
                raise ValueError(f"{p} changed after it was written")
            return _read(p, asset) if suffix == ".parquet" else json.loads(data)
    raise FileNotFoundError(f"{asset} has no stored value at {base}.*")


def read_stored_table(data_dir: Path, asset: str, partition_key: str) -> pa.Table | None:
    """A partition's stored table, or None when that partition was never materialised."""
    p = stored_path(data_dir, asset, partition_key).with_suffix(".parquet")
    return _read(p, asset) if p.is_file() else None


class TableIOManager(ConfigurableIOManager):
    config_path: str | None = None

    def setup_for_execution(self, context: InitResourceContext) -> None:
        die_with_run_worker(context)  # as LookbenchConfig does: whichever a step sets up first
        require_location_config(self.config_path, context, "io_manager.config_path")

    def _base(self, context: OutputContext | InputContext) -> Path:
        return load_config(self.config_path).layout.asset_dir("/".join(context.asset_key.path))

    @staticmethod
    def _name(key: str) -> str:
        return str(key).replace("|", "__")  # a MultiPartitionKey is "site|week"

    def _path(self, context: OutputContext | InputContext) -> Path:
        key = context.asset_partition_key if context.has_asset_partitions else "all"
        return self._base(context) / self._name(key)

    def handle_output(self, context: OutputContext, obj: object) -> None:
        """Write the value (and ``<partition>.written.json``). A value ``assets/reuse.py`` reused (output metadata
        ``lookbench/reused_from_run``) was read from the stored file and checked against its sha256: the file is
        kept as it is, byte for byte, and only the record of the run that holds it is updated."""
        path = self._path(context)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            run_id = context.run_id
        except Exception:  # an output context built without a run (a direct call in a test)
            run_id = None
        out = path.with_suffix(".parquet" if isinstance(obj, pa.Table) else ".json")
        record = path.with_suffix(".written.json")
        if "lookbench/reused_from_run" in (context.output_metadata or {}) and out.is_file():
            try:
                before = json.loads(record.read_text())
            except (OSError, ValueError):
                before = None
            if before and before.get("sha256") == hashlib.sha256(out.read_bytes()).hexdigest():
                record.write_text(json.dumps({**before, "run_id": run_id}, indent=1, sort_keys=True))
                return
        if isinstance(obj, pa.Table):
            pq.write_table(obj, out)
        else:
            out.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
        written = {"run_id": run_id, "file": out.name, "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}
        record.write_text(json.dumps(written, indent=1, sort_keys=True))

    def load_input(self, context: InputContext) -> object:
        if context.has_asset_partitions and len(context.asset_partition_keys) != 1:
            # every configured site's crawl of one window, concatenated in partition-key order. Site partitions
            # registered in the instance by another configuration are not this build's input.
            sites = {s.name for s in load_config(self.config_path).site_configs()}
            pdef = context.asset_partitions_def
            keys = []
            for k in context.asset_partition_keys:
                if isinstance(pdef, MultiPartitionsDefinition):
                    k = pdef.get_partition_key_from_str(str(k))
                    if k.keys_by_dimension.get("site") not in sites:
                        continue
                keys.append(k)
            tables = []
            for key in sorted(keys):
                p = (self._base(context) / self._name(key)).with_suffix(".parquet")
                if not p.is_file():
                    raise FileNotFoundError(f"{context.asset_key.to_user_string()} partition {key} has no stored "
                                            f"value at {p}; materialize it first")
                tables.append(_read(p, context.asset_key.path[-1]))
            return pa.concat_tables(tables, promote_options="default") if tables else None
        path = self._path(context)
        if path.with_suffix(".parquet").is_file():
            return _read(path.with_suffix(".parquet"), context.asset_key.path[-1])
        if path.with_suffix(".json").is_file():
            return json.loads(path.with_suffix(".json").read_text())
        raise FileNotFoundError(f"{context.asset_key.to_user_string()} has no stored value at {path}.*; "
                                "materialize it first")
