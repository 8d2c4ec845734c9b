"""The EfficientAgent study (KV offload for SWE agents on an H20) against our paper-* runs.

`claims` holds every published number once, with its source and its verdict's tolerance;
`measures` gives our value from the results; `verdict` judges each claim by one evaluation;
`page` and `text` write docs/paper.md; `holdout` is the held-out check of the working-set model.
"""

from replay.studies.efficientagent.claims import CLAIMS, STUDY, claim
from replay.studies.efficientagent.page import (
    build_paper,
    load_paper_runs,
    reappearing_fraction,
    trace_facts,
    write_paper,
)
from replay.studies.efficientagent.runs import PAPER_EXPERIMENTS, PaperRun
from replay.studies.efficientagent.verdict import DIRECTION, NO, NOT_RUN, YES, Row, paper_rows

__all__ = [
    "CLAIMS",
    "STUDY",
    "claim",
    "build_paper",
    "load_paper_runs",
    "reappearing_fraction",
    "trace_facts",
    "write_paper",
    "PAPER_EXPERIMENTS",
    "PaperRun",
    "DIRECTION",
    "NO",
    "NOT_RUN",
    "YES",
    "Row",
    "paper_rows",
]
