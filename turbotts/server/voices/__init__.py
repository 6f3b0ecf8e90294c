"""Voices: the stores (SQLite, Redis) and the service that resolves, saves and clones them. No FastAPI."""
