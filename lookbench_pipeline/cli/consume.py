"""The consumers' commands: ``releases``, ``info``, ``pull``, ``evaluate``: reading and scoring a published release
from a folder, an S3 bucket or an http(s) mirror. They run in the base install (no Dagster, no Scrapy)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..config import load_config
from ..config.sections import parse_day
from ..safepath import unwritable
from .common import EXIT_ERROR, EXIT_OK, UsageError

def consumer_store(args: argparse.Namespace):
    """The store a consumer command reads: ``--store URL`` (a folder, which must exist; ``s3://bucket/prefix`` with
    ``--endpoint-url`` and ``--anon`` for a public bucket; or an ``http(s)://`` mirror), else the
    configuration's. A ``--store`` URL of another scheme or naming no bucket or host, a ``--store`` folder that
    does not exist (a mistyped path) or is a file, or ``--endpoint-url`` / ``--anon`` with a store that is not S3,
    is a usage error (exit 2), as a missing ``--images`` folder is; a configured store that was never made is
    an error (exit 1), like a release that is not published."""
    from ..store import HttpStore, NoSuchStore, UnsupportedStoreURL, configured_store, open_store

    if getattr(args, "store", None):
        if (args.endpoint_url or args.anon) and not args.store.lower().startswith("s3://"):
            flags = " and ".join(f for f, v in (("--endpoint-url", args.endpoint_url), ("--anon", args.anon)) if v)
            raise UsageError(f"{flags} go{'es' if ' and ' not in flags else ''} with --store s3://bucket/prefix, "
                             f"not {args.store[:200]}")
        try:
            store = open_store(args.store, endpoint_url=args.endpoint_url, anonymous=args.anon, create=False)
        except (UnsupportedStoreURL, NoSuchStore) as exc:
            raise UsageError(f"--store: {exc}") from exc
        if isinstance(store, HttpStore):  # a redirect to another host: one line, as the other warnings
            store.warn = lambda message: print(f"warning: {message}", file=sys.stderr)
        return store
    if args.endpoint_url or args.anon:
        raise UsageError("--endpoint-url and --anon go with --store s3://bucket/prefix")
    import importlib.util

    if not (_config_file(args) or _env_names_store()) and importlib.util.find_spec("scrapy") is None:
        # the consumer install: no pipeline here whose store could be meant
        raise UsageError("name the store to read: --store URL (a folder, s3://bucket/prefix with --anon for a public "
                         "bucket, or an http(s):// mirror)")
    return configured_store(_reader_config(args), create=False)  # a reader never makes a store folder


def _reader_config(args: argparse.Namespace):
    """The configuration of a command that only reads a store or a release: the file (``--config``, else
    ``$LOOKBENCH_CONFIG``); without one, the built-in defaults and the ``LOOKBENCH_*`` variables, without the
    embedded demo shop (a reader crawls nothing, and the demo's site file checks its page rules with the crawler,
    which the consumer install does not have). Raises ConfigError."""
    if _config_file(args):
        return load_config(args.config)
    return load_config(None, sites=[])


def _config_file(args: argparse.Namespace) -> str | None:
    """The configuration file a command reads: ``--config``, else ``$LOOKBENCH_CONFIG`` (README, Configuration)."""
    return getattr(args, "config", None) or os.environ.get("LOOKBENCH_CONFIG") or None


def _env_names_store() -> bool:
    """Whether the environment sets the store (``LOOKBENCH_STORE__URL`` or ``LOOKBENCH_STORE``): then a consumer
    command without ``--store`` reads that store, as it reads a configuration file's."""
    return any(k.upper() in ("LOOKBENCH_STORE__URL", "LOOKBENCH_STORE") for k in os.environ)


def release_source(args: argparse.Namespace, name: str):
    """``(store, version)`` for a consumer command's release argument: a pulled release folder (it holds
    ``manifest.json``), or a version (``vYYYYMMDD`` or ``latest``) in the store of :func:`consumer_store`."""
    from ..store import ReleaseFolder

    if name != "latest" and (Path(name) / "manifest.json").is_file():
        folder = ReleaseFolder(name)
        return folder, folder.version
    if "/" in name or os.sep in name or Path(name).is_dir():
        raise UsageError(f"{name}: not a release folder (no manifest.json in it; a pull writes it last, so a pull "
                         "that stopped left none: run it again) and not a version (vYYYYMMDD or latest)")
    from ..store import StoreError

    try:
        store = consumer_store(args)
    except StoreError:  # no store to read (never made, unreachable): a name that is no version is said first
        if name != "latest":
            _version_arg(None, name)
        raise
    # a version name that is not published is reported by read_manifest, with the published versions and the
    # closest one
    return store, _version_arg(store, name)


def _version_arg(store, name: str) -> str:
    """The release version a command was given (``vYYYYMMDD`` or ``latest``, resolved through the store's
    ``releases/latest``). Raises UsageError (exit 2) for a name that is not a version, with the closest published
    one when the store can be listed (``store`` None: no store could be opened)."""
    import difflib

    from ..releases.reader import list_releases, resolve_version
    from ..safepath import UnsafePathError, check_version
    from ..store import StoreError

    if name == "latest":
        return resolve_version(store, name)
    try:
        return check_version(name)
    except UnsafePathError as exc:
        try:
            have = list_releases(store) if store is not None else []
        except StoreError:  # an http mirror cannot be listed
            have = []
        near = difflib.get_close_matches(name, [*have, "latest"], n=1)  # `lates` too
        raise UsageError(f"{exc} or latest" + (f"; did you mean {near[0]}?" if near else "")) from exc


def cmd_releases(args: argparse.Namespace) -> int:
    from ..releases.reader import readable_releases

    store = consumer_store(args)
    versions, bad = readable_releases(store)  # the same list an error naming an unpublished version suggests from
    if not versions and not bad:
        print(f"no releases in {store.url}")
    for v, why in bad.items():
        print(f"warning: {v} is left out: {why}", file=sys.stderr)
    for v in versions:
        print(v)
    if bad:
        print(f"error: {len(bad)} of {len(versions) + len(bad)} versions in {store.url} have a manifest that cannot "
              "be read (above)", file=sys.stderr)
    return EXIT_ERROR if bad else EXIT_OK


def cmd_info(args: argparse.Namespace) -> int:
    """A release's manifest as a person reads it (``--json``: as it is), then the manifest's own sha256: ``pull``
    and ``evaluate`` check every file they read against the manifest, so the manifest is the release's root of
    trust, and a copy from a mirror is the publisher's release when its manifest's sha256 is the publisher's.

    The files themselves: in a pulled folder, the size of each file it holds is compared with the manifest's (a
    damaged or changed copy, exit 1), and a file that the pull brought and is gone is missing (exit 1): the
    metadata files and ``noise/`` always, a subset's files together (``releases.reader.folder_gaps``, pull's own
    rule); only subsets wholly absent, and not recorded as pulled (the folder's ``.pulled.json``, else its dataset
    card), are ``not pulled``.
    ``--verify`` also hashes each file (sha256, streamed), in a folder or a store. Exit codes: 0, or 1 when a file
    is a link, missing, or differs from the manifest."""
    import hashlib

    from ..releases.reader import (all_files, check_release_files, folder_gaps, no_subset_message, read_manifest_bytes,
                                   read_pulled, release_prefix)
    from ..store import ReleaseFolder

    store, version = release_source(args, args.version)
    raw, m = read_manifest_bytes(store, version)
    prefix = f"{release_prefix(version)}/"
    folder = isinstance(store, ReleaseFolder)
    # the manifest's files a pulled folder holds; exists() refuses a symbolic link (UnsafePathError, named)
    here = {k for k in all_files(m) if store.exists(prefix + k)} if folder else None
    not_pulled: list[str] = []
    gone: list[str] = []
    if here is not None:
        card = store.get_bytes(prefix + "README.md") if "README.md" in here else None
        not_pulled, gone = folder_gaps(m, here, card, read_pulled(store.root))
    if args.json:
        print(json.dumps(m, indent=2, sort_keys=True))
    else:
        print(format_manifest(m, here, set(not_pulled)))
        print(f"manifest sha256: {hashlib.sha256(raw).hexdigest()} (the release's root of trust: pull and evaluate "
              "check each file they read against the manifest; a copy from a mirror is the publisher's release "
              "when this is the publisher's)")
    empty = no_subset_message(version, m)
    if empty:  # a manifest may be valid and list nothing to score: not exit 0 as if all is well
        print(f"error: {empty}", file=sys.stderr)
        return EXIT_ERROR
    problems: list[str] = []
    if folder or args.verify:
        keys = sorted(here) if here is not None else None
        partial = bool(not_pulled)
        if partial and keys and "README.md" in keys:  # a partial pull's card names only the subsets pulled
            keys.remove("README.md")
        checked, problems = check_release_files(store, version, m, keys, hash_files=args.verify)
        problems += [f"{k}: missing (a pull brings the metadata files and noise/ always, a subset's files "
                     "together)" for k in gone]
        what = "sha256 and size" if args.verify else "size; --verify also checks each sha256"
        if not problems:
            print(f"{len(checked)} files checked against the manifest ({what})"
                  + ("; README.md, limited to the subsets pulled, left out" if partial and "README.md" in here
                     else ""), file=sys.stderr)
    for p in problems:
        print(f"error: {version}/{p}", file=sys.stderr)
    if problems:
        fix = "pull it again: the same command restores them" if folder else "the store or mirror serves other bytes"
        print(f"error: {len(problems)} file(s) missing or different from the manifest: not the published release "
              f"({fix})", file=sys.stderr)
        return EXIT_ERROR
    return 0


def _count(v: object) -> int:
    """A manifest count: an integer, or the sum of a per-file ``{file: n}`` object (anything else counts 0)."""
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, dict):
        return sum(_count(x) for x in v.values() if not isinstance(x, dict))
    return 0


def format_manifest(m: dict, present: set[str] | None = None, not_pulled: set[str] | None = None) -> str:
    """A release manifest (checked by ``release.check_manifest``) as a person reads it: version, window, build,
    rows per subset and role, the files' total size, label sources, what changed since the previous version.
    ``present``: the file keys a pulled folder holds; subsets whose files are not all there are marked
    ``not pulled`` when in ``not_pulled`` (None: every such subset), else ``files missing``."""
    from ..releases.reader import NOISE

    files = {**m.get("files", {}), **m.get("metadata_files", {})}
    w = m.get("window") if isinstance(m.get("window"), dict) else {}
    lines = [f"{m.get('name', 'LookBench')} {m.get('version')}  window {w.get('start', '?')} to {w.get('end', '?')} "
             f"(end exclusive)  built {m.get('built_at', '?')}"
             + (f"  code {m['code_version']}" if m.get("code_version") else "")]
    subsets: dict[str, dict[str, int]] = {}
    for key, meta in sorted(m.get("files", {}).items()):
        subset, _, name = key.partition("/")
        if name.endswith(".parquet"):
            subsets.setdefault(subset, {})[name.removesuffix(".parquet")] = int(meta.get("rows") or 0)
    if subsets:
        width = max(len(s) for s in subsets)
        lines.append(f"\n{'subset'.ljust(width)}  {'query':>7}  {'gallery':>7}")
        for sub, roles in subsets.items():
            absent = present is not None and any(f"{sub}/{r}.parquet" not in present for r in roles)
            q = roles.get("query", "-" if sub == NOISE else 0)  # the distractor gallery has no queries
            lines.append(f"{sub.ljust(width)}  {q:>7}  {roles.get('gallery', 0):>7}"
                         + (("  not pulled" if not_pulled is None or sub in not_pulled else "  files missing")
                            if absent else "")
                         + ("  (distractors, in every subset's gallery)" if sub == NOISE else ""))
    total = sum(int(v.get("bytes") or 0) for v in files.values())
    lines.append(f"\n{len(files)} files, {total / 1e6:.1f} MB, each with its sha256 in manifest.json")
    c = m.get("counts") if isinstance(m.get("counts"), dict) else {}
    if c:
        reasons = c.get("rejected_by_reason") if isinstance(c.get("rejected_by_reason"), dict) else {}
        lines.append(f"candidates {_count(c.get('candidates'))}, rejected {_count(c.get('rejected'))}"
                     + (f" ({', '.join(f'{k} {_count(v)}' for k, v in sorted(reasons.items()))})" if reasons else ""))
    if m.get("taxonomy_version"):
        lines.append(f"taxonomy {m['taxonomy_version']}")
    if isinstance(m.get("annotators"), list) and m["annotators"]:
        lines.append(f"annotators: {', '.join(map(str, m['annotators']))}")
    ch = m.get("changes") if isinstance(m.get("changes"), dict) else {}
    if ch.get("previous_version"):
        # the manifest counts items per file (an item is in a subset's query and in every subset's gallery)
        added, retired = (ch.get(k) if isinstance(ch.get(k), dict) else {} for k in ("items_added", "items_retired"))
        per_file = ", ".join(f"{f} +{_count(added.get(f))} -{_count(retired.get(f))}"
                             for f in sorted(set(added) | set(retired)))
        lines.append(f"since {ch['previous_version']}, items added / retired per file: {per_file or 'none'} "
                     "(CHANGES.md)")
    elif ch:
        lines.append("the first release: no earlier version to compare with (CHANGES.md)")
    lines.append("(--json prints the whole manifest)")
    return "\n".join(lines)


def _check_subsets(store, version: str, subsets: list[str] | None, manifest: dict | None = None) -> None:
    """An unknown ``--subset`` is a bad option value: UsageError (exit 2) naming it, the closest subset of the
    release and its subsets, before anything is downloaded or scored. ``manifest``: the version's, when the caller
    has read it (else it is read here)."""
    if subsets:
        from ..releases.reader import choose_subsets, manifest_subsets, read_manifest

        # a manifest that cannot be read: a data error
        listed = manifest_subsets(manifest if manifest is not None else read_manifest(store, version))
        try:
            choose_subsets(listed, subsets, version)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc


def cmd_pull(args: argparse.Namespace) -> int:
    """Download a release (``releases.reader.pull``). A manifest that lists no subset (no query and gallery files)
    is an error (exit 1) before anything is written, as it is for ``info`` and ``evaluate``: such a pull would end
    with exit 0 and a folder with nothing to score."""
    from ..releases.reader import no_subset_message, pull, read_manifest_bytes

    store = consumer_store(args)
    version = _version_arg(store, args.version)
    manifest = read_manifest_bytes(store, version)  # read once: the subsets are checked against what is pulled
    empty = no_subset_message(version, manifest[1])
    if empty:  # pull() refuses it too; said before the subsets, as info says it
        raise ValueError(f"{empty}; nothing pulled")
    _check_subsets(store, version, args.subset, manifest[1])
    if args.look_bench:
        _look_bench_link_can_be_made(Path(args.dest), version)  # checked before the download, not after it
    files = pull(store, version, Path(args.dest), args.subset or None, progress=not args.quiet, manifest=manifest,
                 warn=lambda message: print(f"warning: {message}", file=sys.stderr))
    folder = Path(args.dest) / version
    if files.read_only:
        print(f"{version} is already complete under {folder}: {len(files)} files verified, nothing written (the "
              f"folder cannot be written: {files.read_only})")
    else:
        print(f"{len(files)} files of {version} verified and written under {folder}")
    if args.look_bench:
        link = _make_look_bench_link(Path(args.dest), version)
        print(f"{link} -> {folder}: from {args.dest}, look_bench.utils.load_lookbench_dataset(\"<subset>\") "
              "loads this release")
    return 0


def _look_bench_link_is_right(link: Path, dest: Path, version: str) -> bool:
    """The link is there and leads to ``dest/version`` already: nothing to write (a read-only copy included)."""
    return link.is_symlink() and os.path.realpath(link) == os.path.realpath(dest / version)


def _cannot_link(link: Path, version: str, reason: str) -> UsageError:
    return UsageError(f"cannot make the link {link} -> {Path('..') / version} ({reason}): make it yourself, or pull "
                      "without --look-bench")


def _look_bench_link_can_be_made(dest: Path, version: str) -> None:
    """Before the download: :func:`_look_bench_link`'s checks, and, when the link must be made or changed, that the
    folder it goes in (or ``dest``, before that folder exists) can be written; UsageError naming the link if not."""
    link = _look_bench_link(dest)
    if _look_bench_link_is_right(link, dest, version):
        return
    where = link.parent if link.parent.is_dir() else dest if dest.is_dir() else None  # else pull makes dest
    why = unwritable(where) if where is not None else None
    if why is not None:
        raise _cannot_link(link, version, why)


def _make_look_bench_link(dest: Path, version: str) -> Path:
    """Make ``dest/srpone/look-bench`` a link to ``../VERSION`` and return it. look-bench's loader reads the Hub id
    "srpone/look-bench"; Hugging Face `datasets` takes a local folder of that name (relative to the working
    directory) before the Hub. A link already leading to the release is left as it is (nothing written: a pull
    into a read-only copy that holds it ends with exit 0); one that cannot be made is a UsageError naming it."""
    link = _look_bench_link(dest)
    if _look_bench_link_is_right(link, dest, version):
        return link
    try:
        link.parent.mkdir(exist_ok=True)
        link = _look_bench_link(dest)  # again, once its folder exists
        if link.is_symlink():
            link.unlink()
        link.symlink_to(Path("..") / version, target_is_directory=True)
    except OSError as exc:
        raise _cannot_link(link, version, exc.strerror or str(exc)) from None
    return link


def _look_bench_link(dest: Path) -> Path:
    """``dest/srpone/look-bench``, the link ``pull --look-bench`` makes, once it is checked that it can be made
    there. Raises UnsafePathError for a symbolic link at ``dest/srpone`` (ours would land outside ``dest``) and
    UsageError for a file at ``dest/srpone`` or something other than a link at ``dest/srpone/look-bench``."""
    from ..safepath import resolve_inside

    parent = resolve_inside(dest, "srpone")
    if parent.exists() and not parent.is_dir():
        raise UsageError(f"{parent} exists and is not a folder: move it away, or pull without --look-bench")
    link = parent / "look-bench"
    if link.exists() and not link.is_symlink():
        raise UsageError(f"{link} exists and is not a link: move it away, or pull without --look-bench")
    return link


def _user_cache() -> Path:
    """Where a consumer's embedding cache lives: ``$XDG_CACHE_HOME/lookbench/embeddings`` (``~/.cache`` when
    unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lookbench" / "embeddings"


def _print_reasons(ev, named: list[str]) -> None:
    """Why models were not scored, on stderr: each named model (and each model left unscored on a subset) with
    its reason; the registry's models that cannot run here on one line, grouped by reason."""
    from collections import Counter

    from ..scoring import nothing_scored_reasons

    unnamed = [s for s in ev.skipped if s["model"] not in named]
    shown = type(ev)(ev.release, ev.ks, ev.scores, [s for s in ev.skipped if s["model"] in named],
                     unscored=ev.unscored)
    for line in nothing_scored_reasons(shown):
        print(line, file=sys.stderr)
    if unnamed:
        why = Counter(s["reason"].split(";")[0].split(" (")[0] for s in unnamed)
        print(f"skipped {len(unnamed)} registry models that cannot run here ("
              + ", ".join(f"{r}: {n}" for r, n in why.most_common()) + "); --model ID scores one and says why",
              file=sys.stderr)


def _check_cutoffs(args: argparse.Namespace, settings) -> None:
    """``--training-cutoff`` and ``--cutoff model`` go together for ``--embeddings``
    (:func:`lookbench_pipeline.scoring.check_training_cutoffs`, the rule :func:`lookbench_pipeline.score` follows
    too), in the flags' words. Raises UsageError (exit 2) naming the flag to add or leave out."""
    from ..scoring import check_training_cutoffs, embeddings_name

    if not args.embeddings:
        return
    cutoff = args.cutoff if args.cutoff is not None else settings.cutoff
    where = "--cutoff" if args.cutoff is not None else "evaluate.cutoff (configuration)"
    name = embeddings_name(args.embeddings, _one(args, "name"))
    tc = _one(args, "training_cutoff")
    words = {"set": where + " {cutoff}", "none": "no --cutoff", "model": "--cutoff model", "tc": "--training-cutoff",
             "add_tc": "--training-cutoff YYYY-MM-DD (your model's; or evaluate.model_cutoffs: {{{name}: "
                       "YYYY-MM-DD}} in the configuration)", "date": "--cutoff YYYY-MM-DD"}
    try:
        check_training_cutoffs(cutoff, {name: parse_day(tc) if tc else None}, settings.model_cutoffs, words)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _one(args: argparse.Namespace, dest: str) -> str | None:
    """The value of an evaluate option that names the one model of the ``--embeddings`` files (``--name``,
    ``--training-cutoff``): given once at most. Raises UsageError for a second one, which would otherwise silently
    replace the first (repeated ``--embeddings`` split one model's vectors over files; score another model's
    embeddings in another run)."""
    v = getattr(args, dest, None)
    values = [v] if isinstance(v, str) else list(v or [])
    if len(values) > 1:
        flag = "--" + dest.replace("_", "-")
        raise UsageError(f"{flag} given {len(values)} times ({', '.join(values)}): the --embeddings files are one "
                         f"model's vectors (split over files), so {flag} is given once; score another model's "
                         "embeddings in another run")
    return values[0] if values else None


def _check_outputs(args: argparse.Namespace) -> None:
    """What evaluate writes, checked before anything is read or scored (UsageError, exit 2): ``--output`` a
    ``.parquet`` file and ``--benchmark-json`` a file, each in an existing folder and not a folder itself;
    ``--report`` and ``--cache`` folders (made, with their parents, when missing), neither a file nor under one;
    each where a file can be written (a probe file made and removed: the OS's reason when not)."""
    for flag, value in (("--output", args.output), ("--benchmark-json", args.benchmark_json)):
        if value and Path(value).is_dir():
            raise UsageError(f"{flag} {value} is a folder: name a file")
        if value and not Path(value).resolve().parent.is_dir():
            raise UsageError(f"{flag}: folder {Path(value).parent} does not exist")
    if args.output and Path(args.output).suffix.lower() != ".parquet":
        raise UsageError(f"--output {args.output}: the scores are written as Parquet: name a .parquet file")
    for flag, value in (("--output", args.output), ("--benchmark-json", args.benchmark_json)):
        if value:  # can be written: a scoring pass whose results cannot be kept is not started
            folder = Path(value).resolve().parent
            why = unwritable(folder) or (None if not Path(value).exists() or os.access(value, os.W_OK)
                                          else "the file is read-only")
            if why:
                raise UsageError(f"{flag} {value}: cannot write in {folder}: {why}")
    for flag, value in (("--report", args.report), ("--cache", args.cache)):
        if value:  # a folder, made when missing: the nearest existing one on its path must be a writable folder
            where = _nearest_existing(Path(value))
            if not where.is_dir():
                raise UsageError(f"{flag} {value}: {where} is a file: name a folder (made when missing)")
            why = unwritable(where)
            if why:
                raise UsageError(f"{flag} {value}: cannot write in {where}: {why}")


def _nearest_existing(path: Path) -> Path:
    """``path`` or the nearest of its parents that exists (the folder a missing folder would be made in)."""
    return next(p for p in (path, *path.absolute().parents) if p.exists())


def _default_cache(cache: Path) -> Path | None:
    """The default embedding cache (no ``--cache``), or None when it cannot be written (a read-only home): then a
    warning says so and the embeddings go through a temporary cache, removed when evaluate ends."""
    where = _nearest_existing(cache)
    why = unwritable(where) if where.is_dir() else f"{where} is a file"
    if why is None:
        return cache
    print(f"warning: the embedding cache {cache} cannot be written ({why}): embedding through a temporary cache, "
          "removed at the end (--cache DIR keeps one in a folder you can write)", file=sys.stderr)
    return None


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score models on a release (a pulled folder or a version in a store). Exit codes: 0 every model asked
    for was scored; 1 nothing was scored, or a model named with --model / --embeddings was not (the reasons on
    stderr), or an error; 2 a configuration or usage error."""
    import pyarrow.parquet as pq

    from ..evaluate import evaluate_configured, format_table
    from ..scoring import EmbeddingsFileError, IdsFileError, PrecomputedEmbeddings, embeddings_name, site_benchmark

    if (args.release_path is None) == (args.release is None):
        raise UsageError("name the release once: a pulled release folder (lookbench evaluate DIR) or a version "
                         "(--release vYYYYMMDD|latest)")
    for flag, value in (("--cutoff", args.cutoff), ("--training-cutoff", _one(args, "training_cutoff"))):
        if value is not None and not (flag == "--cutoff" and value == "model"):
            try:
                parse_day(value)
            except ValueError as exc:
                raise UsageError(f"{flag} must be a date YYYY-MM-DD{' or model' if flag == '--cutoff' else ''}, "
                                 f"got {value!r}") from exc
    if args.ids and len(args.ids) > 1:
        raise UsageError(f"--ids given {len(args.ids)} times ({', '.join(args.ids)}): it names the sample_ids of "
                         "the one .npy --embeddings file, so it is given once")
    args.ids = args.ids[0] if args.ids else None
    if args.ids and not args.embeddings:
        raise UsageError("--ids goes with --embeddings FILE.npy")
    npy = [e for e in args.embeddings or [] if Path(e).suffix.lower() == ".npy"]
    if npy and not args.ids:
        raise UsageError(f"{npy[0]}: a .npy file holds vectors only; --ids FILE gives their sample_ids, one per line "
                         "in row order (or write Parquet / .npz with the ids inside)")
    if args.ids and (len(args.embeddings or []) != 1 or not npy):
        raise UsageError("--ids goes with exactly one .npy embeddings file")
    name, training_cutoff = _one(args, "name"), _one(args, "training_cutoff")
    if name is not None and not name.strip():
        raise UsageError("--name is empty: give the model's name (without --name, the first --embeddings file's "
                         "name without its suffix is used)")
    if (name or training_cutoff) and not args.embeddings:
        raise UsageError("--name and --training-cutoff go with --embeddings")
    given_name = embeddings_name(args.embeddings or [], name)
    if given_name and given_name in (args.model or []):
        raise UsageError(f"--model {given_name} and the --embeddings (named {given_name!r}"
                         + ("" if name else ", after the file") + ") would be two models of one name: give the "
                         "embeddings another --name")
    _check_outputs(args)
    # The pipeline's own evaluation (a version in the configured store, or a configuration file: --config or
    # $LOOKBENCH_CONFIG): the configuration's models, legacy benchmarks, contamination index and embedding cache.
    # A consumer's (a pulled folder, --store or LOOKBENCH_STORE__URL): the default settings with the LOOKBENCH_*
    # variables applied (and checked), without legacy benchmarks (their data is not part of a release), cache in the
    # user's.
    pipeline_mode = bool(_config_file(args)) or not (args.release_path or args.store or _env_names_store())
    # no file: the defaults and the environment (evaluate crawls nothing: no site), a ConfigError (exit 2) first
    cfg = _reader_config(args)
    _check_cutoffs(args, cfg.evaluate)
    store, version = release_source(args, args.release_path or args.release)
    _check_subsets(store, version, args.subset)
    index = None
    if pipeline_mode:
        settings, data_dir = cfg.evaluate, cfg.layout.root
        cache = Path(args.cache) if args.cache else _default_cache(cfg.layout.embeddings)
        match = (cfg.dedup.hamming_threshold, cfg.dedup.max_color_diff, cfg.dedup.max_foreground_delta_e)
        index_path = cfg.layout.contamination_index
        index = pq.read_table(index_path) if index_path.is_file() else None
        if index is None and settings.exclude_contaminated:
            print(f"note: no contamination index at {index_path}: queries not re-checked", file=sys.stderr)
        legacy = not args.no_legacy
        if legacy:
            from ..pipeline import write_demo_legacy_trees

            write_demo_legacy_trees(cfg)
    else:
        settings, data_dir, match = cfg.evaluate.model_copy(update={"legacy": []}), None, (6, 32.0)
        cache, legacy = Path(args.cache) if args.cache else _default_cache(_user_cache()), False
    args.temporary_cache = cache is None  # an interrupt then says the embeddings are not kept (main._run)
    given = {}
    if args.embeddings:
        tc = parse_day(training_cutoff) if training_cutoff else None
        try:
            emb = PrecomputedEmbeddings.load(args.embeddings, args.ids, name, tc)
        except EmbeddingsFileError as exc:  # no such file, or no known format: a bad option value
            raise UsageError(f"{'--ids' if isinstance(exc, IdsFileError) else '--embeddings'} {exc}") from exc
        given[emb.name] = emb
    named = list(dict.fromkeys([*(args.model or []), *given]))
    # models named on the command line (or embeddings) are scored alone; otherwise the config's, plus the registry's
    ev = evaluate_configured(settings, store, version, data_dir=data_dir, cache_dir=cache,
                             contamination_index=index, contamination_match=match,
                             model_ids=args.model or ([] if given else None), cutoff=args.cutoff,
                             registry=False if named else None, legacy=legacy, progress=not args.quiet,
                             embedders_given=given, subsets=args.subset or None)
    _print_reasons(ev, named)
    notes = [emb.unused_note(ev, store) for emb in given.values()] if ev.scores.num_rows else []
    for note in [*ev.warnings, *filter(None, notes)]:
        print(f"warning: {note}", file=sys.stderr)
    if ev.scores.num_rows == 0:
        print(f"error: nothing was scored on {version} (the reasons are above)", file=sys.stderr)
        return EXIT_ERROR
    for note in ev.notes:
        print(f"note: {note}", file=sys.stderr)
    if ev.cutoff == "model":
        for m in ev.models:
            if m.get("cutoff") is None:
                print(f"note: {m['model']} declares no training cutoff: scored on every query", file=sys.stderr)
    # the K asked for (evaluate.ks, in a file or LOOKBENCH_EVALUATE__KS), exactly; else the short default view
    print(format_table(ev.scores, ks=settings.ks if "ks" in settings.model_fields_set else None))
    if ev.manifest_sha256:  # the exact release scored: the digest `lookbench info` ends with
        print(f"\nscored on {version}, manifest sha256 {ev.manifest_sha256}")
    if args.output:
        pq.write_table(ev.scores, args.output)
    if args.benchmark_json:
        Path(args.benchmark_json).write_text(json.dumps(site_benchmark(ev.scores), indent=2) + "\n")
    if args.report:
        from ..report import write_report

        report = write_report(ev, Path(args.report))
        print(f"\nreport: {report['html']} (leaderboard: {report['dir'] / 'leaderboard.md'})")
    # a legacy benchmark's rows are no score on the release: a model scored only there was not scored on it
    live = [m for m, s in zip(ev.scores.column("model").to_pylist(), ev.scores.column("subset").to_pylist())
            if not s.startswith("legacy:")]
    if not live:
        print(f"error: no query of {version} was scored, only the legacy benchmarks (the reasons are above)",
              file=sys.stderr)
        return EXIT_ERROR
    missing = [m for m in named if m not in set(live)]
    if missing:
        print(f"error: not scored: {', '.join(missing)} (the reasons are above)", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK
