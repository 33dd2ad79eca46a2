"""Runnable examples (they need the ``dev`` extra: FastAPI and uvicorn)."""
