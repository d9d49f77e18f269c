"""``python -m retriever_server``: see :mod:`retriever_server.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
