"""The server files one Session completion enters: `python -m bench.walk`.

Starts corrald with a profile hook (a `sitecustomize` module in a scratch directory
put first on the daemon's PYTHONPATH), lets one teammate work through a few tasks on
a Session, and records every function of `server/corrald` entered, on any thread,
from the start of the `nth` completion's op (`SessionOps._complete`) to its answer:
the completion, its handoff of the next task, the writer job and commit between.
Prints the files in the order first entered, with the functions entered in each,
and marks the infrastructure every writer job or stream passes through (the
writer's queue and commit, the stream loop, wake-ups), which a reader following a
completion does not open.

    python -m bench.walk            # the 3rd completion (the first ones warm caches up)
    python -m bench.walk --nth 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import textwrap

REPO = pathlib.Path(__file__).resolve().parents[1]
SERVER = REPO / "server" / "corrald"

# Entered by every writer job or stream whatever it does, or by the loop's own timers
# (the loop-lag sampler) while the op runs.
INFRASTRUCTURE = frozenset(
    {
        "writer.py",
        "overload/costs.py",
        "overload/fairqueue.py",
        "overload/queue_bound.py",
        "store/sqlite/storage.py",
        "store/guard.py",
        "store/boardclock.py",
        "clock.py",
        "failpoints.py",
        "looplag.py",
        "wake.py",
        "reaper.py",
        "activity.py",
        "service/interceptor.py",
        "service/teammate.py",
        "service/teamstream.py",
    }
)

# Runs inside the daemon (imported at its start through PYTHONPATH). Coroutine frames
# report a "return" at each suspension too; the op's final return is its answer, a tuple.
_HOOK = textwrap.dedent(
    """
    import json, os, sys, threading

    OUT, ROOT, NTH = os.environ["CORRAL_WALK_OUT"], os.environ["CORRAL_WALK_ROOT"], int(os.environ["CORRAL_WALK_NTH"])
    state = {"recording": False, "inside": False, "started": 0, "entered": []}

    def _completion(code):
        return code.co_name == "_complete" and code.co_filename.endswith("service/session.py")

    def _profile(frame, event, arg):
        code = frame.f_code
        if event == "call":
            if _completion(code) and not state["inside"]:
                state["inside"] = True
                state["started"] += 1
                state["recording"] = state["started"] == NTH
            if state["recording"] and code.co_filename.startswith(ROOT):
                state["entered"].append([code.co_filename[len(ROOT):], code.co_qualname])
        elif event == "return" and _completion(code) and isinstance(arg, tuple):
            state["inside"] = False
            if state["recording"]:
                state["recording"] = False
                with open(OUT + ".part", "w") as out:
                    json.dump(state["entered"], out)
                os.replace(OUT + ".part", OUT)

    sys.setprofile(_profile)
    threading.setprofile(_profile)
    """
)


def walk(nth: int = 3) -> list[tuple[str, list[str]]]:
    """(file under server/corrald, functions entered there) in the order first entered."""
    import corral  # the SDK drives the daemon; imported here so `--help` needs no daemon

    with tempfile.TemporaryDirectory(prefix="corral-walk-") as scratch:
        (pathlib.Path(scratch) / "sitecustomize.py").write_text(_HOOK)
        out = pathlib.Path(scratch) / "entered.json"
        env = {
            "CORRAL_WALK_OUT": str(out),
            "CORRAL_WALK_ROOT": f"{SERVER}/",
            "CORRAL_WALK_NTH": str(nth),
            "PYTHONPATH": os.pathsep.join(filter(None, [scratch, str(REPO / "server"), os.environ.get("PYTHONPATH")])),
        }
        os.environ["CORRAL_TRANSPORT"] = "session"
        with corral.Lead.launch(env=env) as lead:
            lead.create_tasks([corral.TaskSpec(id=f"walk-{i}", title=f"walk {i}") for i in range(nth + 2)])
            mate = lead.add_teammate("walker")
            corral.run_teammate(
                lambda task: b"done", address=lead.address, token=mate.token, max_idle_polls=1, poll_interval=0.2
            )
        if not out.exists():
            raise SystemExit(f"no completion number {nth} was recorded: did the teammate complete that many tasks?")
        entered = json.loads(out.read_text())
    by_file: dict[str, set[str]] = {}
    for file, function in entered:
        by_file.setdefault(file, set()).add(function)
    return [(file, sorted(functions)) for file, functions in by_file.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nth", type=int, default=3, help="which completion of the teammate to record")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    files = walk(args.nth)
    followed = [file for file, _ in files if file not in INFRASTRUCTURE]
    if args.json:
        print(json.dumps({"files": dict(files), "followed": followed}, indent=2))
        return
    for file, functions in files:
        mark = "  (infrastructure)" if file in INFRASTRUCTURE else ""
        print(f"{file}{mark}: {', '.join(functions)}")
    print(f"\n{len(files)} files entered; {len(followed)} a reader follows (infrastructure aside):")
    print("\n".join(f"  {i}. {file}" for i, file in enumerate(followed, 1)))


if __name__ == "__main__":
    sys.exit(main())
