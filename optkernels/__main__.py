"""``python -m optkernels``: the command line (see :mod:`optkernels.cli`)."""

import os
import sys

from optkernels.cli import main

try:
    code: str | int | None
    try:
        code = main()
    except SystemExit as done:  # argparse's --help and usage errors
        code = done.code
    sys.stdout.flush()
except BrokenPipeError:
    # The reader went away (``python -m optkernels demo | head``): stop quietly, as Unix tools do, instead of
    # a traceback; stdout goes to devnull so that the interpreter's final flush cannot fail again.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
sys.exit(code)
