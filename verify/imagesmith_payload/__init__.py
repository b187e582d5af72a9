"""The in-container verification payload of imagesmith.

Standard library + torch only (Python >= 3.9).  Importing this package imports
neither torch nor the checks; `main()` does.
"""

from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .cli import main as cli_main
    return cli_main(argv)
