"""Checks of a board's dependency graph, read as task -> the tasks it depends on."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping


def a_cycle(graph: Mapping[Hashable, Iterable[Hashable]]) -> list | None:
    """A cycle of the graph as a closed path (`[a, c, b, a]`), or None: an iterative DFS."""
    colour: dict[Hashable, int] = {}  # 1 on the path, 2 done
    for root in sorted(graph, key=repr):
        if colour.get(root):
            continue
        path, stack = [root], [iter(sorted(graph.get(root, ()), key=repr))]
        colour[root] = 1
        while stack:
            following = next(stack[-1], None)
            if following is None:
                colour[path.pop()] = 2
                stack.pop()
            elif colour.get(following) == 1:
                return [*path[path.index(following) :], following]
            elif not colour.get(following):
                colour[following] = 1
                path.append(following)
                stack.append(iter(sorted(graph.get(following, ()), key=repr)))
    return None
