"""miopen-bn-driver: run, verify and time one batch-norm or group-norm layer
from MIOpenDriver's command line (``miopen-bn-driver bnorm -n 32 -c 256 ...``).

The modules: ``arguments`` (the command line), ``tensors`` (random data in
the requested layout), ``memory`` (host or device arrays),
``batchnorm_ops`` / ``groupnorm_ops`` (one library call per direction and its
reference), ``runner`` (calls and times), ``sampling`` (which channels are
verified), ``report`` (what is printed), ``progress``, and ``cli`` (``main``).
"""

from .cli import main

__all__ = ["main"]
