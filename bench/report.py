"""Writes what a run measured: ``benchmarks.json`` (every figure), ``benchmarks.md``
and PNG plots under ``img/``. The page's words and layout live in a template
(``bench/templates/benchmarks.md.j2``, one include per section); this module works out
what it shows, section by section: figures formatted as the page prints them, table
rows, and the figures a sentence picks (the largest cost, the rate both sustained).
A section the run did not have, or that failed, has no view and no place on the page."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import jinja2

from bench.common import ratio
from bench.goals import evaluate

IMG = "img"


def fmt(value: Any, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float | int):
        text = f"{value:,.{digits}f}" if isinstance(value, float) or digits else f"{value:,}"
        return text + unit
    return str(value)


def times(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}×"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# -- comparisons ---------------------------------------------------------------------


def compare_peer(platform: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """Sustainable rates as a ratio, and p99 of each at the rates both were tested at."""
    ours = {s["rate"]: s for s in platform.get("steps", [])}
    theirs = {s["rate"]: s for s in peer.get("steps", [])}
    common = sorted(set(ours) & set(theirs))
    rows = [
        {
            "rate": r,
            "platform_p99_ms": ours[r]["p99_ms"],
            "peer_p99_ms": theirs[r]["p99_ms"],
            "p99_ratio": ratio(ours[r]["p99_ms"], theirs[r]["p99_ms"]),
            "platform_sustained": ours[r]["sustained"],
            "peer_sustained": theirs[r]["sustained"],
        }
        for r in common
    ]
    both = [row["rate"] for row in rows if row["platform_sustained"] and row["peer_sustained"]]
    headline = max(both) if both else (common[0] if common else None)
    return {
        "platform_sustainable_rate": platform.get("sustainable_rate"),
        "peer_sustainable_rate": peer.get("sustainable_rate"),
        "rate_ratio": ratio(platform.get("sustainable_rate"), peer.get("sustainable_rate")),
        "common_rates": rows,
        "headline_rate": headline,
        "headline": next((row for row in rows if row["rate"] == headline), None),
    }


# -- plots ---------------------------------------------------------------------------


def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img = out_dir / IMG
    img.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    s = results["sections"]

    ml = s.get("model_limit", {}).get("models")
    we = s.get("worker_efficiency", {})
    if ml:
        fig, axes = plt.subplots(1, len(ml), figsize=(5.5 * len(ml), 4))
        axes = axes if len(ml) > 1 else [axes]
        for ax, (name, rows) in zip(axes, ml.items(), strict=True):
            b = [r["batch_size"] for r in rows]
            ax.plot(b, [r["model_inputs_per_s"] for r in rows], "o-", label="model (bare)")
            ax.plot(b, [r["runtime_inputs_per_s"] for r in rows], "s--", label="runtime wrapper")
            w = we.get(name, {})
            if w.get("inputs_per_s"):
                ax.plot(
                    [w["mean_batch_size"]],
                    [w["inputs_per_s"]],
                    "r*",
                    ms=14,
                    label="worker loop (mean batch)",
                )
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch size")
            ax.set_ylabel("inputs/s")
            ax.set_title(name)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(img / "model_limit.png", dpi=110)
        plt.close(fig)
        made.append("model_limit.png")

    e2e = s.get("end_to_end", {})
    peer = s.get("peer_litserve", {})
    targets = [
        ("platform, batching on", e2e.get("batching_on", {})),
        ("platform, batching off", e2e.get("batching_off", {})),
        ("LitServe (peer)", peer),
        ("Ray Serve (peer)", s.get("peer_rayserve", {})),
    ]
    if any(t.get("steps") for _, t in targets):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        for n, (label, t) in enumerate(targets):
            steps = t.get("steps") or []
            if not steps:
                continue
            color = f"C{n}"
            r = [x["rate"] for x in steps]
            a1.plot(r, [x["p99_ms"] for x in steps], "o-", color=color, label=f"{label} p99")
            a1.plot(
                r,
                [x["p50_ms"] for x in steps],
                ".:",
                color=color,
                alpha=0.6,
                label=f"{label} p50",
            )
            a2.plot(r, [x["throughput"] for x in steps], "o-", color=color, label=label)
        a1.axhline(500, color="grey", ls="--", lw=1)
        a1.set_yscale("log")
        a1.set_xlabel("offered rate (requests/s)")
        a1.set_ylabel("latency (ms)")
        a1.set_title("latency vs offered rate (minilm-embed)")
        a1.legend(fontsize=7)
        a1.grid(alpha=0.3)
        top = max((x["rate"] for _, t in targets for x in t.get("steps") or []), default=1)
        a2.plot([0, top], [0, top], color="grey", ls="--", lw=1)
        a2.set_xlabel("offered rate (requests/s)")
        a2.set_ylabel("completed (requests/s)")
        a2.set_title("throughput vs offered rate")
        a2.legend(fontsize=7)
        a2.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(img / "end_to_end.png", dpi=110)
        plt.close(fig)
        made.append("end_to_end.png")

    bars = []
    one = e2e.get("batching_on", {}).get("one_request")
    if one:
        bars.append(("one request at a time", one))
    at_rate = e2e.get("batching_on", {}).get("breakdown_at_sustainable_rate")
    if at_rate:
        rate = e2e["batching_on"]["sustainable_rate"]
        bars.append((f"at {fmt(rate, 0)} req/s", at_rate))
    if bars:
        fig, ax = plt.subplots(figsize=(10, 1.4 + 0.9 * len(bars)))
        names = [st["stage"] for st in bars[0][1]["stages"]]
        colors = plt.cm.tab10.colors
        for y, (_, b) in enumerate(bars):
            left = 0.0
            for i, st in enumerate(b["stages"]):
                ax.barh(
                    y,
                    st["mean_ms"],
                    left=left,
                    color=colors[i % 10],
                    label=names[i] if y == 0 else None,
                )
                left += st["mean_ms"]
        ax.set_yticks(range(len(bars)), [label for label, _ in bars])
        ax.set_xlabel("mean ms per request")
        ax.set_title("where the time goes (minilm-embed, sync predict)")
        ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.35))
        fig.tight_layout()
        fig.savefig(img / "breakdown.png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        made.append("breakdown.png")

    aws = s.get("aws_calls", {}).get("paths")
    if aws:
        paths = [p for p in ("sync", "async_one_at_a_time", "async_burst", "batch") if p in aws]
        parts = ["sqs", "dynamodb_writes", "dynamodb_reads", "s3", "firehose_prediction_log"]
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = [0.0] * len(paths)
        for part in parts:
            vals = [aws[p]["usd_per_million_inferences"].get(part, 0.0) for p in paths]
            ax.bar(paths, vals, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_ylabel("USD per million inferences")
        ax.set_title("AWS request cost by path (SQS, DynamoDB, S3, Firehose; us-east-1)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(img / "aws_cost.png", dpi=110)
        plt.close(fig)
        made.append("aws_cost.png")
    made += _scaling_plots(s.get("scaling"), img, plt)
    return made


PHASES = {
    "decision": "decision",
    "process_start": "process start",
    "model_load": "model load",
    "first_batch": "first batch and answer",
}


def _scaling_plots(sc: dict[str, Any] | None, img: Path, plt: Any) -> list[str]:
    if not sc:
        return []
    made = []
    zero = sc.get("first_request_at_zero") or {}
    if zero:
        modes = [m for m in ("standby", "cold") if m in zero]
        fig, ax = plt.subplots(figsize=(8, 2.6))
        left = [0.0] * len(modes)
        for key, label in PHASES.items():
            vals = [zero[m]["median_phases"][key] for m in modes]
            ax.barh(modes, vals, left=left, label=label)
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.axvline(5.0, color="k", ls=":", lw=1, label="goal: 5 s")
        ax.set_xlabel("seconds from the request to its answer (median)")
        ax.set_title("minilm-embed: the first request at zero workers")
        ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.35))
        fig.tight_layout()
        fig.savefig(img / "scaling_from_zero.png", dpi=110)
        plt.close(fig)
        made.append("scaling_from_zero.png")
    b = sc.get("burst")
    if b and b.get("live"):
        offset = b["started_at_offset"]
        live = [dict(p, t=p["t"] - offset) for p in b["live"] if p["t"] >= offset - 2]
        sim = b["replay"]["timeline"]
        fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
        rows = (
            ("workers (running)", "running"),
            ("queue depth (visible)", "visible"),
            ("age of the oldest message (s)", "oldest_age_seconds"),
        )
        for ax, (label, key) in zip(axes, rows, strict=True):
            ax.plot([p["t"] for p in live], [p[key] for p in live], "-", label="live")
            ax.plot([p["t"] for p in sim], [p[key] for p in sim], "--", label="replay (decide)")
            if key == "running":
                ax.plot(
                    [p["t"] for p in live],
                    [p["running"] + p["starting"] for p in live],
                    ":",
                    label="live, running + starting",
                )
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[-1].set_xlabel("seconds since the first submission")
        axes[0].set_title(
            f"A burst of {b['requests']:,} async predicts to minilm-embed at zero workers"
        )
        fig.tight_layout()
        fig.savefig(img / "scaling_burst.png", dpi=110)
        plt.close(fig)
        made.append("scaling_burst.png")
    return made


# -- the page ------------------------------------------------------------------------


def paragraph(text: str) -> str:
    """A paragraph the template wraps for its reader, as the one line the page has."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip()) + "\n"


@functools.cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("bench", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # markdown, not HTML
    )
    env.filters["paragraph"] = paragraph
    return env


def markdown(results: dict[str, Any], images: list[str]) -> str:
    """The page: the template filled with the view of each section; a plot the
    template has no place for goes at the end."""
    text = _templates().get_template("benchmarks.md.j2").render(view(results))
    for name in images:
        if f"({IMG}/{name})" not in text:
            text += f"![{name}]({IMG}/{name})\n\n"
    return text.rstrip() + "\n"


def view(results: dict[str, Any]) -> dict[str, Any]:
    """What the page shows, section by section: None where a section has nothing."""
    s = results["sections"]
    return {
        "run": _run(results),
        "machine": _machine(results["machine"]),
        "summary": _summary(results),
        "goals": _goals(results),
        "model_limit": _model_limit(s),
        "worker_efficiency": _worker_efficiency(s),
        "emulator_backlog": _emulator_backlog(s),
        "backlog": _backlog(s),
        "batch_memory": _batch_memory(s),
        "batch_realtime": _batch_realtime(s),
        "scaling": _scaling(s),
        "generation": _generation(s),
        "stream_transport": _stream_transport(s),
        "end_to_end": _end_to_end(s, results),
        "breakdown": _breakdown(s),
        "aws_calls": _aws_calls(s),
        "cold_start": _cold_start(s),
        "timing": _timing(results),
    }


def _run(results: dict[str, Any]) -> dict[str, Any]:
    return {
        "quick": results["quick"],
        "seconds": fmt(results["wall_seconds"], 0),
        "reruns": [
            {"sections": ", ".join(r["sections"]), "at": r["at"]} for r in results.get("reruns", [])
        ],
    }


def _machine(m: dict[str, Any]) -> dict[str, Any]:
    return {
        **m,
        "commit": m["commit"] or "–",
        "packages": ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v),
    }


def _rates_against(comparison: dict[str, Any]) -> dict[str, str]:
    """The platform's sustainable rate against a peer's (``compare_peer``)."""
    return {
        "ours": fmt(comparison.get("platform_sustainable_rate"), 0),
        "peer": fmt(comparison.get("peer_sustainable_rate"), 0),
        "ratio": times(comparison.get("rate_ratio")),
    }


def _summary(results: dict[str, Any]) -> dict[str, Any] | None:
    """The headline figures, each against what it is compared with."""
    s = results["sections"]
    e2e = s.get("end_to_end", {})
    we = s.get("worker_efficiency", {}).get("minilm-embed", {})
    cmp_ = results.get("comparison", {})
    ray_cmp = results.get("comparison_rayserve", {})
    one = e2e.get("batching_on", {}).get("one_request")
    aws = s.get("aws_calls", {}).get("paths", {})
    cold = s.get("cold_start", {}).get("cold_start")
    gen = s.get("generation", {})
    ours, bare = _levels(gen, "platform"), _levels(gen, "bare")
    top = gen.get("batching_gain_streams")
    on_off = _on_off_at_break(e2e)
    ours_cpu = cpu_step(e2e.get("batching_on") or {})
    theirs_cpu = cpu_step(s.get("peer_litserve") or {}, ours_cpu["rate"] if ours_cpu else None)
    rows: dict[str, Any] = {
        "worker": we
        and {
            "ours": fmt(we.get("inputs_per_s")),
            "limit": fmt(we.get("model_inputs_per_s_at_formed_sizes")),
            "ratio": times(we.get("efficiency_vs_model")),
        },
        "batching": e2e.get("batching_on")
        and {
            "on": fmt(e2e["batching_on"].get("sustainable_rate"), 0),
            "off": fmt(e2e.get("batching_off", {}).get("sustainable_rate"), 0),
            "ratio": times(e2e.get("batching_gain")),
        },
        "at_break": on_off
        and {
            "rate": fmt(on_off[0], 0),
            "on": fmt(on_off[1]),
            "off": fmt(on_off[2]),
            "ratio": times(ratio(on_off[1], on_off[2])),
        },
        "peer": cmp_ and _rates_against(cmp_),
        "rayserve": ray_cmp and _rates_against(ray_cmp),
        "peer_p99": (cmp_ or {}).get("headline")
        and {
            "rate": fmt(cmp_["headline"]["rate"], 0),
            "ours": fmt(cmp_["headline"]["platform_p99_ms"]),
            "peer": fmt(cmp_["headline"]["peer_p99_ms"]),
            "ratio": times(cmp_["headline"]["p99_ratio"]),
        },
        "cpu": None,
        "cpu_largest": None,
        "stage": one and _largest_stage(one),
        "aws": aws.get("sync")
        and {
            "sync": fmt(aws["sync"]["usd_per_million_inferences"]["total"], 2),
            "batch": fmt(aws["batch"]["usd_per_million_inferences"]["total"], 2),
            "ratio": times(
                ratio(
                    aws["sync"]["usd_per_million_inferences"]["total"],
                    aws["batch"]["usd_per_million_inferences"]["total"],
                ),
                1,
            ),
        },
        "cold": cold
        and {
            "first": fmt(cold["to_first_answer_ms"], 0),
            "warm": fmt(cold["second_request_ms"]),
            "ratio": times(ratio(cold["to_first_answer_ms"], cold["second_request_ms"]), 0),
        },
        "ttft": (1 in ours and 1 in bare)
        and {
            "over": fmt(ours[1]["ttft_p50_ms"] - bare[1]["ttft_p50_ms"]),
            "ours": fmt(ours[1]["ttft_p50_ms"]),
            "bare": fmt(bare[1]["ttft_p50_ms"]),
            "ratio": times(ratio(ours[1]["ttft_p50_ms"], bare[1]["ttft_p50_ms"]), 1),
        },
        "tokens": (top in ours and 1 in ours)
        and {
            "streams": top,
            "top": fmt(ours[top]["tokens_per_s"]),
            "one": fmt(ours[1]["tokens_per_s"]),
            "ratio": times(gen.get("batching_gain")),
        },
    }
    if ours_cpu and theirs_cpu:
        total = ours_cpu["cpu_ms_per_request_total"]
        rows["cpu"] = {
            "ours": fmt(total),
            "ours_rate": fmt(ours_cpu["rate"], 0),
            "peer": fmt(theirs_cpu["cpu_ms_per_request_total"]),
            "peer_rate": fmt(theirs_cpu["rate"], 0),
            "ratio": times(ratio(total, theirs_cpu["cpu_ms_per_request_total"]), 1),
        }
        parts = {
            k: v
            for k, v in ours_cpu["cpu_ms_per_request"].items()
            if k not in ("load generator", "supervisor")
        }
        if parts:
            name, value = max(parts.items(), key=lambda kv: kv[1])
            rows["cpu_largest"] = {
                "process": name,
                "ms": fmt(value),
                "total": fmt(total),
                "share": pct(ratio(value, total)),
            }
    return rows if any(rows.values()) else None


def _levels(gen: dict[str, Any], target: str) -> dict[int, dict[str, Any]]:
    levels = gen.get("targets", {}).get(target, {}).get("levels", [])
    return {lv["concurrency"]: lv for lv in levels}


def _largest_stage(breakdown: dict[str, Any]) -> dict[str, Any]:
    largest = max(breakdown["stages"], key=lambda st: st["mean_ms"])
    return {
        "stage": largest["stage"],
        "ms": fmt(largest["mean_ms"]),
        "total": fmt(breakdown["client_latency_mean_ms"]),
        "share": pct(largest["share"]),
    }


def _on_off_at_break(e2e: dict[str, Any]) -> tuple[float, float, float] | None:
    """p99 with batching on and off at the lowest rate that either did not sustain."""
    on = {x["rate"]: x for x in (e2e.get("batching_on") or {}).get("steps") or []}
    off = {x["rate"]: x for x in (e2e.get("batching_off") or {}).get("steps") or []}
    for rate in sorted(set(on) & set(off)):
        if not (on[rate]["sustained"] and off[rate]["sustained"]):
            return rate, on[rate]["p99_ms"], off[rate]["p99_ms"]
    return None


def _goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    def shown(value: Any) -> str:
        return fmt(value, 3) if isinstance(value, float) and value < 10 else fmt(value)

    return [{**g, "measured": shown(g["measured"])} for g in evaluate(results)]


def _model_limit(s: dict[str, Any]) -> dict[str, Any] | None:
    ml = s.get("model_limit")
    if not ml or "models" not in ml:
        return None
    text = ml["models"].get("minilm-embed")
    reading = None
    if text:
        first, last = text[0], text[-1]
        best = max(text, key=lambda r: r["model_inputs_per_s"])
        reading = {
            "one": fmt(first["model_inputs_per_s"]),
            "best": fmt(best["model_inputs_per_s"]),
            "best_batch": best["batch_size"],
            "gain": times(ratio(best["model_inputs_per_s"], first["model_inputs_per_s"]), 1),
            "runtime_share": pct(last["runtime_share_of_model"]),
            "last_batch": last["batch_size"],
        }
    return {
        "rounds": ml["rounds"],
        "window_seconds": ml["window_seconds"],
        "models": {
            name: [
                [
                    r["batch_size"],
                    fmt(r["model_inputs_per_s"]),
                    fmt(r["model_ms_per_batch"], 2),
                    fmt(r["runtime_inputs_per_s"]),
                    times(r["runtime_share_of_model"]),
                ]
                for r in rows
            ]
            for name, rows in ml["models"].items()
        },
        "minilm": reading,
    }


def _worker_efficiency(s: dict[str, Any]) -> dict[str, Any] | None:
    we = s.get("worker_efficiency")
    if not we:
        return None
    rows = []
    for name, w in we.items():
        if not isinstance(w, dict) or "inputs_per_s" not in w:
            continue
        pb = w.get("per_batch_ms", {})
        rows.append(
            [
                name,
                f"{w['completed']}/{w['messages']}",
                fmt(w["inputs_per_s"]),
                f"{w['max_batch_size']} / {w['max_wait_ms']} ms",
                ", ".join(f"{b}×{n}" for b, n in w["batch_sizes"].items()),
                fmt(w.get("model_inputs_per_s_at_formed_sizes")),
                times(w.get("efficiency_vs_model")),
                fmt(w.get("model_inputs_per_s_at_max_batch")),
                times(w.get("efficiency_vs_model_at_max_batch")),
                f"{fmt(pb.get('model'), 2)} / {fmt(pb.get('output_conversion'), 2)} / "
                f"{fmt(pb.get('worker_loop'), 2)}",
                pct(w.get("share_outside_model")),
            ]
        )
    view: dict[str, Any] = {"rows": rows, "minilm": None, "digits": None}
    w = we.get("minilm-embed")
    if isinstance(w, dict) and "batch_sizes" in w:
        sizes = w["batch_sizes"]
        full = sizes.get(str(w["max_batch_size"]), sizes.get(w["max_batch_size"], 0))
        view["minilm"] = {
            "ratio": times(w.get("efficiency_vs_model")),
            "outside": pct(w.get("share_outside_model")),
            "max_batch_size": w["max_batch_size"],
            "not_full": w["batches"] - full,
            "batches": w["batches"],
            "mean_batch": fmt(w.get("mean_batch_size")),
        }
    d = we.get("digits-cnn")
    if isinstance(d, dict) and d.get("share_outside_model") is not None:
        view["digits"] = {
            "model_ms": fmt(d["per_batch_ms"]["model"], 2),
            "batch": d["typical_batch_size"],
            "outside": pct(d["share_outside_model"]),
            "ratio": times(d.get("efficiency_vs_model")),
            "ms_per_input": fmt(1000 / d["inputs_per_s"], 3),
        }
    return view


def _emulator_backlog(s: dict[str, Any]) -> dict[str, Any] | None:
    emu = s.get("emulator_backlog")
    if not emu:
        return None

    def rows(key: str) -> list[list[str]]:
        return [
            [
                fmt(r["queued"], 0),
                f"{fmt(r['receive_delete_ms_p50'])} ms",
                f"{fmt(r['get_queue_attributes_ms'])} ms",
                fmt(r["send_msgs_per_s"], 0),
                f"{fmt(r['rss_mib_before'])} → {fmt(r['rss_mib_after'])} MiB",
            ]
            for r in emu[key]
        ]

    return {
        "patched": rows("patched"),
        "unpatched": rows("unpatched"),
        "growth": times(emu["growth_largest_vs_smallest"]),
        "speedup": fmt(emu["speedup_at_1k"]),
    }


def _backlog(s: dict[str, Any]) -> dict[str, Any] | None:
    bursts = s.get("backlog")
    if not bursts:
        return None
    roles = ("worker minilm-embed", "emulator", "router", "load generator")
    runs = []
    for b in bursts["bursts"]:
        for i, r in enumerate(b["runs"]):
            runs.append(
                [
                    f"{b['requests']:,} × {b['inputs_per_request']} sentence(s)",
                    str(i + 1),
                    f"{fmt(r['submit_seconds'])} s",
                    f"{fmt(r['drain_seconds'])} s",
                    fmt(r["inputs_per_s"]),
                    f"{fmt(r['model_limit_before'])} / {fmt(r['model_limit_after'])}",
                    times(r["share_of_model_limit"]),
                    f"{r['not_done']} / {r.get('submissions_failed', 0)}",
                    fmt(r["median_batch_size"], 0),
                    " / ".join(fmt(r["cpu_seconds"].get(k)) for k in roles),
                ]
            )
    return {
        "limit": fmt(bursts["model_limit_inputs_per_s"]),
        "repeats": bursts.get("repeats", 1),
        "runs": runs,
        "medians": [
            {
                "burst": f"{b['requests']:,} × {b['inputs_per_request']}",
                "share": times(b["median_share_of_model_limit"]),
            }
            for b in bursts["bursts"]
        ],
    }


MEMORY_ROLES = ("splitter", "worker digits-cnn", "router", "supervisor", "emulator")


def _batch_memory(s: dict[str, Any]) -> dict[str, Any] | None:
    mem = s.get("batch_memory")
    if not mem:
        return None

    def cell(rss: dict[str, float] | None) -> str:
        return f"{fmt(rss['at_drop_mib'], 0)} → {fmt(rss['peak_mib'], 0)}" if rss else "–"

    return {
        "model": mem["model"],
        "sample_every_s": mem["sample_every_s"],
        "roles": list(MEMORY_ROLES),
        "jobs": [
            [
                f"{j['lines_in_file']:,}",
                f"{fmt(j['file_mib'])} MiB",
                j["status"],
                f"{fmt(j['seconds'])} s",
                fmt(j["lines_per_s"]),
                *[cell(j["memory"].get(role)) for role in MEMORY_ROLES],
            ]
            for j in mem["jobs"]
        ],
    }


def _batch_realtime(s: dict[str, Any]) -> dict[str, Any] | None:
    rt = s.get("batch_realtime")
    if not rt:
        return None

    def step(x: dict[str, Any]) -> str:
        return f"{fmt(x['p50_ms'])} / {fmt(x['p99_ms'])} ms ({x['ok']} / {x['sent']})"

    def row(i: int, r: dict[str, Any]) -> list[Any]:
        job = r["job"]
        return [
            str(i + 1),
            step(r["alone"]),
            step(r["beside_job"]),
            r["beside_job"]["miss_202"],
            times(r["p99_beside_over_alone"]),
            f"{fmt(job['lines_per_s'])} ({fmt(job['seconds'])} s)"
            + ("" if r["job_ran_throughout"] else ", ended before realtime did"),
            f"{fmt(r['model_limit_before'])} / {fmt(r['model_limit_after'])}",
            times(r["job_share_of_model_limit"]),
        ]

    return {
        "model": rt["model"],
        "rate": fmt(rt["rate"]),
        "seconds": fmt(rt["seconds"], 0),
        "job_lines": f"{rt['job_lines']:,}",
        "repeats": len(rt["runs"]),
        "runs": [row(i, r) for i, r in enumerate(rt["runs"])],
        "p99_ratio": times(rt["median_p99_beside_over_alone"]),
        "job_share": times(rt["median_job_share_of_model_limit"]),
    }


def _scaling(s: dict[str, Any]) -> dict[str, Any] | None:
    sc = s.get("scaling")
    if not sc:
        return None
    zero = sc.get("first_request_at_zero") or {}
    b = sc.get("burst")
    return {
        "phases": list(PHASES.values()),
        "zero": zero and _first_request_at_zero(zero),
        "burst": b and _burst_from_zero(b),
    }


def _first_request_at_zero(zero: dict[str, Any]) -> dict[str, Any]:
    return {
        "runs": [
            [
                mode,
                str(i + 1),
                f"**{fmt(r['total_seconds'], 2)} s**",
                *[f"{fmt(r['phases'][k], 2)} s" for k in PHASES],
                " / ".join(
                    f"{fmt(r['model_load_parts'].get(k), 2)} s"
                    for k in ("import", "artifact", "load")
                ),
            ]
            for mode, m in zero.items()
            for i, r in enumerate(m["runs"])
        ],
        "medians": [
            {"start": mode, "seconds": fmt(m["median_total_seconds"], 2)}
            for mode, m in zero.items()
        ],
    }


def _burst_from_zero(b: dict[str, Any]) -> dict[str, Any]:
    r = b["replay"]
    return {
        "requests": f"{b['requests']:,}",
        "idle_seconds": b["idle_seconds"],
        "policy": b["policy"],
        "done": f"{b['done']:,}",
        "accepted": f"{b['accepted']:,}",
        "submit_seconds": fmt(b["submit_seconds"]),
        "drain_seconds": fmt(b["drain_seconds"]),
        "inputs_per_s": fmt(b["inputs_per_s"]),
        "most_workers_running": b["most_workers_running"],
        "workers_started": b["workers_started"],
        "workers_from_standby": b["workers_from_standby"],
        "workers_ready_after": ", ".join(fmt(v) for v in b["workers_ready_after_seconds"]),
        "scaled_in_after": fmt(b.get("scaled_in_after_seconds")),
        "back_at_zero_after": fmt(b["back_at_zero_after_seconds"]),
        "replay": {
            "drained_after": fmt(r["drained_after_seconds"], 0),
            "most_workers": r["most_workers"],
            "changes": r["changes"],
            "standby_start": fmt(r["standby_start_seconds"]),
            "cold_start": fmt(r["cold_start_seconds"]),
            "cold_start_measured": r.get("cold_start_measured", True),
            "back_at_zero_after": fmt(r["back_at_zero_after_seconds"], 0),
            "per_worker_inputs_per_s": fmt(r["per_worker_inputs_per_s"]),
        },
    }


GENERATION_TARGETS = {
    "bare": "bare transformers",
    "platform": "platform",
    "platform_openai": "platform, OpenAI API",
    "litserve": "LitServe",
}


def _generation(s: dict[str, Any]) -> dict[str, Any] | None:
    g = s.get("generation")
    if not g:
        return None
    targets = {k: g["targets"][k] for k in GENERATION_TARGETS if k in g["targets"]}
    levels = [(GENERATION_TARGETS[k], lv) for k, t in targets.items() for lv in t["levels"]]
    seen = {r for _, lv in levels for r in lv.get("cpu_ms_per_token", {})}
    roles = sorted(seen, key=lambda r: (r == "load generator", r))
    return {
        "model": g["model"],
        "max_tokens": g["max_tokens"],
        "temperature": g["temperature"],
        "requests_per_level": ", ".join(f"{n}: {c}" for n, c in g["requests_per_level"].items()),
        "targets": [{"name": GENERATION_TARGETS[k], "how": t["how"]} for k, t in targets.items()],
        "rows": [
            [
                n,
                name,
                f"{fmt(lv['ttft_p50_ms'])} ms",
                f"{fmt(lv['ttft_p99_ms'])} ms",
                f"**{fmt(lv['tokens_per_s'])}**",
                fmt(lv["stream_tokens_per_s_p50"]),
                f"{lv['ok']} / {lv['requests']}",
            ]
            for n in g["concurrency"]
            for name, lv in levels
            if lv["concurrency"] == n
        ],
        "cpu_roles": roles,
        "cpu_rows": [
            [
                lv["concurrency"],
                name,
                *[fmt(lv["cpu_ms_per_token"].get(r), 2) for r in roles],
                pct(lv.get("others_busy_share")),
                fmt(lv.get("results_table_items"), 0),
            ]
            for name, lv in levels
            if "cpu_ms_per_token" in lv
        ],
        "largest_cpu": _largest_cpu_per_token(targets.get("platform", {}).get("levels", [])),
        "ttft_overhead": [[n, fmt(ms)] for n, ms in (g.get("ttft_overhead_p50_ms") or {}).items()],
        "ttft_overhead_met": g.get("ttft_overhead_met"),
        "ttft_overhead_goal": fmt(g["ttft_overhead_goal_ms"], 0),
        "gain_streams": g.get("batching_gain_streams"),
        "gain": times(g.get("batching_gain")),
        "gain_met": g.get("batching_gain_met"),
        "gain_goal": fmt(g["batching_gain_goal"], 0),
        "failures": [
            {
                "streams": lv["concurrency"],
                "target": name,
                "errors": lv["errors"],
                "first_error": lv["first_error"],
            }
            for name, lv in levels
            if lv["errors"]
        ],
    }


def _largest_cpu_per_token(platform: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The platform's largest CPU cost per token at its most streams."""
    top = max(platform, key=lambda lv: lv["concurrency"], default={})
    costs = {k: v for k, v in top.get("cpu_ms_per_token", {}).items() if v is not None}
    if not costs:
        return None
    largest = max(costs, key=lambda k: costs[k])
    workers = [v for k, v in costs.items() if k.startswith("worker")]
    return {
        "streams": top["concurrency"],
        "process": largest,
        "ms": fmt(costs[largest], 2),
        "worker_ms": fmt(workers[0] if workers else None, 2),
    }


def _stream_transport(s: dict[str, Any]) -> dict[str, Any] | None:
    t = s.get("stream_transport")
    if not t:
        return None
    names = [n for n in t if isinstance(t[n], dict)]
    return {
        "streams": t["streams"],
        "chunks_per_stream": t["chunks_per_stream"],
        "gap_ms": f"{t['gap_ms']:g}",
        "rows": [
            [
                name,
                fmt(t[name].get("delay_ms_p50"), 1, " ms"),
                fmt(t[name].get("delay_ms_p99"), 1, " ms"),
                fmt(t[name].get("setup_ms_p50"), 1, " ms") if "setup_ms_p50" in t[name] else "none",
                fmt(t[name].get("calls_per_stream"), 1),
                fmt(t[name].get("emulator_cpu_ms_per_chunk"), 2, " ms"),
                f"{t[name].get('delivered')} / {t[name].get('chunks')}",
            ]
            for name in names
        ],
    }


def _end_to_end(s: dict[str, Any], results: dict[str, Any]) -> dict[str, Any] | None:
    e2e = s.get("end_to_end") or {}
    peer = s.get("peer_litserve") or {}
    ray = s.get("peer_rayserve") or {}
    if not e2e and not peer and not ray:
        return None

    def ladder(target: dict[str, Any] | None) -> dict[str, Any] | None:
        if not target or not target.get("steps"):
            return None
        return {
            "startup_seconds": fmt(target.get("startup_seconds")),
            "sustainable_rate": fmt(target.get("sustainable_rate"), 0),
            "steps": [_step_row(x) for x in target["steps"]],
        }

    cmp_ = results.get("comparison")
    ray_cmp = results.get("comparison_rayserve")
    on = e2e.get("batching_on", {})
    off = e2e.get("batching_off", {})
    ours_cpu = cpu_step(on) if on else None
    theirs_cpu = cpu_step(peer, ours_cpu["rate"] if ours_cpu else None)
    litserve = ladder(peer)
    rayserve = ladder(ray)
    ray_p99 = {r["rate"]: r["peer_p99_ms"] for r in (ray_cmp or {}).get("common_rates") or []}
    ray_ratio = {r["rate"]: r["p99_ratio"] for r in (ray_cmp or {}).get("common_rates") or []}
    ray_cpu = cpu_step(ray) if ray else None
    return {
        "batching_on": ladder(e2e.get("batching_on")),
        "batching_off": ladder(e2e.get("batching_off")),
        "litserve": litserve
        and {**litserve, "version": results["machine"]["packages"].get("litserve")},
        "rayserve": rayserve and {**rayserve, "version": ray.get("ray_version")},
        "digits": ladder(e2e.get("digits_batching_on")),
        "common_rates": [
            [
                fmt(r["rate"], 0),
                fmt(r["platform_p99_ms"]),
                fmt(r["peer_p99_ms"]),
                fmt(ray_p99.get(r["rate"])),
                times(r["p99_ratio"]),
                times(ray_ratio.get(r["rate"])),
            ]
            for r in (cmp_ or {}).get("common_rates") or []
        ],
        "cpu": _cpu_table(e2e, peer),
        "ray_cpu": ray_cpu
        and {
            "roles": list(ray_cpu["cpu_ms_per_request"]),
            "row": [
                f"Ray Serve at {fmt(ray_cpu['rate'], 0)} req/s",
                *[fmt(v, 1) for v in ray_cpu["cpu_ms_per_request"].values()],
                f"**{fmt(ray_cpu['cpu_ms_per_request_total'], 1)}**",
                pct(ray_cpu.get("cpu_busy_share")),
            ],
            "rate": fmt(ray_cpu["rate"], 0),
            "total": fmt(ray_cpu["cpu_ms_per_request_total"], 0),
            "replica": fmt(ray_cpu["cpu_ms_per_request"].get("ray replica"), 0),
            "proxy": fmt(ray_cpu["cpu_ms_per_request"].get("ray proxy"), 0),
        },
        "ray_peer": ray_cmp
        and {
            "rate": fmt(ray_cmp.get("peer_sustainable_rate"), 0),
            "ratio": times(ray_cmp.get("rate_ratio")),
        },
        "batching_gain": on
        and {
            "on": fmt(on.get("sustainable_rate"), 0),
            "off": fmt(off.get("sustainable_rate"), 0),
            "gain": times(e2e.get("batching_gain")),
        },
        "peer": cmp_
        and {
            "rate": fmt(cmp_.get("peer_sustainable_rate"), 0),
            "ratio": times(cmp_.get("rate_ratio")),
        },
        "cpu_reading": ours_cpu and _cpu_reading(ours_cpu, theirs_cpu, off, s),
    }


def _step_row(x: dict[str, Any]) -> list[Any]:
    return [
        fmt(x["rate"], 0),
        x["sent"],
        x["ok"],
        x["miss_202"],
        x["errors"],
        x["timeouts"],
        fmt(x["throughput"]),
        fmt(x["p50_ms"]),
        fmt(x["p95_ms"]),
        fmt(x["p99_ms"]),
        fmt(x["sustained"]),
        f"{pct(x.get('others_busy_share'))} ({x.get('attempt', 1)})",
    ]


def _cpu_reading(
    ours: dict[str, Any], theirs: dict[str, Any] | None, off: dict[str, Any], s: dict[str, Any]
) -> dict[str, Any]:
    """Where the platform's CPU per request goes, against the peer's and without batching."""
    cpu = {k: v for k, v in ours["cpu_ms_per_request"].items() if k != "supervisor" and v >= 1}
    off_step = cpu_step(off or {}, ours["rate"])
    model = (s.get("model_limit") or {}).get("models", {}).get("minilm-embed") or []
    return {
        "rate": fmt(ours["rate"], 0),
        "total": fmt(ours["cpu_ms_per_request_total"], 0),
        "parts": ", ".join(
            f"{k} {fmt(v, 0)} ms" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])
        ),
        "peer_total": theirs and fmt(theirs["cpu_ms_per_request_total"], 0),
        "peer_rate": theirs and fmt(theirs["rate"], 0),
        "model_ms_one": fmt(model[0]["model_ms_per_batch"] if model else None, 0),
        "unbatched_total": fmt(off_step["cpu_ms_per_request_total"], 0)
        if off_step and off_step["rate"] == ours["rate"]
        else None,
    }


def cpu_step(target: dict[str, Any], rate: float | None = None) -> dict[str, Any] | None:
    """The step whose CPU is shown: at ``rate`` if given and tested, else at the
    target's sustainable rate, else its first step."""
    steps = [x for x in target.get("steps") or [] if x.get("cpu_ms_per_request")]
    if not steps:
        return None
    for wanted in (rate, target.get("sustainable_rate")):
        found = next((x for x in steps if wanted is not None and x["rate"] == wanted), None)
        if found:
            return found
    return steps[0]


def _cpu_table(e2e: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any] | None:
    """CPU per request by process: each configuration at its sustainable rate, and
    LitServe also at the platform's."""
    common = cpu_step(e2e.get("batching_on") or {})
    candidates = [
        ("platform, batching on", common),
        ("platform, batching off", cpu_step(e2e.get("batching_off") or {})),
        ("LitServe", cpu_step(peer, common["rate"]) if common else None),
        ("LitServe", cpu_step(peer)),
    ]
    chosen: dict[tuple[str, float], dict[str, Any]] = {}
    for label, x in candidates:
        if x:
            chosen.setdefault((label, x["rate"]), x)
    if not chosen:
        return None
    roles: list[str] = []
    for x in chosen.values():
        roles += [r for r in x["cpu_ms_per_request"] if r not in roles]
    return {
        "roles": roles,
        "rows": [
            [
                f"{label} at {fmt(rate, 0)} req/s",
                *[fmt(x["cpu_ms_per_request"].get(r), 1) for r in roles],
                f"**{fmt(x['cpu_ms_per_request_total'], 1)}**",
                pct(x.get("cpu_busy_share")),
            ]
            for (label, rate), x in chosen.items()
        ],
    }


def _breakdown(s: dict[str, Any]) -> dict[str, Any] | None:
    on = (s.get("end_to_end") or {}).get("batching_on") or {}
    parts = [("one request at a time", on.get("one_request"))]
    if on.get("breakdown_at_sustainable_rate"):
        parts.append(
            (
                f"at the sustainable rate ({fmt(on.get('sustainable_rate'), 0)} req/s)",
                on["breakdown_at_sustainable_rate"],
            )
        )
    parts = [(label, b) for label, b in parts if b]
    if not parts:
        return None

    def share(stage: dict[str, Any]) -> str:
        return f"{fmt(stage['mean_ms'], 2)} ({pct(stage['share'])})"

    one = parts[0][1]
    through_aws = sum(
        st["mean_ms"]
        for st in one["stages"]
        if st["stage"] in ("enqueue", "queue wait", "result write (est.)", "result pick-up")
    )
    return {
        "columns": [f"{label}: mean ms (share)" for label, _ in parts],
        "rows": [
            [st["stage"], *[share(b["stages"][i]) for _, b in parts]]
            for i, st in enumerate(one["stages"])
        ],
        "client_latency": [f"**{fmt(b['client_latency_mean_ms'], 2)}**" for _, b in parts],
        "requests": one["requests"],
        "largest": _largest_stage(one),
        "through_aws_ms": fmt(through_aws),
        "through_aws_share": pct(ratio(through_aws, one["client_latency_mean_ms"])),
    }


AWS_PATHS = {
    "sync": "sync predict, one at a time",
    "sync_at_load": "sync predict, 16 callers at once",
    "async_one_at_a_time": "async predict + one GET poll, one at a time",
    "async_burst": "async predict + one GET poll, burst",
    "batch": "batch file (splitter + worker)",
    "repeats": "sync predict, repeated inputs (result cache)",
}


def _aws_calls(s: dict[str, Any]) -> dict[str, Any] | None:
    aws = s.get("aws_calls")
    if not aws or "paths" not in aws:
        return None
    p = aws["paths"]
    la = aws.get("lambda_api_gateway", {})
    idle = p.get("idle_worker", {})
    return {
        "routing_seconds": fmt(aws["cache_refresh"]["routing_seconds"], 0),
        "registry_seconds": fmt(aws["cache_refresh"]["registry_versions_seconds"], 0),
        "rows": [_aws_row(label, p[key]) for key, label in AWS_PATHS.items() if key in p],
        "region": aws["region"],
        "prices": aws["prices_usd"],
        "price_sources": aws["price_sources"],
        "router_memory_mb": la.get("router_memory_mb"),
        "lambda_rows": [
            [
                name,
                fmt(v["lambda_invocations_per_inference"], 4),
                f"${fmt(v['usd_lambda'], 3)}",
                f"${fmt(v['usd_api_gateway'], 3)}",
            ]
            for name, v in la.get("paths", {}).items()
        ],
        "idle_requests_per_hour": fmt(idle.get("sqs_requests_per_worker_hour"), 0),
        "idle_usd_per_month": fmt(idle.get("usd_per_worker_month"), 2),
        "sync": p.get("sync") and _sync_cost(p["sync"], la),
        "at_load": p.get("sync_at_load") and _sync_at_load(p["sync_at_load"]),
        "cache": p.get("repeats") and _result_cache(p["repeats"]),
    }


def _aws_row(label: str, x: dict[str, Any]) -> list[str]:
    c = x["usd_per_million_inferences"]
    return [
        label,
        f"{x['inferences']} / {x['requests']}",
        "; ".join(
            f"{actor}: " + ", ".join(f"{op} {v:g}" for op, v in calls.items())
            for actor, calls in x["per_inference"].items()
        ),
        fmt(x["sqs_requests_per_inference"], 3),
        fmt(x["sqs_empty_receives_per_inference"], 3),
        f"{fmt(x['dynamodb_wru_per_inference'], 2)} / {fmt(x['dynamodb_rru_per_inference'], 2)}",
        fmt(x["s3_requests_per_inference"], 3),
        f"${fmt(c['sqs'], 3)}",
        f"${fmt(c['dynamodb_writes'] + c['dynamodb_reads'], 3)}",
        f"${fmt(c['s3'], 3)}",
        f"${fmt(c.get('firehose_prediction_log'), 3)}",
        f"**${fmt(c['total'], 2)}**",
    ]


def _sync_cost(sync: dict[str, Any], la: dict[str, Any]) -> dict[str, Any]:
    """A sync inference's AWS cost: its largest item, and the front door on top."""
    cost = sync["usd_per_million_inferences"]
    items = {
        "DynamoDB writes": cost["dynamodb_writes"],
        "SQS requests": cost["sqs"],
        "DynamoDB reads": cost["dynamodb_reads"],
        "S3 requests": cost["s3"],
        "Firehose records": cost.get("firehose_prediction_log", 0.0),
    }
    largest, usd = max(items.items(), key=lambda kv: kv[1])
    lam = la.get("paths", {}).get("sync", {})
    front = (lam.get("usd_api_gateway") or 0.0) + (lam.get("usd_lambda") or 0.0)
    return {
        "total": fmt(cost["total"], 2),
        "largest": largest,
        "largest_usd": fmt(usd, 2),
        "write_units": fmt(sync["dynamodb_wru_per_inference"], 1),
        "polls": fmt(sync.get("result_polls_per_request"), 1),
        "empty_receives": fmt(sync["sqs_empty_receives_per_inference"], 1),
        "sqs_requests": fmt(sync["sqs_requests_per_inference"], 1),
        "api_gateway_usd": fmt(lam.get("usd_api_gateway"), 2),
        "lambda_usd": fmt(lam.get("usd_lambda"), 2),
        "front_ratio": times(ratio(front, cost["total"]), 2),
    }


def _sync_at_load(x: dict[str, Any]) -> dict[str, Any]:
    from bench.goals import sync_calls_of_its_own

    return {
        "callers": x["callers"],
        "requests": x["requests"],
        "messages_per_receive": fmt(x.get("messages_per_receive"), 1),
        "own_calls": fmt(sync_calls_of_its_own(x), 2),
        "polls": fmt(x.get("result_polls_per_request"), 2),
        "rising_polls": fmt(x.get("rising_load_polls_per_request"), 2),
        "warm": x.get("rising_load_polls_per_request") is not None,
        "total": fmt(x["usd_per_million_inferences"]["total"], 2),
    }


def _result_cache(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "requests": r["requests"],
        "distinct_inputs": r["distinct_inputs"],
        "hit_rate": fmt(100 * r["hit_rate"], 1),
        "best_hit_rate": fmt(100 * r["best_possible_hit_rate"], 1),
        "hit_ms": fmt(r["hit_router_ms_p50"], 2),
        "miss_ms": fmt(r["miss_router_ms_p50"], 2),
        "calls_per_hit": ", ".join(f"{op} {v:g}" for op, v in r["router_calls_per_hit"].items()),
        "usd_per_million_hits": fmt(r["usd_per_million_hits"], 3),
    }


def _cold_start(s: dict[str, Any]) -> dict[str, Any] | None:
    c = s.get("cold_start")
    if not c or "cold_start" not in c:
        return None
    cs, w = c["cold_start"], c["warm"]
    return {
        "deployed_paths": bool(cs.get("deployed_paths")),
        "runs": cs["runs"],
        "cold": [
            f"{fmt(cs['interpreter_ms'])} ms",
            f"{fmt(cs['import_ms'])} ms",
            f"{fmt(cs['first_request_ms'])} ms",
            f"**{fmt(cs['to_first_answer_ms'])} ms**",
            f"{fmt(cs['second_request_ms'])} ms",
        ],
        "requests": w["requests"],
        "warm": [
            f"**{fmt(w['router_cpu_ms_per_request'], 3)} ms**",
            fmt(w["requests_per_cpu_second"], 0),
            f"{fmt(w['wall_ms_per_request'], 3)} ms",
        ],
        "cpu_ms": fmt(w["router_cpu_ms_per_request"], 2),
        "first_answer_ms": fmt(cs["to_first_answer_ms"], 0),
        "first_request_ms": fmt(cs["first_request_ms"], 0),
        "import_ms": fmt(cs["import_ms"], 0),
    }


def _timing(results: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            name,
            fmt(meta.get("seconds"), 1),
            meta.get("load_before"),
            meta.get("load_after"),
            meta.get("error") or "ok",
        ]
        for name, meta in results.get("timing", {}).items()
    ]


def clean(value: Any) -> Any:
    """JSON has no NaN: an empty percentile becomes null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def write(results: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    images = plots(results, out_dir)
    json_path = out_dir / "benchmarks.json"
    json_path.write_text(json.dumps(clean(results), indent=2, default=str) + "\n")
    md_path = out_dir / "benchmarks.md"
    md_path.write_text(markdown(results, images))
    return [md_path, json_path] + [out_dir / IMG / name for name in images]
