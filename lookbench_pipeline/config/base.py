"""The bottom of the settings package: the error type, the strict base model, the subset names, the name-template
fields of annotation files, and reading a YAML file and describing a validation error (shared by the site files
and the pipeline file). Imports nothing of the package."""

from __future__ import annotations

import io
import string
import types
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator


class ConfigError(ValueError):
    """A configuration file or value is invalid (the message names the file and field)."""


TEMPLATE_FIELDS = ("file_name", "stem", "image_id")
"""The fields a drop annotation file's photo-name template may use (:mod:`lookbench_pipeline.label_import`)."""


def template_fields(template: str) -> list[str]:
    """The fields a name template uses. Raises ValueError for a malformed template or a field other than
    ``{file_name}``, ``{stem}``, ``{image_id}``."""
    fields = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS:
            raise ValueError(f"name template {template!r}: unknown field {{{name}}} (use {{file_name}}, {{stem}} or "
                             "{image_id})")
        fields.append(name)
    if not fields:
        raise ValueError(f"name template {template!r} uses no field: every entry would describe the same file")
    return fields


class _Strict(BaseModel):
    """Unknown keys are errors at every level: a typo must not silently fall back to a default; and a ``true`` /
    ``false`` where a number is asked for (``max_pages: true``, an item of ``allowed_ports: [true]``) is an error,
    where pydantic would read it as 1 / 0."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, v: Any, info: Any) -> Any:
        if info.field_name:
            _refuse_bool_numbers(cls.model_fields[info.field_name].annotation, v)
        return v


def _refuse_bool_numbers(ann: Any, v: Any) -> None:
    """Raise ValueError where ``v`` holds a ``true`` / ``false`` in a place ``ann`` asks a number for: the value
    itself, or an element of a list, tuple or set of numbers, or a value of a mapping to numbers
    (``allowed_ports: [true]`` would otherwise read as port 1)."""
    import typing

    if isinstance(v, bool):
        if _wants_number(ann):
            raise ValueError(f"{str(v).lower()} is not a number")
        return
    while typing.get_origin(ann) is Annotated:
        ann = typing.get_args(ann)[0]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (typing.Union, types.UnionType):
        containers = [a for a in args if typing.get_origin(a) in (list, tuple, set, frozenset, dict)]
        if len(containers) == 1:
            _refuse_bool_numbers(containers[0], v)
    elif origin in (list, set, frozenset) and args and isinstance(v, (list, tuple, set, frozenset)):
        for i, x in enumerate(v):
            if isinstance(x, bool) and _wants_number(args[0]):
                raise ValueError(f"item {i + 1}: {str(x).lower()} is not a number")
    elif origin is tuple and args and isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            elem = args[0] if len(args) == 2 and args[1] is Ellipsis else (args[i] if i < len(args) else None)
            if isinstance(x, bool) and elem is not None and _wants_number(elem):
                raise ValueError(f"item {i + 1}: {str(x).lower()} is not a number")
    elif origin is dict and len(args) == 2 and isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, bool) and _wants_number(args[1]):
                raise ValueError(f"{k}: {str(x).lower()} is not a number")


def _wants_number(ann: Any) -> bool:
    """Whether a field's annotation is a number (``int``, ``float``, ``int | None``, ``Annotated[int, …]``), not a
    ``bool`` or a union that takes one."""
    import typing

    if ann in (int, float):
        return True
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) is Annotated:
        return _wants_number(args[0])
    return bool(args) and typing.get_origin(ann) in (typing.Union, types.UnionType) and bool not in args \
        and all(_wants_number(a) for a in args)


def _not_blank(v: Any) -> Any:
    """An empty path is no path: ``Path("")`` is ``.``, the current (or the config file's) folder, which a blank
    value must never silently mean."""
    if isinstance(v, (str, Path)) and not str(v).strip():
        raise ValueError("must not be empty (a blank path would mean the current folder)")
    return v


PathValue = Annotated[Path, BeforeValidator(_not_blank)]
"""A path field that refuses an empty value (pydantic would turn ``""`` into ``Path(".")``)."""


def _one_segment(v: Any) -> Any:
    """A name that becomes one file or folder name (``state/drops/<name>.parquet``, ``state/<site>/``, ``crawls/…/
    <site>/``): no path separator, no NUL, not ``.`` or ``..``, not blank — ``../../x`` must never write elsewhere."""
    if isinstance(v, str) and (not v.strip() or v in (".", "..") or any(c in v for c in "/\\\x00")):
        raise ValueError(f"{v!r} is not a name: it becomes a file name, so it may not be blank, '.' or '..', nor "
                         "hold '/', '\\' or a NUL character")
    if isinstance(v, str) and len(v.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ValueError(f"{v[:40]!r}… is {len(v.encode('utf-8', 'surrogatepass'))} bytes long: a name becomes a "
                         f"file name (with suffixes such as .parquet), so it is at most {MAX_NAME_BYTES} bytes")
    return v


MAX_NAME_BYTES = 100
"""The longest site or drop name, in UTF-8 bytes: it becomes a file or folder name (``crawls/<week>/<site>/``,
``state/drops/<name>.parquet``, its archive keys), and file systems allow 255 bytes per name."""


Name = Annotated[str, BeforeValidator(_one_segment)]
"""A name that the pipeline uses as one file or folder name (a drop's, a site's)."""


SUBSET_NAMES = ("real_studio_flat", "aigen_studio", "real_streetlook", "aigen_streetlook")


class _SettingsLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that an unquoted date-like value that is no date (``2026-02-30``,
    ``2026-13-01``) is a YAML error at its line and column, not a bare ``ValueError`` ("day is out of range for
    month") that names neither the file nor the key; and a key given twice in one mapping (``name:`` twice) is a
    YAML error at the second one, where PyYAML would silently keep the last value. Keys a merge (``<<: *anchor``)
    brings in may be overridden, as YAML means them to be."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # called on each mapping node before its merge keys are expanded (by construct_mapping, or by the flattening
        # of a mapping that merges it); a node already flattened holds merged keys next to its own, so it is checked
        # only the first time it is seen
        checked = self.__dict__.setdefault("_keys_checked", set())
        if id(node) not in checked:
            checked.add(id(node))
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: PyYAML refuses it itself
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"key {key!r} given twice (first on line {first.line + 1}): remove one, or PyYAML would "
                        "silently keep the last", key_node.start_mark)
                seen[key] = key_node.start_mark
        super().flatten_mapping(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # an explicitly tagged value that is not of its tag (`!!int many`, `!!timestamp soon`, `!!float abc`):
        # a YAML error at the node, not a bare ValueError / AttributeError from PyYAML's constructor
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value if isinstance(node, yaml.ScalarNode) else node.id!r} cannot be read as "
                f"{node.tag.rsplit(':', 1)[-1]} ({exc})", node.start_mark) from None

    def construct_yaml_timestamp(self, node: yaml.Node) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} is not a date or time ({exc}); write a real one, YYYY-MM-DD",
                node.start_mark) from None


_SettingsLoader.add_constructor("tag:yaml.org,2002:timestamp", _SettingsLoader.construct_yaml_timestamp)


def _read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a settings file (pipeline or site YAML) holds. Raises ConfigError: no such file, not UTF-8,
    not valid YAML (with the line and column; an impossible unquoted date or a key given twice counts), not a mapping,
    or a top-level key that is no name (``1:``)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        stream = io.StringIO(path.read_text(encoding="utf-8"))
        stream.name = str(path)  # PyYAML's marks say 'in "<file>", line L, column C'
        data = yaml.load(stream, Loader=_SettingsLoader) or {}  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except (ValueError, TypeError, AttributeError) as exc:  # a constructor error construct_object did not see
        raise ConfigError(f"{path}: not valid YAML: a value cannot be read as its tag says ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    odd = [k for k in data if not isinstance(k, str)]
    if odd:  # else pydantic says "keywords must be strings", naming nothing
        raise ConfigError(f"{path}: top-level key {odd[0]!r} is not a setting name (the keys are names, such as "
                          "name or sites)")
    return data


def _model_at(cls: Any, loc: tuple) -> Any:
    """The pydantic model class a validation error location points into (``("images", "bogus")`` -> the class
    of ``images``), or None."""
    import typing

    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(cls, "model_fields", None)
        if not fields or part not in fields:
            return None
        ann = fields[part].annotation
        for _ in range(4):  # unwrap list[X], X | None, dict[str, X]
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                break
            if not args:
                break
            ann = args[-1]
        cls = ann
    return cls if hasattr(cls, "model_fields") else None


def describe_error(exc: Exception, cls: Any) -> str:
    """A pydantic validation error as one line per problem, ``field.path: message (got …)``; an unknown field
    names the closest known one (difflib) and the known fields; a model-level check (a ``model_validator``, no
    field) its message alone, which names what it checks (``replay site 'x' needs pages_dir: …``); our own checks'
    messages without pydantic's ``Value error,`` (nor ``(top level):``). Other exceptions: their text."""
    import difflib

    errors = getattr(exc, "errors", None)
    try:
        items = errors() if callable(errors) else None
    except Exception:  # not a pydantic ValidationError
        items = None
    if not items:
        return str(exc)
    lines = []
    for e in items:
        loc = tuple(e.get("loc", ()))
        where = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[") or "(top level)"
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "extra_forbidden" and loc:
            parent = _model_at(cls, loc[:-1])
            known = sorted(parent.model_fields) if parent is not None else []
            near = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            lines.append(f"{where}: unknown field ({msg}); {hint}known: {', '.join(known)}" if known
                         else f"{where}: unknown field ({msg})")
            continue
        if e.get("type") == "value_error":  # our own check: its message says what is wrong, without pydantic's prefix
            msg = msg.removeprefix("Value error, ")
            if not loc:  # a model's own check: its message names what it checks
                lines.append(msg)
                continue
        got = e.get("input")
        said = e.get("type") == "value_error" and ", got " in msg  # our message shows the value already
        shown = "" if e.get("type") == "missing" or isinstance(got, dict) or said else f" (got {got!r:.80})"
        lines.append(f"{where}: {msg}{shown}")
    return "; ".join(lines)
