"""`report.md` and `figures/` for one results directory: tables with intervals, predictions and
their errors, figures, and a generated "what is real" section.

Analysis is pure (`replay.analysis`); this package is the edge that reads calls, draws, writes
files. `write` puts the page together from the sections in `runs`, `measured` and `figures`;
`markdown` holds the table helper every generated page uses (docs/paper.md too).
"""

from replay.report.write import ReportOutput, build_report, write_report

__all__ = ["ReportOutput", "build_report", "write_report"]
