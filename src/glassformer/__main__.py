"""``python -m glassformer VERB ...`` is the ``glassformer`` command (handy in notebooks and venvs)."""

import sys

from glassformer.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
