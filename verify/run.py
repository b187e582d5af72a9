#!/usr/bin/env python3
"""imagesmith verification payload: `python3 verify/run.py --help`.

Standard library + torch only; runs inside an image or on a bare GPU host.
"""

import os
import sys

# The first line, before any import that could fail: the host tells "the payload started and then died" from
# "whatever ran in its place (an ENTRYPOINT, a shell) never started it" by this line.
sys.stderr.write("imagesmith payload: started (Python %s, %s)\n" % (sys.version.split()[0], sys.executable))
sys.stderr.flush()
if sys.version_info < (3, 9):
    sys.stderr.write("imagesmith payload needs Python >= 3.9, found %s\n" % sys.version.split()[0])
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from imagesmith_payload import main  # noqa: E402 - after the started line, which must come first

if __name__ == "__main__":
    sys.exit(main())
