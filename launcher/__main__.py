"""`python -m launcher <command>`."""

from launcher.cli import main

main()
