"""The batch splitter function: dropped files become work on the batch lane."""
