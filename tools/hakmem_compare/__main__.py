"""python3 <dir>/hakmem_compare [OPTIONS] -- CMD [ARGS...]: `hakmem compare`."""

import os
import sys

# No bytecode files: installed, the package lives in a data directory that
# the package manager owns.
sys.dont_write_bytecode = True
# Run as `python3 DIR`, DIR itself is sys.path[0]; the package's parent is
# what its imports need.
_here = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
    sys.path[0] = os.path.dirname(_here)
else:
    sys.path.insert(0, os.path.dirname(_here))

from hakmem_compare.cli import main  # noqa: E402

sys.exit(main())
