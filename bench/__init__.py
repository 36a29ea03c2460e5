"""Switchyard's benchmark suite: `python -m bench run [--quick] [--out DIR]`."""
