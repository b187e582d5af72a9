"""``python -m imagesmith.cli``: the command line, as the ``imagesmith`` script starts it."""

from imagesmith.cli import main

main()
