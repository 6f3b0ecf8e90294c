"""The speech path: checks, admission, segments, the cache, the pipeline and the job a route streams. No FastAPI."""
