"""``python -m agentrag_verl.demo``."""

import sys

from agentrag_verl.demo.main import main

sys.exit(main())
