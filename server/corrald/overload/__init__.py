"""Overload control: how the daemon keeps one caller from crowding out the others.

`lanes` (per-identity lanes for calls and streams, with a bounded wait),
`pacing` (a teammate far above the team's rate of daemon time waits its turn),
`costs` (what each caller's writer jobs took, for pacing),
`queue_bound` (the writer queue's limit and its waiting room), `fairqueue`
(the writer serves the least-served caller first), `reopen` (Idle opens of
one teammate are spaced apart) and `heap` (what big requests leave in the heap
is given back). `server/DESIGN.md` explains them together.
"""
