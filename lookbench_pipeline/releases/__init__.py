"""Everything about a LookBench release, bottom to top:

* :mod:`.reader`: reading a published release (list versions, read and check a manifest, read a file, pull, check
  a file's table against the published schema before it is scored); it imports only ``store``, ``safepath`` and
  ``schemas``, never a sibling, and what reads releases imports it;
* :mod:`.candidate`: the release before it is published (:class:`ReleaseTables`, the candidate folder, the blocking
  checks, the :class:`Candidate` the ``release_candidate`` asset hands to ``release``), and :func:`parquet_bytes`;
* :mod:`.build`: forming the samples from the stage tables (``build.build``: one function per candidate kind, one
  admission ladder);
* :mod:`.changes` (the diff against the previous version), :mod:`.card` (dataset card, Croissant), :mod:`.docs`
  (the documents a release carries), :mod:`.publishing` (staging, verifying, the manifest last);
* :mod:`.publish`: ``publish.publish``, a release to the store.

This package re-exports the reader's and the candidate's names only (both light); the build and the publish step
are reached through their modules (``from lookbench_pipeline.releases.build import build``,
``from lookbench_pipeline.releases.publish import EmptyReleaseError, publish``): a function re-exported here under a
submodule's name would hide that submodule.
"""

from .candidate import (PARQUET_OPTS, REJECTED, Candidate, ReleaseTables, check_candidate, make_candidate,
                        parquet_bytes, read_candidate, write_candidate)
from .reader import (LATEST_KEY, MAX_FILE_BYTES, STREET_SUBSETS, SUBSET_TASK, SUBSETS, ReleaseExistsError,
                     ReleaseIntegrityError, all_files, check_manifest, choose_subsets, list_releases, pull, read_file,
                     read_manifest, read_manifest_bytes, read_range, release_prefix, resolve_version)

__all__ = ["PARQUET_OPTS", "REJECTED", "Candidate", "ReleaseTables", "check_candidate", "make_candidate",
           "parquet_bytes", "read_candidate", "write_candidate", "LATEST_KEY", "MAX_FILE_BYTES", "STREET_SUBSETS",
           "SUBSET_TASK", "SUBSETS", "ReleaseExistsError", "ReleaseIntegrityError", "all_files", "check_manifest",
           "choose_subsets", "list_releases", "pull", "read_file", "read_manifest", "read_manifest_bytes", "read_range",
           "release_prefix", "resolve_version"]
