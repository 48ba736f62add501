"""Path leases' paths: what a resource may be, when two overlap, and a set of them.

A resource is a `/`-separated path whose first segment may carry a scheme
(`repo:web/src/api`, `db:staging`). Two resources overlap when they are equal or
one is the other's ancestor at a `/` boundary; an exclusive one conflicts with
every overlapping one, shared ones never with each other. The store keeps held
resources in a table ordered by path (store/leases.py): a resource's ancestors
are at most its depth of equality lookups, and its descendants one range, from
`path + "/"` up to `path + "0"` ('0' is the character after '/').
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .errors import InvalidArgument

RESOURCES_MAX = 16  # of each kind, per task
RESOURCE_MAX_CHARS = 200
# The character after '/': every descendant of `p` sorts in [p + '/', p + DESCENDANTS_END).
DESCENDANTS_END = "0"
# Past every character a resource may hold (control characters are refused): a path is
# the only resource in [p, p + EXACT_END). Lets one range test do an equality lookup.
EXACT_END = "\x01"


def check_resources(field: str, exclusive: Sequence[str], shared: Sequence[str]) -> None:
    """A spec's resources, `field` naming the spec ("tasks[3]"): each well formed, at most
    RESOURCES_MAX of a kind, and no two of the task overlapping (one listed both ways among
    them): a task never waits for itself, and what it holds is said once."""
    seen: list[tuple[str, str]] = []  # (resource, its field)
    for kind, values in (("resources", exclusive), ("shared_resources", shared)):
        if len(values) > RESOURCES_MAX:
            raise InvalidArgument(f"{field}.{kind}", f"more than {RESOURCES_MAX} resources")
        for index, value in enumerate(values):
            at = f"{field}.{kind}[{index}]"
            check_resource(at, value)
            for other, other_at in seen:
                if overlap(value, other):
                    how = "is the same as" if value == other else "overlaps"
                    raise InvalidArgument(at, f"{value!r} {how} {other_at} ({other!r})")
            seen.append((value, at))


def check_resource(field: str, value: str) -> None:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > RESOURCE_MAX_CHARS:
        raise InvalidArgument(field, f"longer than {RESOURCE_MAX_CHARS} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in value):
        raise InvalidArgument(field, "must not hold whitespace or a control character")
    if "\\" in value:
        raise InvalidArgument(field, "must not hold a backslash (segments are separated by '/')")
    for segment in value.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidArgument(field, f"has a segment {segment!r} (empty, '.' and '..' are refused)")


def overlap(a: str, b: str) -> bool:
    """Equal, or one the other's ancestor at a `/` boundary."""
    if len(a) > len(b):
        a, b = b, a
    return b == a or b.startswith(a + "/")


def ancestors_and_self(path: str) -> list[str]:
    """`a/b/c` -> [`a`, `a/b`, `a/b/c`]."""
    parts = path.split("/")
    return ["/".join(parts[: depth + 1]) for depth in range(len(parts))]


class WantedPath(NamedTuple):
    """A resource a task holds while claimed: a path, held exclusively or shared."""

    path: str
    exclusive: bool


def probes(wanted: Iterable[WantedPath]) -> list[list]:
    """The ranges of held paths that may conflict with `wanted` (path, exclusive) pairs, for
    the store's one-statement check: [wanted path, low, high, exclusive], a held path in
    [low, high) overlapping it. Its ancestors and itself are exact ranges, its descendants one."""
    rows: list[list] = []
    for path, exclusive in wanted:
        flag = 1 if exclusive else 0
        rows.extend([path, prefix, prefix + EXACT_END, flag] for prefix in ancestors_and_self(path))
        rows.append([path, path + "/", path + DESCENDANTS_END, flag])
    return rows


class PathSet:
    """Resources held or reserved, each exclusive or shared, asked what conflicts: a dict
    for the ancestors (equality lookups) and a sorted list for the descendants (one range)."""

    def __init__(self) -> None:
        self._exclusive: dict[str, bool] = {}  # path -> whether any holder of it is exclusive
        self._sorted: list[str] = []

    def __bool__(self) -> bool:
        return bool(self._sorted)

    def add(self, path: str, exclusive: bool) -> None:
        if path not in self._exclusive:
            bisect.insort(self._sorted, path)
            self._exclusive[path] = exclusive
        elif exclusive:
            self._exclusive[path] = True

    def add_all(self, wanted: Iterable[WantedPath]) -> None:
        for path, exclusive in wanted:
            self.add(path, exclusive)

    def conflicts(self, path: str, exclusive: bool) -> bool:
        """Whether a resource `path` (exclusive or not) conflicts with one in the set."""
        for prefix in ancestors_and_self(path):
            held = self._exclusive.get(prefix)
            if held is not None and (exclusive or held):
                return True
        start = bisect.bisect_left(self._sorted, path + "/")
        end = bisect.bisect_left(self._sorted, path + DESCENDANTS_END, start)
        if exclusive:
            return end > start
        return any(self._exclusive[self._sorted[i]] for i in range(start, end))

    def conflicts_any(self, wanted: Iterable[WantedPath]) -> bool:
        return any(self.conflicts(path, exclusive) for path, exclusive in wanted)
