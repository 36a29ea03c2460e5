"""What the tests and the benchmarks both use: the local platform started as real
processes (``local_platform``), in-memory fakes of the core's stores for unit tests
and micro-benchmarks (``fakes``), the events AWS sends the functions
(``lambda_events``), the worker's log read back (``worker_log``), scaling scenarios,
and waiting on a condition. Neither ``tests`` nor ``bench`` imports the other."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where ``make models`` builds the demo models' artifacts.
MODELS_DIR = ROOT / "build" / "models"
