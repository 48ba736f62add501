"""corral on asyncio: the same shapes as `corral`, with awaitable calls and
async iterators, built on `grpc.aio`.

    async with await corral.aio.Lead.launch() as lead:
        await lead.create_tasks([corral.TaskSpec("a")])
        new = await lead.add_teammate("ann")
        ...

Value types, enums and exceptions are shared with `corral`.
"""

from corral.aio._claim import Claim
from corral.aio._lead import Lead
from corral.aio._runner import current_claim, output, run_teammate
from corral.aio._teammate import IdleEvent, Teammate

__all__ = [
    "Claim",
    "IdleEvent",
    "Lead",
    "Teammate",
    "current_claim",
    "output",
    "run_teammate",
]
