"""Pure analysis of results directories: run tables, repeat statistics, comparisons, predictions."""

from replay.analysis.aggregate import Stats, aggregate, describe, point_table
from replay.analysis.compare import Comparison, all_comparisons, compare_levels, welch_compare
from replay.analysis.derived import TIER_PARAM, add_derived
from replay.analysis.load import Results, load_calls, load_results
from replay.analysis.predictions import compare_predictions, prediction_table

__all__ = [
    "TIER_PARAM",
    "Comparison",
    "Results",
    "Stats",
    "add_derived",
    "aggregate",
    "all_comparisons",
    "compare_levels",
    "compare_predictions",
    "describe",
    "load_calls",
    "load_results",
    "point_table",
    "prediction_table",
    "welch_compare",
]
