#!/usr/bin/env python3
"""imagesmith verification payload: `python3 verify/run.py --help`.

Standard library + torch only; runs inside an image or on a bare GPU host.
"""

import os
import sys

if sys.version_info < (3, 9):
    sys.stderr.write("imagesmith payload needs Python >= 3.9, found %s\n" % sys.version.split()[0])
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from imagesmith_payload import main

if __name__ == "__main__":
    sys.exit(main())
