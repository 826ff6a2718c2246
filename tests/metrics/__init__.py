"""Tests of llmsim.metrics: hand-worked counters and buckets, the sketch's accuracy, the page and the summary."""
