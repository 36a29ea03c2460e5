"""The worker service: one per model, long-polling its queues in micro-batches."""
