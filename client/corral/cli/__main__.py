"""`python -m corral.cli` is the `corral` command."""

from corral.cli import main

main(prog_name="corral")
