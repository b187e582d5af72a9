#!/usr/bin/env python3
"""Which ports listen here and which answer as Jupyter without a token: `python3 verify/probe.py [PORT ...]`.

Standard library only; the host runs it inside a container started with the image's own command.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from imagesmith_payload.probe import main

if __name__ == "__main__":
    sys.exit(main())
