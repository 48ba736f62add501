"""`python -m corral`: the `corral` command."""

from corral.cli import main

main(prog_name="corral")
