"""``python -m bench run [--quick] [--out docs]``: every section in one process run,
then the report (``benchmarks.md``, ``benchmarks.json``, ``img/*.png``).
``python -m bench soak [--minutes 30]``: the soak (``bench/soak.py``).

Sections run one after another, never side by side, so that each has the machine
to itself: model limit, worker efficiency, AWS calls and router cold start (on a
private emulator), the emulator's SQS under a backlog, async bursts draining on the
local platform, end to end on the local platform (micro-batching on, then off),
the two peers (LitServe, then Ray Serve with ``@serve.batch``), scaling from zero,
generation (time to first token and tokens/s of streamed ``pydoc-gpt``: bare
transformers, the platform, LitServe), the streaming transport, pools (a long
tail of models on one pool against a service per model), and a noisy neighbour (one
tenant's sync calls while another floods the same model). A section that fails is
recorded and the others still run; the exit status is non-zero if any failed.

``python -m bench run --only pools --merge`` runs one section and puts its figures
in place of its own in the report already in ``--out``; ``python -m bench.report``
writes the page again from the stored figures, without a run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ROOT, TENSOR_MODEL, TEXT_MODEL, load_average, machine_info, wait_for_quiet

SECTIONS = (
    "model_limit",
    "worker_efficiency",
    "aws_calls",
    "emulator_backlog",
    "emulator_calls",
    "backlog",
    "batch_memory",
    "batch_realtime",
    "end_to_end",
    "peer_litserve",
    "peer_rayserve",
    "scaling",
    "generation",
    "stream_transport",
    "pools",
    "noisy_neighbour",
)
# Each peer's comparison with the platform (micro-batching on): where it is stored
# in the results, and the peer section it is made from.
PEER_COMPARISONS = {"comparison": "peer_litserve", "comparison_rayserve": "peer_rayserve"}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(
    quick: bool, out_dir: Path, only: set[str], quiet_wait_s: float, merge: bool = False
) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.perf_counter()
    if quiet_wait_s > 0:
        wait_for_quiet(quiet_wait_s, 1.0, log)
    results: dict[str, Any] = {
        "quick": quick,
        "machine": machine_info(),
        "sections": {},
        "timing": {},
    }
    failed: list[str] = []

    def section(name: str, fn: Callable[[], Any]) -> Any:
        log(f"{name}: start (load average {load_average()})")
        meta: dict[str, Any] = {"load_before": load_average()}
        t0 = time.perf_counter()
        value = None
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - one failed section must not lose the rest
            traceback.print_exc()
            meta["error"] = f"{type(exc).__name__}: {exc}"[:300]
            failed.append(name)
        meta["seconds"] = round(time.perf_counter() - t0, 1)
        meta["load_after"] = load_average()
        results["timing"][name] = meta
        log(f"{name}: done in {meta['seconds']} s")
        return value

    from bench import model_limit

    models: dict[str, Any] = {}
    if only & {"model_limit", "worker_efficiency", "aws_calls", "backlog", "batch_realtime"}:
        models = (
            section(
                "load_models",
                lambda: {
                    TEXT_MODEL: model_limit.load_text_model(),
                    TENSOR_MODEL: model_limit.load_tensor_model(),
                },
            )
            or {}
        )
    if "model_limit" in only and models:
        results["sections"]["model_limit"] = section(
            "model_limit", lambda: model_limit.run(models, quick)
        )
    if "worker_efficiency" in only and models:
        from bench import worker_efficiency

        results["sections"]["worker_efficiency"] = section(
            "worker_efficiency", lambda: worker_efficiency.run(models, quick)
        )
    result_write_ms = None
    if "aws_calls" in only and models:
        from bench import aws_calls, cold_start
        from bench.emulator import emulator

        def aws_and_cold() -> None:
            with emulator() as emu:
                results["sections"]["aws_calls"] = aws_calls.run(
                    emu, models[TEXT_MODEL].runtime, quick, log
                )
                results["sections"]["cold_start"] = cold_start.run(emu, quick, log)

        section("aws_calls_and_cold_start", aws_and_cold)
        result_write_ms = (results["sections"].get("aws_calls") or {}).get("result_write_ms")
    if "emulator_backlog" in only:
        from bench import emulator_backlog

        results["sections"]["emulator_backlog"] = section(
            "emulator_backlog", lambda: emulator_backlog.run(quick)
        )
    if "emulator_calls" in only:
        from bench import emulator_calls

        results["sections"]["emulator_calls"] = section(
            "emulator_calls", lambda: emulator_calls.run(quick)
        )
    if "backlog" in only and models:
        from bench import backlog

        results["sections"]["backlog"] = section(
            "backlog", lambda: backlog.run(models[TEXT_MODEL], quick, log)
        )
    if "batch_memory" in only:
        from bench import batch_jobs

        results["sections"]["batch_memory"] = section(
            "batch_memory", lambda: batch_jobs.memory_run(quick, log)
        )
    if "batch_realtime" in only and models:
        from bench import batch_jobs

        results["sections"]["batch_realtime"] = section(
            "batch_realtime", lambda: batch_jobs.realtime_run(models[TEXT_MODEL], quick, log)
        )
    models.clear()  # free the in-process models before the platform's own start
    if "end_to_end" in only:
        from bench import end_to_end

        results["sections"]["end_to_end"] = section(
            "end_to_end", lambda: end_to_end.run(quick, log, result_write_ms)
        )
    if "peer_litserve" in only:
        from bench import peer_litserve

        results["sections"]["peer_litserve"] = section(
            "peer_litserve", lambda: peer_litserve.run(quick, log)
        )
    if "peer_rayserve" in only:
        from bench import peer_rayserve

        results["sections"]["peer_rayserve"] = section(
            "peer_rayserve", lambda: peer_rayserve.run(quick, log)
        )
    if "scaling" in only:
        from bench import scaling

        results["sections"]["scaling"] = section("scaling", lambda: scaling.run(quick, log))
    if "generation" in only:
        from bench import generation

        results["sections"]["generation"] = section(
            "generation", lambda: generation.run(quick, log)
        )
    if "stream_transport" in only:
        from bench import stream_transport

        results["sections"]["stream_transport"] = section(
            "stream_transport", lambda: stream_transport.run(quick, log)
        )
    if "pools" in only:
        from bench import pools

        results["sections"]["pools"] = section("pools", lambda: pools.run(quick, log))
    if "noisy_neighbour" in only:
        from bench import noisy_neighbour

        results["sections"]["noisy_neighbour"] = section(
            "noisy_neighbour", lambda: noisy_neighbour.run(quick, log)
        )
    from bench import report

    results.update(peer_comparisons(results["sections"]))
    results["sections"] = {k: v for k, v in results["sections"].items() if v is not None}
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    results["failed_sections"] = failed
    if merge:
        results = merged(out_dir / "benchmarks.json", results)
    written = report.write(results, out_dir)
    log(f"wrote {', '.join(str(p) for p in written)} in {results['wall_seconds']} s")
    if failed:
        log(f"failed sections: {', '.join(failed)}")
    return 1 if failed else 0


def peer_comparisons(sections: dict[str, Any]) -> dict[str, Any]:
    """Each peer's comparison with the platform (micro-batching on), where both
    sections have figures."""
    from bench import report

    platform = (sections.get("end_to_end") or {}).get("batching_on")
    out = {}
    for key, peer_section in PEER_COMPARISONS.items():
        peer = sections.get(peer_section)
        if platform and peer:
            out[key] = report.compare_peer(platform, peer)
    return out


def merged(previous_path: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """The report at ``previous_path`` with the sections just run put in place of
    its own (``--merge``): one section rerun without rerunning the rest. The report
    lists which sections were rerun, and when (each once: at its last rerun)."""
    import json

    if not previous_path.exists():
        return fresh
    report = json.loads(previous_path.read_text())
    report["sections"].update(fresh["sections"])
    report["timing"].update(fresh["timing"])
    for key in PEER_COMPARISONS:
        if key in fresh:  # made from the sections just run
            report[key] = fresh[key]
    # And made again from the sections as merged: a platform's rerun against the
    # peer's last figures, or a peer's rerun against the platform's.
    report.update(peer_comparisons(report["sections"]))
    # a section rerun again supersedes its earlier rerun: each is listed once, last
    rerun = set(fresh["timing"])
    earlier = [
        {**r, "sections": [x for x in r["sections"] if x not in rerun]}
        for r in report.get("reruns", [])
    ]
    report["reruns"] = [r for r in earlier if r["sections"]]
    report["reruns"].append(
        {
            "sections": sorted(fresh["timing"]),
            "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": fresh["machine"],
        }
    )
    report["failed_sections"] = sorted(
        set(report.get("failed_sections", [])) - set(fresh["timing"])
        | set(fresh["failed_sections"])
    )
    return report


def run_soak(minutes: float, rate: float, seed: int, out_dir: Path) -> int:
    """The soak; non-zero if a request was lost, answered twice or got a 5xx."""
    from bench import soak

    results = soak.run(minutes, rate, log, seed)
    written = soak.write(results, out_dir)
    accounting = results["accounting"]
    log(f"wrote {', '.join(str(p) for p in written)} in {results['wall_seconds']} s")
    log(f"{'passed' if accounting['passed'] else 'FAILED'}: {accounting['problems']}")
    return 0 if accounting["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    from bench.soak import DEFAULT_MINUTES, DEFAULT_RATE

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    go = commands.add_parser("run", help="run the suite and write the report")
    go.add_argument("--quick", action="store_true", help="short steps: about ten minutes in all")
    go.add_argument("--out", default=str(ROOT / "docs"), help="folder for the report files")
    go.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    go.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        help="wait up to this many seconds for the load average to fall below 1 first",
    )
    go.add_argument(
        "--merge",
        action="store_true",
        help="keep the report already in --out and replace only the sections run",
    )
    soak = commands.add_parser(
        "soak", help="mixed load on the local platform for a long time; writes soak.md/.json"
    )
    soak.add_argument(
        "--minutes", type=float, default=DEFAULT_MINUTES, help="how long the load runs"
    )
    soak.add_argument("--rate", type=float, default=DEFAULT_RATE, help="predicts per second")
    soak.add_argument("--seed", type=int, default=1, help="the mix and arrival times")
    soak.add_argument("--out", default=str(ROOT / "docs"), help="folder for soak.md and .json")
    args = parser.parse_args(argv)
    if args.command == "soak":
        if args.minutes <= 0 or args.rate <= 0:
            parser.error("--minutes and --rate must be above 0")
        return run_soak(args.minutes, args.rate, args.seed, Path(args.out))
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    return run(args.quick, Path(args.out), only, args.wait_quiet, args.merge)


if __name__ == "__main__":
    sys.exit(main())
