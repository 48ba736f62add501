import os

from .cli import PROG_NAME_ENV, main

main(prog_name=os.environ.pop(PROG_NAME_ENV, None) or "python -m corrald")
