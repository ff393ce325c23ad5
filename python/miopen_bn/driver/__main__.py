"""``python -m miopen_bn.driver`` is ``miopen-bn-driver``."""

import sys

from . import main

sys.exit(main())
