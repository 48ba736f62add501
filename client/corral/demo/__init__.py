"""`corral demo`: a daemon, a sample task DAG and a team of teammate processes.

`run_demo()` is what `corral demo` (and `make demo`) runs; the teammates are
`python -m corral.demo.worker` processes; the DAG is `sample_dag.toml`.
"""

import os

# Like the CLI: the demo's output is its own, not gRPC core's (read at grpc's import).
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from corral.demo.report import DemoReport
from corral.demo.runner import load_sample_dag, run_demo
from corral.demo.team import DemoFailed

__all__ = ["DemoFailed", "DemoReport", "load_sample_dag", "run_demo"]
