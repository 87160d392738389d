"""python -m sandgate: the CLI (sandgate-cli)."""
import sys

from .cli import main

sys.exit(main())
