"""A CreateTasks batch too big for one request, sent in parts.

The daemon takes request messages of at most 6 MiB (`MESSAGE_MAX_BYTES`), and
refuses a bigger one unread (RESOURCE_EXHAUSTED). That holds every request
but a CreateTasks batch of specs with big payloads: the daemon's limits allow
10,000 specs of up to 1.55 MiB each. Such a batch goes in parts, in an order
where each task comes after the tasks of the batch it depends on, so every
part depends only on itself, the parts before it and the board. Each part is
created all or nothing; the batch as a whole is not: if a part is refused,
the parts before it stay created (the error says which). Sending the same
batch again is safe: each part carries a request id derived from the batch's
(when it has one), and a spec already on the board unchanged is answered as
it is, so the parts created before are not created twice.

What can be checked before sending anything is: a batch whose ids repeat or
whose dependencies form a cycle has no such order (the daemon would refuse it
whole), and a spec bigger than a request on its own cannot be sent at all.
Those are refused here with InvalidArgument, and nothing is sent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterator

from corral._errors import CorralError, FieldViolation, InvalidArgument
from corral.v1 import corral_pb2 as pb

# The daemon's receive limit (corrald.config.MESSAGE_MAX_BYTES; a test holds them equal).
MESSAGE_MAX_BYTES = 6 * 1024 * 1024
# The daemon's bound on a request id (design §7, ids and names: 128 characters).
_REQUEST_ID_MAX_CHARS = 128


@dataclasses.dataclass(frozen=True)
class Part:
    """One CreateTasks request of a batch: `positions[j]` is where its `tasks[j]` stands in the batch."""

    request: pb.CreateTasksRequest
    positions: tuple[int, ...]


def parts(request: pb.CreateTasksRequest, max_bytes: int = MESSAGE_MAX_BYTES) -> list[Part]:
    """`request` as it is when it fits in one message, else in parts that each fit."""
    if request.ByteSize() <= max_bytes:
        return [Part(request, tuple(range(len(request.tasks))))]
    specs = request.tasks
    _refuse_repeated_ids(specs)
    budget = max_bytes - _derived_request_id_bytes(request.request_id)
    groups: list[list[int]] = [[]]
    size = 0
    for index in _dependency_order(specs):
        cost = _field_bytes(specs[index].ByteSize())
        if cost > budget:
            raise InvalidArgument(
                f"tasks[{index}] ({specs[index].id!r}) is {cost} bytes, more than a request may carry"
                f" ({max_bytes} bytes): its payload, description or dependencies are over the daemon's limits;"
                " nothing was sent",
                field_violations=[FieldViolation(f"tasks[{index}]", "larger than a request may carry")],
            )
        if size + cost > budget and groups[-1]:
            groups.append([])
            size = 0
        groups[-1].append(index)
        size += cost
    return [
        Part(
            pb.CreateTasksRequest(
                tasks=[specs[i] for i in group],
                request_id=_part_request_id(request.request_id, number, len(groups)),
            ),
            tuple(group),
        )
        for number, group in enumerate(groups, start=1)
    ]


def _field_bytes(size: int) -> int:
    """What a message of `size` bytes takes as one element of a repeated field: tag, length, body."""
    return 1 + _varint_bytes(size) + size


def _varint_bytes(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _part_request_id(request_id: str, number: int, count: int) -> str:
    """Part `number` of `count`'s request id: the batch's with `#number/count`, within the
    daemon's bound (a long id is replaced by its digest); none when the batch has none."""
    if not request_id:
        return ""
    suffix = f"#{number}/{count}"
    if len(request_id) + len(suffix) > _REQUEST_ID_MAX_CHARS:
        request_id = hashlib.sha256(request_id.encode("utf-8", "surrogatepass")).hexdigest()[:64]
    return request_id + suffix


def _derived_request_id_bytes(request_id: str) -> int:
    longest = _part_request_id(request_id, 99_999, 99_999)
    return _field_bytes(len(longest.encode("utf-8", "surrogatepass"))) if longest else 0


def _refuse_repeated_ids(specs) -> None:
    seen: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if spec.id in seen:
            raise InvalidArgument(
                f"tasks[{index}].id: duplicate id {spec.id!r} (also tasks[{seen[spec.id]}]); nothing was sent",
                field_violations=[FieldViolation(f"tasks[{index}].id", f"duplicate id {spec.id!r}")],
            )
        seen[spec.id] = index


def _dependency_order(specs) -> list[int]:
    """The batch's positions, each after the positions of the batch it depends on, otherwise
    as given (a depth-first walk, without recursion: a chain may be 10,000 tasks long)."""
    position = {spec.id: index for index, spec in enumerate(specs)}

    def inside(index: int) -> Iterator[int]:
        return (position[dep] for dep in specs[index].depends_on if dep in position)

    order: list[int] = []
    state = [0] * len(specs)  # 0: not yet, 1: on the walk, 2: placed
    for root in range(len(specs)):
        if state[root]:
            continue
        state[root] = 1
        walk = [(root, inside(root))]
        while walk:
            index, deps = walk[-1]
            for dep in deps:
                if state[dep] == 0:
                    state[dep] = 1
                    walk.append((dep, inside(dep)))
                    break
                if state[dep] == 1:
                    cycle = [i for i, _ in walk[[i for i, _ in walk].index(dep) :]] + [dep]
                    path = " → ".join(specs[i].id for i in cycle)
                    raise InvalidArgument(
                        f"tasks[{dep}].depends_on: dependency cycle: {path}; nothing was sent",
                        field_violations=[FieldViolation(f"tasks[{dep}].depends_on", f"dependency cycle: {path}")],
                    )
            else:
                walk.pop()
                state[index] = 2
                order.append(index)
    return order


_POSITION = re.compile(r"tasks\[(\d+)\]")


def part_refused(error: CorralError, part: Part, done: list[Part]) -> CorralError:
    """`error`, raised by `part`, told in the batch's terms: the positions it names are
    the batch's, and it says what the parts sent before it (`done`) created."""

    def batch_positions(text: str) -> str:
        def moved(match: re.Match[str]) -> str:
            j = int(match.group(1))
            return f"tasks[{part.positions[j]}]" if j < len(part.positions) else match.group(0)

        return _POSITION.sub(moved, text)

    if done:
        created = sum(len(p.positions) for p in done)
        note = (
            f" (the batch was too big for one request and went in parts: the {len(done)} before this one"
            f" created {created} of its tasks, which stay on the board; sending the same batch again"
            " creates the rest)"
        )
    else:
        note = " (the batch was too big for one request and went in parts; the first was refused: nothing was created)"
    error.details = batch_positions(error.details) + note
    error.args = (error.details,)
    error.metadata = {key: batch_positions(value) for key, value in error.metadata.items()}
    if isinstance(error, InvalidArgument):
        error.field_violations = tuple(
            FieldViolation(batch_positions(v.field), batch_positions(v.description)) for v in error.field_violations
        )
    return error
