"""Errors of the planner layer.

Error tree::

    PlannerError                  base of everything the planner raises on purpose
    ├── SnapshotError             the input is not a valid snapshot (carries ``field`` and ``value``)
    └── PlanCheckError            a plan broke an invariant (a bug: the checker caught it)

A user mistake is always a :class:`SnapshotError` with a one-line message naming the field and
the value; an infeasible cluster is *not* an error — the plan lists the jobs it could not serve.
"""

from __future__ import annotations

from typing import Any


class PlannerError(Exception):
    """Base class for planner errors."""


class SnapshotError(PlannerError):
    """The input is not a valid snapshot."""

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        self.field = field
        self.message = message
        self.value = value
        super().__init__(f"{field}: {message}" if field else message)


class PlanCheckError(PlannerError):
    """A plan violates an invariant; ``violations`` lists each one."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        super().__init__("; ".join(violations[:5]) + (f" (+{len(violations) - 5} more)" if len(violations) > 5 else ""))

    def __reduce__(self) -> tuple[type[PlanCheckError], tuple[list[str]]]:
        # Rebuilt from its violations, not its message: the service's worker processes raise it across a pipe.
        return (type(self), (self.violations,))


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """``('jobs', 3, 'min_cpu_millis')`` -> ``jobs[3].min_cpu_millis``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def first_error(errors: list[Any]) -> Any:
    """The validation error to show first: an unknown field, since a misspelt name is also reported
    as the right name missing, and "Field required" alone never shows the typo."""
    for err in errors:
        if err.get("type") == "extra_forbidden":
            return err
    return errors[0]


def unknown_field(loc: tuple[Any, ...], errors: list[Any], model: Any = None) -> str:
    """The message for an unknown field at ``loc``: its name, and the closest known name.

    Known names come from ``model`` (a pydantic model class, walked along ``loc``) when given, and
    from the fields reported missing beside it."""
    import difflib

    name = str(loc[-1]) if loc else ""
    known = set(_fields_at(model, loc[:-1])) if model is not None else set()
    known |= {str(e["loc"][-1]) for e in errors if e.get("type") == "missing" and tuple(e.get("loc", ()))[:-1] == loc[:-1]}
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"unknown field '{name}'" + (f"; did you mean '{close[0]}'?" if close else "")


def unknown_tag(err: Any) -> str:
    """The message for a discriminated union's unknown tag (a schedule's ``kind``): the value, the
    closest known tag and the list of them."""
    import difflib

    ctx = err.get("ctx") or {}
    tag, field = str(ctx.get("tag", "")), str(ctx.get("discriminator", "kind")).strip("'")
    known = [t.strip().strip("'") for t in str(ctx.get("expected_tags", "")).split(",") if t.strip()]
    close = difflib.get_close_matches(tag, known, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown {field} '{tag}'; {hint}(one of: {', '.join(known)})"


def _fields_at(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """Field names of the pydantic model reached from ``model`` along ``loc`` (empty if none)."""
    import typing

    from pydantic import BaseModel

    def models_in(tp: Any) -> list[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        return [m for arg in typing.get_args(tp) for m in models_in(arg)]

    def tagged(options: list[type[BaseModel]], tag: str) -> type[BaseModel] | None:
        # A discriminated union's member named by its tag (pydantic puts the tag in the path).
        for m in options:
            kind = m.model_fields.get("kind")
            if kind is not None and tag in typing.get_args(kind.annotation):
                return m
        return None

    current: Any = model
    options: list[type[BaseModel]] = []
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None:
            current = tagged(options, str(part))
            options = []
            continue
        field = current.model_fields.get(str(part))
        found = models_in(field.annotation) if field is not None else []
        current = found[0] if len(found) == 1 else None
        options = found if len(found) > 1 else []
    return list(current.model_fields) if current is not None else []
