"""Two daemons, one PostgreSQL board: AddDependencies sent at once through both, trying to
close a cycle, leave none; exactly the last edge of each ring to commit is refused."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import spec
from tests.support.graphs import a_cycle
from tests.support.races import race

ROUNDS = 8


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ring", [2, 3])
def test_add_dependencies_through_two_daemons_never_close_a_cycle(shared_board, ring):
    daemons = [shared_board.daemon("a"), shared_board.daemon("b")]
    for round_ in range(ROUNDS):
        ids = [f"r{round_}.{k}" for k in range(ring)]
        daemons[0].create_tasks(*[spec(i) for i in ids])
        edges = [(ids[k], ids[(k + 1) % ring]) for k in range(ring)]
        calls = [
            lambda task=task, dep=dep, via=via: daemons[via].lead.lead.AddDependencies(
                pb.AddDependenciesRequest(task_id=task, depends_on=[dep])
            )
            for task, dep in edges
            for via in (0, 1)  # every edge through both daemons at once
        ]
        outcomes = race(calls, (grpc.RpcError,))
        assert all(o is not None for o in outcomes), "every call answered"
        refused = [o for o in outcomes if isinstance(o, grpc.RpcError)]
        assert all(o.code() == grpc.StatusCode.INVALID_ARGUMENT for o in refused), [o.details() for o in refused]
        assert all("dependency cycle: " in o.details() for o in refused)
        added = {edge for edge, o in zip([e for e in edges for _ in (0, 1)], outcomes, strict=True) if o not in refused}
        assert len(added) == ring - 1, (added, [o.details() for o in refused])
        with shared_board.connection() as conn:
            assert a_cycle(_graph(conn)) is None


def _graph(conn) -> dict[int, set[int]]:
    graph: dict[int, set[int]] = {}
    for task, dep in conn.execute("SELECT task_seq, dep_seq FROM deps").fetchall():
        graph.setdefault(task, set()).add(dep)
    return graph
