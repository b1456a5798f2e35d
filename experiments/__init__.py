"""Command-line programs: train one run, compare runs, sweep a grid."""
