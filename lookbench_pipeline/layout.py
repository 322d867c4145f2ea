"""The data folder's layout: :class:`DataLayout` is the one place that joins ``data_dir`` with a sub-path.

Everything a build keeps on local disk lives under the configured ``data_dir`` (``PipelineConfig.data_dir``,
reached as ``cfg.layout``), at the paths below; docs/ARCHITECTURE.md's table of stages names the same paths
(``tests/test_layout.py`` checks both). What is authoritative lives in the object store (``store``): the local
folders are working copies and caches a backfill into an empty ``data_dir`` rebuilds.

The paths are plain joins, neither resolved nor created here, so they are the same strings as the ``data_dir``
they start from (stored paths and release bytes depend on them). A bottom module: imports nothing of the library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def site_state_dir(state_dir: Path, site: str) -> Path:
    """One site's first-seen state inside a state folder: ``<state_dir>/<site>/`` (``{products,looks}.parquet``,
    written by ``crawl.merge_catalog``; the crawler's HTTP cache in ``httpcache/``)."""
    return Path(state_dir) / site


def drop_state_file(state_dir: Path, drop: str) -> Path:
    """One drop's first-seen state inside a state folder: ``<state_dir>/drops/<drop>.parquet`` (``drop_items``
    rows, ``records.DropState``)."""
    return Path(state_dir) / "drops" / f"{drop}.parquet"


@dataclass(frozen=True)
class DataLayout:
    """Where each kind of file lives under ``root`` (the configured ``data_dir``)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def store(self) -> Path:
        """``store/``: the object store (releases, originals, records, reports, crawl archives) when
        ``store.url`` is unset."""
        return self.root / "store"

    @property
    def logs(self) -> Path:
        """``logs/``: a build's full output, ``<command>-<UTC time>.log`` (``lookbench build / demo / backfill``
        without ``--verbose``)."""
        return self.root / "logs"

    @property
    def runs(self) -> Path:
        """``runs/``: one folder per Dagster run of the crawl op."""
        return self.root / "runs"

    def run_dir(self, run_id: str) -> Path:
        """``runs/<run_id>/``: one crawl run's work, ``<site>/crawl/{items.jsonl,scrapy.log,files/}`` per site
        (and archived crawls fetched for a replay)."""
        return self.runs / run_id

    @property
    def crawls(self) -> Path:
        """``crawls/``: the weekly crawls' own folders."""
        return self.root / "crawls"

    def crawl_dir(self, week: str, site: str) -> Path:
        """``crawls/<week>/<site>/``: one week's crawl of one site, the same folder for every attempt, so a killed
        crawl resumes there (``crawl.crawl_dir``)."""
        return self.crawls / week / site

    @property
    def state(self) -> Path:
        """``state/``: first-seen state, ``<site>/`` per site (:meth:`site_state`) and ``drops/<drop>.parquet``
        per drop (:meth:`drop_state`)."""
        return self.root / "state"

    def site_state(self, site: str) -> Path:
        """``state/<site>/``: a site's first-seen products and looks (``{products,looks}.parquet``)."""
        return site_state_dir(self.state, site)

    def http_cache(self, site: str) -> Path:
        """``state/<site>/httpcache/``: the crawler's HTTP cache for a site."""
        return self.site_state(site) / "httpcache"

    def drop_state(self, drop: str) -> Path:
        """``state/drops/<drop>.parquet``: a drop's first-seen files (``records.DropState``)."""
        return drop_state_file(self.state, drop)

    @property
    def assets(self) -> Path:
        """``assets/``: every Dagster asset value, one file per partition (``assets/io.py``)."""
        return self.root / "assets"

    def asset_dir(self, asset: str) -> Path:
        """``assets/<asset>/``: one asset's partitions, ``<partition>.parquet`` (or ``.json``); ``asset`` is the
        asset key's path joined with ``/``."""
        return self.assets / asset

    @property
    def memo(self) -> Path:
        """``memo/``: per asset and partition, the fingerprint of the inputs, code and configuration its stored
        value was computed from (:class:`lookbench_pipeline.memo.MemoStore`; ``assets/reuse.py``)."""
        return self.root / "memo"

    @property
    def candidates(self) -> Path:
        """``candidates/``: release candidates, checked before they are published."""
        return self.root / "candidates"

    def candidate_dir(self, version: str) -> Path:
        """``candidates/<version>/``: one candidate, ``<subset>/{query,gallery}.parquet``."""
        return self.candidates / version

    @property
    def embeddings(self) -> Path:
        """``embeddings/``: the embedding cache, a folder per model (``embed.cache.EmbeddingCache``, with the
        release files' packs of ``embed.packs``)."""
        return self.root / "embeddings"

    @property
    def reports(self) -> Path:
        """``reports/``: evaluation reports, one folder per report."""
        return self.root / "reports"

    def report_dir(self, name: str) -> Path:
        """``reports/<name>/``: one evaluation report (``<version>[-cutoff-…]``, ``report.report_name``)."""
        return self.reports / name

    @property
    def contamination_index(self) -> Path:
        """``contamination/index.parquet``: the persistent hash index of legacy benchmarks and earlier releases
        (``contamination_index`` table)."""
        return self.root / "contamination" / "index.parquet"

    @property
    def legacy(self) -> Path:
        """``legacy/``: the demo's generated legacy benchmark trees (the default sources' relative paths
        ``legacy/<name>`` resolve here through :meth:`resolve`)."""
        return self.root / "legacy"

    @property
    def aigen(self) -> Path:
        """``aigen/``: the AI-generated subsets' local files."""
        return self.root / "aigen"

    @property
    def aigen_results(self) -> Path:
        """``aigen/results/``: a provenance record per generation, ``<request_id>.json`` (a cache of the store's
        ``records/aigen/``)."""
        return self.aigen / "results"

    @property
    def aigen_images(self) -> Path:
        """``aigen/images/``: the endpoint's answers, ``<request_id>.<ext>``."""
        return self.aigen / "images"

    @property
    def aigen_jobs(self) -> Path:
        """``aigen/jobs/``: the job-file backend's requests and reference images (default of ``aigen.job_dir``)."""
        return self.aigen / "jobs"

    @property
    def aigen_drop(self) -> Path:
        """``aigen/drop/``: where the job-file backend's results are dropped (default of ``aigen.drop_dir``)."""
        return self.aigen / "drop"

    @property
    def vlm_cache(self) -> Path:
        """``annotate/vlm_cache.sqlite``: the image model's response cache (default of ``annotate.cache``)."""
        return self.root / "annotate" / "vlm_cache.sqlite"

    @property
    def detector(self) -> Path:
        """``detector/``: trained detectors and ultralytics' settings (default of ``detect.cache_dir``)."""
        return self.root / "detector"

    def resolve(self, path: Path | str) -> Path:
        """A configured path: absolute as it is, relative under ``root`` (legacy and negatives sources,
        ``annotate.cache``)."""
        path = Path(path)
        return path if path.is_absolute() else self.root / path
