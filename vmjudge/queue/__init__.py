"""The durable entry queue and spool (SQLite, WAL): built with the evaluation pipeline."""
