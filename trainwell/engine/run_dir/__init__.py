"""The run directory's files: its layout, the metrics CSV and JSON, and its lock."""
