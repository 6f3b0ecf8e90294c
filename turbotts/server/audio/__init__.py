"""Audio after synthesis: encoding, time-stretch, the sample timeline and captions. No FastAPI."""
