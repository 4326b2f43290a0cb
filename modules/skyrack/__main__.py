"""`python -m skyrack` runs the command line."""

from .cli import main

main()
