"""Tables: trace ingestion, the pair engine and the one pair reader, splits, quality functions and Great Expectations validation."""
