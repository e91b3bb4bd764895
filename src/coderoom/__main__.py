"""`python -m coderoom` is the `coderoom` command."""

from .cli import main

main()
