"""The task DAG with states, as Mermaid or Graphviz DOT text.

Edges point from a dependency to its dependent (the order work flows in).
Node ids are generated (`t0`, `t1`, ...) because task ids may hold
characters either syntax would misread; the task id is the label.
"""

from __future__ import annotations

from collections.abc import Sequence

import corral
from corral._terminal.output import state_name

# state -> (fill, stroke) shared by both formats
_COLOURS = {
    corral.TaskState.PENDING: ("#fff3cd", "#b8860b"),
    corral.TaskState.IN_PROGRESS: ("#cfe8ff", "#1f6feb"),
    corral.TaskState.COMPLETED: ("#d4f7d4", "#2da44e"),
    corral.TaskState.FAILED: ("#ffd7d5", "#cf222e"),
    corral.TaskState.CANCELED: ("#eeeeee", "#8c959f"),
    corral.TaskState.NEEDS_INPUT: ("#ffe2c4", "#d4661c"),
    corral.TaskState.IN_REVIEW: ("#e8dcff", "#8250df"),
    corral.TaskState.PROPOSED: ("#f6f8fa", "#57606a"),
}
# A proposed task is not on the plan until the Lead approves it: drawn dashed.
_DASHED = frozenset({corral.TaskState.PROPOSED})


def _node_ids(tasks: Sequence[corral.Task]) -> dict[str, str]:
    return {task.id: f"t{index}" for index, task in enumerate(tasks)}


def _label_lines(task: corral.Task) -> list[str]:
    lines = [task.id]
    if task.title and task.title != task.id:
        lines.append(task.title if len(task.title) <= 40 else task.title[:39] + "…")
    detail = state_name(task.state)
    if task.owner:
        detail += f" · {task.owner}"
    if task.state is corral.TaskState.PROPOSED and task.proposed_by:
        detail += f" · by {task.proposed_by}"
    if task.attempt > 1:
        detail += f" · attempt {task.attempt}"
    lines.append(detail)
    return lines


def _edges(tasks: Sequence[corral.Task], ids: dict[str, str]) -> list[tuple[str, str, str]]:
    """(from, to, external dep name or "") — deps not in `tasks` get a stub node."""
    edges = []
    for task in tasks:
        for dep in task.depends_on:
            edges.append((ids.get(dep, ""), ids[task.id], "" if dep in ids else dep))
    return edges


def mermaid(tasks: Sequence[corral.Task]) -> str:
    """A Mermaid flowchart; nodes get a class per state."""
    ids = _node_ids(tasks)
    out = ["flowchart TD"]
    for task in tasks:
        label = "<br/>".join(_mermaid_escape(line) for line in _label_lines(task))
        out.append(f'    {ids[task.id]}["{label}"]:::{state_name(task.state)}')
    externals: dict[str, str] = {}
    for source, target, external in _edges(tasks, ids):
        if external:
            source = externals.setdefault(external, f"x{len(externals)}")
        out.append(f"    {source} --> {target}")
    for name, node in externals.items():
        out.append(f'    {node}(["{_mermaid_escape(name)}"])')
    for state, (fill, stroke) in _COLOURS.items():
        dashes = ",stroke-dasharray:5 5" if state in _DASHED else ""
        out.append(f"    classDef {state_name(state)} fill:{fill},stroke:{stroke},color:#111{dashes}")
    return "\n".join(out) + "\n"


def _mermaid_escape(text: str) -> str:
    return "".join(_MERMAID_ENTITIES.get(ch, ch) for ch in text)


_MERMAID_ENTITIES = {'"': "#quot;", "<": "#lt;", ">": "#gt;", "#": "#35;", "\n": " "}


def dot(tasks: Sequence[corral.Task]) -> str:
    """A Graphviz digraph; nodes are filled by state."""
    ids = _node_ids(tasks)
    out = [
        "digraph corral {",
        "    rankdir=TB;",
        '    node [shape=box, style="rounded,filled", fontname="Helvetica"];',
    ]
    for task in tasks:
        fill, stroke = _COLOURS[task.state]
        label = "\\n".join(_dot_escape(line) for line in _label_lines(task))
        style = ', style="rounded,filled,dashed"' if task.state in _DASHED else ""
        out.append(f'    {ids[task.id]} [label="{label}", fillcolor="{fill}", color="{stroke}"{style}];')
    externals: dict[str, str] = {}
    for source, target, external in _edges(tasks, ids):
        if external:
            source = externals.setdefault(external, f"x{len(externals)}")
        out.append(f"    {source} -> {target};")
    for name, node in externals.items():
        out.append(f'    {node} [label="{_dot_escape(name)}", style=dashed];')
    out.append("}")
    return "\n".join(out) + "\n"


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
