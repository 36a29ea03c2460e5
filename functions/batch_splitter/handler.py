"""Lambda entry point: S3 ObjectCreated events on the batch drop bucket."""

from switchyard_batch.splitter import handler

__all__ = ["handler"]
