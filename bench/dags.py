"""The two task graphs every system under test works through.

* ``independent``: T tasks, no dependencies (pure claim/complete throughput).
* ``layered``: layers of ``LAYER_WIDTH`` tasks; each task depends on two tasks of
  the layer before it, so completions keep unlocking work (ready detection and
  wake-ups are on the path).
"""

from __future__ import annotations

from corral.v1 import corral_pb2 as pb

LAYER_WIDTH = 64
DAGS = ("independent", "layered")


def graph(kind: str, count: int) -> list[tuple[str, tuple[str, ...]]]:
    """[(task id, dependency ids)] in creation order (dependencies come first)."""
    if kind == "independent":
        return [(f"t{i}", ()) for i in range(count)]
    if kind == "layered":
        out = []
        for i in range(count):
            layer, pos = divmod(i, LAYER_WIDTH)
            if layer == 0:
                deps: tuple[str, ...] = ()
            else:
                prev = f"t{(layer - 1) * LAYER_WIDTH + pos}"
                other = f"t{(layer - 1) * LAYER_WIDTH + (pos + 1) % LAYER_WIDTH}"
                deps = (prev, other)
            out.append((f"t{i}", deps))
        return out
    raise ValueError(f"unknown DAG {kind!r}")


def specs(kind: str, count: int, *, prefix: str = "", role: str = "") -> list[pb.TaskSpec]:
    return [
        pb.TaskSpec(
            id=prefix + task_id,
            title=f"bench {task_id}",
            payload=b"x" * 32,
            depends_on=[prefix + d for d in deps],
            required_role=role,
        )
        for task_id, deps in graph(kind, count)
    ]
