"""The engine: plan shards -> run them as Ray tasks under one shared limit -> publish Parquet."""
