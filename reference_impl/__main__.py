"""`python -m reference_impl`: run the reference server (reference_impl/cli.py)."""

import sys

from reference_impl.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m reference_impl"))
