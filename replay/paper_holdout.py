"""The old name of `python -m replay.studies.efficientagent.holdout`, kept so that command lines
written before the study moved into `replay/studies/` still run. New code imports the study."""

import sys

from replay.studies.efficientagent.holdout import main

if __name__ == "__main__":
    sys.exit(main())
