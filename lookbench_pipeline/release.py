"""Deprecated: moved to the package :mod:`lookbench_pipeline.releases` (``build`` in :mod:`~.releases.build`,
``publish``, ``EmptyReleaseError`` and ``DOC_TYPES`` in :mod:`~.releases.publish`, the candidate's names in
:mod:`~.releases.candidate`, the reader's in :mod:`~.releases.reader`); this path works for one release: a
DeprecationWarning, then the old names from their new homes."""

import warnings

from .releases.build import build  # noqa: F401
from .releases.candidate import (PARQUET_OPTS, REJECTED, ReleaseTables, check_candidate,  # noqa: F401
                                 parquet_bytes, read_candidate, write_candidate)
from .releases.publish import DOC_TYPES, EmptyReleaseError, publish  # noqa: F401
from .releases.reader import (LATEST_KEY, MAX_FILE_BYTES, STREET_SUBSETS, SUBSET_TASK, SUBSETS,  # noqa: F401
                              ReleaseExistsError, ReleaseIntegrityError, all_files, check_manifest, choose_subsets,
                              list_releases, pull, read_file, read_manifest, read_manifest_bytes, read_range,
                              release_prefix, resolve_version)
from .windows import Window  # noqa: F401

warnings.warn("lookbench_pipeline.release moved to lookbench_pipeline.releases (build, candidate, publish, reader); "
              "import it from there", DeprecationWarning, stacklevel=2)
