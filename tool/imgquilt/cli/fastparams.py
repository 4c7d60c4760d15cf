"""Start-up: coerce plain command-line values without pydantic.

typer >= 0.26 turns every non-flag option into its type through a pydantic TypeAdapter, built when
the option is first processed; importing pydantic for it costs 0.15-0.3 s, more than the rest of
`imgquilt top`. imgquilt's options are plain (str, int, float, Path, bool, an Enum of strings,
optionally None, or a list of those, with no typer path checks), and for those `T(value)` is the whole
coercion (click's Choice has already checked an Enum's value). Anything else (path checks, another
typer) is left to typer as it is.
"""
from __future__ import annotations

import enum
import types
import typing
from pathlib import Path
from typing import Any

_PLAIN = (str, int, float, Path, bool)
_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "y": True, "t": True,
          "0": False, "false": False, "no": False, "off": False, "n": False, "f": False}
_CHECKS_OFF = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False, "resolve_path": False,
               "allow_dash": False}  # typer's defaults: a path check is asked for when one differs


def _plain(annotation: Any) -> tuple[type, bool] | None:
    """(T, is_list) when `annotation` is T, Optional[T] or list[T] for a plain T."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _plain(args[0]) if len(args) == 1 else None
    if origin is list:
        (arg,) = typing.get_args(annotation) or (None,)
        inner = _plain(arg)
        return (inner[0], True) if inner is not None and not inner[1] else None
    if annotation in _PLAIN:
        return (annotation, False)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum) and all(isinstance(m.value, str) for m in annotation):
        return (annotation, False)
    return None


def install() -> None:
    """Give typer's parameters of plain types a direct coercion (a no-op where typer differs)."""
    try:
        from typer import _coercion, core
        from typer._click.exceptions import BadParameter
    except ImportError:  # pragma: no cover - an older typer, which has no pydantic step
        return
    base = getattr(_coercion, "RuntimeParam", None)
    param_cls = getattr(core, "_TyperParameter", None)
    original = getattr(param_cls, "get_runtime_param", None)
    if base is None or original is None or getattr(original, "_imgquilt_fast", False):
        return

    class PlainParam(base):  # type: ignore[misc, valid-type]
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            to, many = _plain(self.annotation)  # type: ignore[misc]

            def one(v: Any) -> Any:
                if isinstance(v, to):
                    return v
                if to is Path and str(v) == "":  # Path("") is ".": `--root "$UNSET"` would mean this directory
                    raise BadParameter("an empty path names nothing (give . for this directory).", ctx=ctx, param=param)
                try:
                    if to is bool:
                        return _BOOLS[str(v).strip().lower()]
                    return to(v)
                except (TypeError, ValueError, KeyError):
                    if isinstance(to, type) and issubclass(to, enum.Enum):
                        choices = ", ".join(repr(m.value) for m in to)
                        raise BadParameter(f"{v!r} is not one of {choices}.", ctx=ctx, param=param) from None
                    raise BadParameter(f"Value {v!r} is not a valid {to.__name__}.", ctx=ctx, param=param) from None

            return [one(v) for v in value] if many else one(value)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            info = desc.parameter_info
            checks = any(getattr(info, name, off) != off for name, off in _CHECKS_OFF.items())
            if desc.file_annotation is None and not checks and _plain(desc.annotation) is not None:
                self._runtime_param = PlainParam(parameter_info=info, annotation=desc.annotation)
        return original(self)

    get_runtime_param._imgquilt_fast = True  # type: ignore[attr-defined]
    param_cls.get_runtime_param = get_runtime_param
