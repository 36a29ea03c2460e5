"""Writes what a run measured: ``benchmarks.json`` (every figure), ``benchmarks.md``
(tables, each comparison as a ratio beside the absolute figures, and a short reading
of each section) and PNG plots under ``img/``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.common import ratio

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


# -- markdown ------------------------------------------------------------------------


def markdown(results: dict[str, Any], images: list[str]) -> str:
    m = results["machine"]
    s = results["sections"]
    lines: list[str] = [
        "# Benchmarks",
        "",
        "What the platform adds to the model's own cost, how it batches, and how it compares "
        "with a peer, measured side by side in one run of the suite (`bench/`). "
        f"This page was written by `python -m bench run{' --quick' if results['quick'] else ''}`"
        f" ({'quick' if results['quick'] else 'full'} mode, {fmt(results['wall_seconds'], 0)} s).",
        *[
            f"Sections rerun later with `--merge`: {', '.join(r['sections'])} on {r['at']}."
            for r in results.get("reruns", [])
        ],
        "",
        "## Machine and versions",
        "",
        table(
            ["what", "value"],
            [
                ["date", m["date"]],
                ["CPU", f"{m['cpu']} ({m['cores']} cores, torch threads {m['torch_threads']})"],
                ["memory", f"{m['memory_gib']} GiB"],
                ["OS", m["os"]],
                ["Python", m["python"]],
                ["commit", m["commit"] or "–"],
                ["packages", ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)],
                ["load average (1 min) at start", m["load_average_at_start"]],
            ],
        ),
        "",
        "The machine is shared with other work and has no GPU, so absolute figures move from run "
        "to run; the comparisons are made within the run, target after target on the same "
        "machine, and each section records the load average around it. The AWS services are "
        "the local emulator (moto), not AWS: figures that include AWS round trips describe the "
        "local platform, and the AWS-call counts, not the local latencies, are what carry over "
        "to the cloud.",
        "",
    ]
    lines += _summary(results)
    lines += _goals(results)
    lines += _model_limit(s)
    lines += _worker(s)
    lines += _backlog(s)
    lines += _batch_jobs(s)
    lines += _scaling(s)
    lines += _generation(s)
    lines += _stream_transport(s)
    lines += _end_to_end(s, results)
    lines += _breakdown(s)
    lines += _aws(s)
    lines += _cold(s)
    lines += _sections_meta(results)
    for name in images:
        if f"({IMG}/{name})" not in "\n".join(lines):
            lines += [f"![{name}]({IMG}/{name})", ""]
    return "\n".join(lines).rstrip() + "\n"


def _goals(results: dict[str, Any]) -> list[str]:
    from bench.goals import evaluate

    rows = []
    for g in evaluate(results):
        value = g["measured"]
        shown = fmt(value, 3) if isinstance(value, float) and value < 10 else fmt(value)
        status = {True: "met", False: "not met", None: "not measured"}[g["met"]]
        rows.append([g["goal"], g["target"], shown, status, g["why_not"]])
    return [
        "## Goals",
        "",
        "The performance goals, checked against this page's figures (`bench/goals.py`).",
        "",
        table(["goal", "target", "measured", "", "what stands in the way"], rows),
        "",
    ]


def _summary(results: dict[str, Any]) -> list[str]:
    s = results["sections"]
    rows: list[list[Any]] = []
    we = s.get("worker_efficiency", {}).get("minilm-embed", {})
    if we:
        rows.append(
            [
                "worker loop vs model limit at the batch sizes it formed (minilm-embed)",
                f"{fmt(we.get('inputs_per_s'))} inputs/s",
                f"{fmt(we.get('model_inputs_per_s_at_formed_sizes'))} inputs/s",
                times(we.get("efficiency_vs_model")),
            ]
        )
    e2e = s.get("end_to_end", {})
    if e2e.get("batching_on"):
        rows.append(
            [
                "sustainable rate (p99 < 500 ms), micro-batching on vs off",
                f"{fmt(e2e['batching_on'].get('sustainable_rate'), 0)} req/s",
                f"{fmt(e2e.get('batching_off', {}).get('sustainable_rate'), 0)} req/s",
                times(e2e.get("batching_gain")),
            ]
        )
    on_off = _on_off_at_break(e2e)
    if on_off:
        rate, p_on, p_off = on_off
        rows.append(
            [
                f"p99 at {fmt(rate, 0)} req/s (the first rate either fails), batching on vs off",
                f"{fmt(p_on)} ms",
                f"{fmt(p_off)} ms",
                times(ratio(p_on, p_off)),
            ]
        )
    cmp_ = results.get("comparison", {})
    if cmp_:
        rows.append(
            [
                "sustainable rate, platform vs LitServe",
                f"{fmt(cmp_.get('platform_sustainable_rate'), 0)} req/s",
                f"{fmt(cmp_.get('peer_sustainable_rate'), 0)} req/s",
                times(cmp_.get("rate_ratio")),
            ]
        )
        h = cmp_.get("headline")
        if h:
            rows.append(
                [
                    f"p99 at {fmt(h['rate'], 0)} req/s, platform vs LitServe",
                    f"{fmt(h['platform_p99_ms'])} ms",
                    f"{fmt(h['peer_p99_ms'])} ms",
                    times(h["p99_ratio"]),
                ]
            )
    ours_cpu = cpu_step(e2e.get("batching_on") or {})
    theirs_cpu = cpu_step(s.get("peer_litserve") or {}, ours_cpu["rate"] if ours_cpu else None)
    if ours_cpu and theirs_cpu:
        rows.append(
            [
                "CPU per answered request, all processes, platform vs LitServe",
                f"{fmt(ours_cpu['cpu_ms_per_request_total'])} ms at "
                f"{fmt(ours_cpu['rate'], 0)} req/s",
                f"{fmt(theirs_cpu['cpu_ms_per_request_total'])} ms at "
                f"{fmt(theirs_cpu['rate'], 0)} req/s",
                times(
                    ratio(
                        ours_cpu["cpu_ms_per_request_total"], theirs_cpu["cpu_ms_per_request_total"]
                    ),
                    1,
                ),
            ]
        )
        parts = {
            k: v
            for k, v in ours_cpu["cpu_ms_per_request"].items()
            if k not in ("load generator", "supervisor")
        }
        if parts:
            name, value = max(parts.items(), key=lambda kv: kv[1])
            rows.append(
                [
                    f"largest CPU cost in the platform's path: {name}",
                    f"{fmt(value)} ms per request",
                    f"{fmt(ours_cpu['cpu_ms_per_request_total'])} ms in all",
                    pct(ratio(value, ours_cpu["cpu_ms_per_request_total"])),
                ]
            )
    one = e2e.get("batching_on", {}).get("one_request")
    if one:
        largest = max(one["stages"], key=lambda st: st["mean_ms"])
        rows.append(
            [
                f"largest stage of one request: {largest['stage']}",
                f"{fmt(largest['mean_ms'])} ms",
                f"{fmt(one['client_latency_mean_ms'])} ms in all",
                pct(largest["share"]),
            ]
        )
    aws = s.get("aws_calls", {}).get("paths", {})
    if aws.get("sync"):
        rows.append(
            [
                "AWS request cost per million sync inferences (SQS, DynamoDB, S3, Firehose)",
                f"${fmt(aws['sync']['usd_per_million_inferences']['total'], 2)}",
                f"batch file: ${fmt(aws['batch']['usd_per_million_inferences']['total'], 2)}",
                times(
                    ratio(
                        aws["sync"]["usd_per_million_inferences"]["total"],
                        aws["batch"]["usd_per_million_inferences"]["total"],
                    ),
                    1,
                ),
            ]
        )
    cold = s.get("cold_start", {})
    if cold.get("cold_start"):
        rows.append(
            [
                "router cold start to first answer vs a warm request",
                f"{fmt(cold['cold_start']['to_first_answer_ms'], 0)} ms",
                f"{fmt(cold['cold_start']['second_request_ms'])} ms",
                times(
                    ratio(
                        cold["cold_start"]["to_first_answer_ms"],
                        cold["cold_start"]["second_request_ms"],
                    ),
                    0,
                ),
            ]
        )
    gen = s.get("generation", {})
    ours = {
        lv["concurrency"]: lv for lv in gen.get("targets", {}).get("platform", {}).get("levels", [])
    }
    bare = {
        lv["concurrency"]: lv for lv in gen.get("targets", {}).get("bare", {}).get("levels", [])
    }
    if 1 in ours and 1 in bare:
        rows.append(
            [
                "generation: TTFT p50 at one stream, platform vs bare transformers "
                f"(+{fmt(ours[1]['ttft_p50_ms'] - bare[1]['ttft_p50_ms'])} ms; goal ≤ +100 ms)",
                f"{fmt(ours[1]['ttft_p50_ms'])} ms",
                f"{fmt(bare[1]['ttft_p50_ms'])} ms",
                times(ratio(ours[1]["ttft_p50_ms"], bare[1]["ttft_p50_ms"]), 1),
            ]
        )
    top = gen.get("batching_gain_streams")
    if top in ours and 1 in ours:
        rows.append(
            [
                f"generation: platform tokens/s at {top} streams vs at one",
                f"{fmt(ours[top]['tokens_per_s'])} tokens/s",
                f"{fmt(ours[1]['tokens_per_s'])} tokens/s",
                times(gen.get("batching_gain")),
            ]
        )
    if not rows:
        return []
    return [
        "## Summary",
        "",
        table(["figure", "measured", "against", "ratio"], rows),
        "",
    ]


def _batching_saving(on_step: dict[str, Any], off: dict[str, Any]) -> str:
    off_step = cpu_step(off or {}, on_step["rate"])
    if not off_step or off_step["rate"] != on_step["rate"]:
        return ""
    return (
        f" (at {fmt(on_step['rate'], 0)} req/s all processes together spend "
        f"{fmt(on_step['cpu_ms_per_request_total'], 0)} ms per request with batching and "
        f"{fmt(off_step['cpu_ms_per_request_total'], 0)} ms without)"
    )


def _model_ms_one(s: dict[str, Any]) -> float | None:
    rows = (s.get("model_limit") or {}).get("models", {}).get("minilm-embed") or []
    return rows[0]["model_ms_per_batch"] if rows else None


def _on_off_at_break(e2e: dict[str, Any]) -> tuple[float, float, float] | None:
    """p99 with batching on and off at the lowest rate that either did not sustain."""
    on = {x["rate"]: x for x in (e2e.get("batching_on") or {}).get("steps") or []}
    off = {x["rate"]: x for x in (e2e.get("batching_off") or {}).get("steps") or []}
    for rate in sorted(set(on) & set(off)):
        if not (on[rate]["sustained"] and off[rate]["sustained"]):
            return rate, on[rate]["p99_ms"], off[rate]["p99_ms"]
    return None


def _backlog(s: dict[str, Any]) -> list[str]:
    out: list[str] = []
    emu = s.get("emulator_backlog")
    if emu:
        rows = [
            [
                label,
                fmt(r["queued"], 0),
                f"{fmt(r['receive_delete_ms_p50'])} ms",
                f"{fmt(r['get_queue_attributes_ms'])} ms",
                fmt(r["send_msgs_per_s"], 0),
                f"{fmt(r['rss_mib_before'])} → {fmt(r['rss_mib_after'])} MiB",
            ]
            for label, key in (
                ("with the local platform's fix", "patched"),
                ("moto 5.2.5 as it is", "unpatched"),
            )
            for r in emu[key]
        ]
        out += [
            "## The emulator's SQS under a backlog",
            "",
            "One client on loopback fills a queue with SendMessageBatch (500-byte bodies, a "
            "third with a MessageGroupId), then times ReceiveMessage(10) + "
            "DeleteMessageBatch(10) pairs (median) and one GetQueueAttributes at each size "
            "(`bench/emulator_backlog.py`). The emulator is the local platform's "
            "(`switchyard_local.emulator`: moto with `switchyard_local.moto_sqs`).",
            "",
            table(
                [
                    "emulator",
                    "queued",
                    "receive + delete",
                    "queue attributes",
                    "send msg/s while filling",
                    "emulator RSS",
                ],
                rows,
            ),
            "",
            f"Largest backlog against the smallest: {times(emu['growth_largest_vs_smallest'])} "
            f"the cost of a pair; at 1,000 messages the fix is {fmt(emu['speedup_at_1k'])}× "
            "faster than moto as it is.",
            "",
        ]
    bursts = s.get("backlog")
    if bursts:
        limit = bursts["model_limit_inputs_per_s"]
        out += [
            "## A backlog drains at the workers' speed",
            "",
            "A fresh local platform with `minilm-embed` alone and one worker (`max_tasks` 1: "
            "the model's limit is one model on every core); a burst of async predicts sent "
            "at once (64 in flight), and the drain timed from the first submission to the "
            "last result the worker stored (`bench/backlog.py`). Beside each run, the "
            "model's own limit at batch 32 in the bench's process, measured just before the "
            "platform starts and just after it stops; the share is against their mean "
            f"(median of all: {fmt(limit)} inputs/s). Each burst runs "
            f"{bursts.get('repeats', 1)} time(s); the median share is in bold.",
            "",
            table(
                [
                    "burst",
                    "run",
                    "submitting took",
                    "first submission → last result",
                    "inputs/s",
                    "model's limit before / after",
                    "share of the model's limit",
                    "not done / submissions failed",
                    "median batch",
                    "CPU-s: worker / emulator / router / load generator",
                ],
                [
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
                        " / ".join(
                            fmt(r["cpu_seconds"].get(k))
                            for k in ("worker minilm-embed", "emulator", "router", "load generator")
                        ),
                    ]
                    for b in bursts["bursts"]
                    for i, r in enumerate(b["runs"])
                ],
            ),
            "",
            "Median share of the model's limit: "
            + "; ".join(
                f"{b['requests']:,} × {b['inputs_per_request']}: "
                f"**{times(b['median_share_of_model_limit'])}**"
                for b in bursts["bursts"]
            )
            + ".",
            "",
        ]
    return out


MEMORY_ROLES = ("splitter", "worker digits-cnn", "router", "supervisor", "emulator")


def _batch_jobs(s: dict[str, Any]) -> list[str]:
    mem, rt = s.get("batch_memory"), s.get("batch_realtime")
    if not mem and not rt:
        return []
    out = ["## Batch jobs: memory as the file grows, realtime beside a job", ""]
    if mem:
        out += [
            f"Files of images dropped in the drop bucket one after another, `{mem['model']}` "
            "alone with one worker; every process's RSS sampled every "
            f"{mem['sample_every_s']} s while each job ran (`bench/batch_jobs.py`). Each "
            "cell: RSS when the file was dropped → peak while its job ran (MiB).",
            "",
            table(
                ["lines", "file", "status", "job wall time", "lines/s", *MEMORY_ROLES],
                [
                    [
                        f"{j['lines_in_file']:,}",
                        f"{fmt(j['file_mib'])} MiB",
                        j["status"],
                        f"{fmt(j['seconds'])} s",
                        fmt(j["lines_per_s"]),
                        *[_memory_cell(j["memory"].get(role)) for role in MEMORY_ROLES],
                    ]
                    for j in mem["jobs"]
                ],
            ),
            "",
        ]
    if rt:
        alone, beside, job = rt["alone"], rt["beside_job"], rt["job"]
        out += [
            f"Realtime beside a job: `{rt['model']}` alone with one worker; open-loop sync "
            f"predicts of one sentence at {fmt(rt['rate'])} req/s for {fmt(rt['seconds'], 0)} s, "
            f"alone and then while a job of {rt['job_lines']:,} sentences ran on the batch "
            f"lane{'' if rt['job_ran_throughout'] else ' (the job ended before the step did)'}.",
            "",
            table(
                ["realtime", "answered / sent", "202 past the deadline", "p50", "p99"],
                [
                    [
                        name,
                        f"{step['ok']} / {step['sent']}",
                        step["miss_202"],
                        f"{fmt(step['p50_ms'])} ms",
                        f"{fmt(step['p99_ms'])} ms",
                    ]
                    for name, step in (("alone", alone), ("beside the job", beside))
                ],
            ),
            "",
            f"p99 beside the job is **{times(rt['p99_beside_over_alone'])}** of p99 alone "
            "(goal: within 1.5×). The job: "
            f"{job['lines']:,} lines in {fmt(job['seconds'])} s, {fmt(job['lines_per_s'])} "
            f"lines/s, **{times(rt['job_share_of_model_limit'])}** of the model's own limit "
            f"at batch 32 ({fmt(rt['model_limit_before'])} / {fmt(rt['model_limit_after'])} "
            "inputs/s before / after; goal ≥ 0.85×).",
            "",
        ]
    return out


def _memory_cell(cell: dict[str, float] | None) -> str:
    if not cell:
        return "–"
    return f"{fmt(cell['at_drop_mib'], 0)} → {fmt(cell['peak_mib'], 0)}"


def _scaling(s: dict[str, Any]) -> list[str]:
    sc = s.get("scaling")
    if not sc:
        return []
    out = [
        "## Scaling from zero",
        "",
        "A fresh local platform with `minilm-embed` alone at zero workers (dev's minimum) "
        "and a short idle time (`bench/scaling.py`).",
        "",
    ]
    zero = sc.get("first_request_at_zero") or {}
    if zero:
        out += [
            "**The first request at zero**: one sync predict of one sentence, its time to "
            "the answer split with the platform's own stamps: the autoscaler's `wake` "
            "(decision), the worker's `worker starting` (process start), `worker ready` "
            "(model load: the runtime's libraries, the artifact's check, the weights), and "
            "the answer at the caller (first batch: receive, batch, result write, the "
            "router's pick-up). *standby*: the platform's default, a worker taking over an "
            "interpreter that has the imports done; *cold*: `--standby-workers 0`, a new "
            "interpreter.",
            "",
            table(
                [
                    "start",
                    "run",
                    "total",
                    *PHASES.values(),
                    "of the load: import / artifact / weights",
                ],
                [
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
            ),
            "",
            "Median to the answer: "
            + "; ".join(
                f"{mode} **{fmt(m['median_total_seconds'], 2)} s**" for mode, m in zero.items()
            )
            + " (goal: 5 s).",
            "",
            f"![the first request at zero]({IMG}/scaling_from_zero.png)",
            "",
        ]
    b = sc.get("burst")
    if b:
        r = b["replay"]
        out += [
            f"**A burst from zero**: {b['requests']:,} async predicts of one sentence sent at "
            f"once; idle time {b['idle_seconds']} s and no cool-down between scale-ins; the "
            f"manifest's policy otherwise (`backlog_per_task` "
            f"{b['policy']['backlog_per_task']}, `max_tasks` {b['policy']['max_tasks']}, "
            f"`scale_out_cooldown_seconds` {b['policy']['scale_out_cooldown_seconds']}).",
            "",
            table(
                ["what", "live", "replay through `decide`"],
                [
                    ["requests answered", f"{b['done']:,} of {b['accepted']:,} accepted", "–"],
                    ["submitting took", f"{fmt(b['submit_seconds'])} s", "same arrivals"],
                    [
                        "first submission → last result",
                        f"{fmt(b['drain_seconds'])} s ({fmt(b['inputs_per_s'])} inputs/s)",
                        f"{fmt(r['drained_after_seconds'], 0)} s",
                    ],
                    [
                        "most workers running",
                        str(b["most_workers_running"]),
                        str(r["most_workers"]),
                    ],
                    [
                        "workers started (from the standby)",
                        f"{b['workers_started']} ({b['workers_from_standby']})",
                        f"{r['changes']} change(s) of the desired count",
                    ],
                    [
                        "workers ready after (s from the first submission)",
                        ", ".join(fmt(v) for v in b["workers_ready_after_seconds"]),
                        f"standby {fmt(r['standby_start_seconds'])}, cold "
                        + (
                            f"{fmt(r['cold_start_seconds'])} (from the live run)"
                            if r.get("cold_start_measured", True)
                            else f"{fmt(r['cold_start_seconds'])} (none ran live: 3× the standby's)"
                        ),
                    ],
                    [
                        "scaled in to zero after",
                        f"{fmt(b.get('scaled_in_after_seconds'))} s (every worker exited: "
                        f"{fmt(b['back_at_zero_after_seconds'])} s)",
                        f"{fmt(r['back_at_zero_after_seconds'], 0)} s",
                    ],
                ],
            ),
            "",
            f"The replay feeds the same arrivals, second by second, through `decide` in the "
            f"tests' simulator (`tests.scaling_scenarios.Simulator`), with the live run's "
            f"start times and {fmt(r['per_worker_inputs_per_s'])} inputs/s per worker (the "
            "live run's answers over its worker-seconds of running workers): what the policy "
            "alone does, beside what the platform did.",
            "",
            f"![a burst from zero]({IMG}/scaling_burst.png)",
            "",
        ]
    return out


GENERATION_TARGETS = {
    "bare": "bare transformers",
    "platform": "platform",
    "platform_openai": "platform, OpenAI API",
    "litserve": "LitServe",
}


def _generation(s: dict[str, Any]) -> list[str]:
    g = s.get("generation")
    if not g:
        return []
    targets = {k: g["targets"][k] for k in GENERATION_TARGETS if k in g["targets"]}
    rows = [
        [
            n,
            GENERATION_TARGETS[name],
            f"{fmt(lv['ttft_p50_ms'])} ms",
            f"{fmt(lv['ttft_p99_ms'])} ms",
            f"**{fmt(lv['tokens_per_s'])}**",
            fmt(lv["stream_tokens_per_s_p50"]),
            f"{lv['ok']} / {lv['requests']}",
        ]
        for n in g["concurrency"]
        for name, t in targets.items()
        for lv in t["levels"]
        if lv["concurrency"] == n
    ]
    seen = {
        r for t in targets.values() for lv in t["levels"] for r in lv.get("cpu_ms_per_token", {})
    }
    roles = sorted(seen, key=lambda r: (r == "load generator", r))
    cpu_rows = [
        [
            lv["concurrency"],
            GENERATION_TARGETS[name],
            *[fmt(lv["cpu_ms_per_token"].get(r), 2) for r in roles],
            pct(lv.get("others_busy_share")),
            fmt(lv.get("results_table_items"), 0),
        ]
        for name, t in targets.items()
        for lv in t["levels"]
        if "cpu_ms_per_token" in lv
    ]
    cpu = [
        "CPU milliseconds per streamed token, by process (*load generator* is this "
        "process: the HTTP client, and for bare transformers the model too), and the "
        "share of the machine that other work took meanwhile; for the platform, the "
        "items its results table held after the level (results and the streams' chunks):",
        "",
        table(["streams", "target", *roles, "other work", "table items"], cpu_rows),
        "",
    ]
    top = max(
        targets.get("platform", {}).get("levels", []),
        key=lambda lv: lv["concurrency"],
        default=None,
    )
    costs = {k: v for k, v in (top or {}).get("cpu_ms_per_token", {}).items() if v is not None}
    if costs:
        largest = max(costs, key=lambda k: costs[k])
        workers = [v for k, v in costs.items() if k.startswith("worker")]
        cpu.append(
            f"At {top['concurrency']} streams the platform's largest CPU cost per token is "
            f"the {largest} ({fmt(costs[largest], 2)} ms; the worker "
            f"{fmt(workers[0] if workers else None, 2)} ms)."
            + (
                " Locally the emulator carries the token streams (the worker's chunk "
                "writes, the router's polls of each stream), a cost that DynamoDB, not the "
                "serving machine, pays in the cloud."
                if largest == "emulator"
                else ""
            )
        )
        cpu.append("")
    overhead = g.get("ttft_overhead_p50_ms") or {}
    met = {True: "met", False: "**not met**", None: "–"}
    return [
        "## Generation: time to first token and tokens/s, streamed",
        "",
        f"`{g['model']}` streamed, every request a docstring-like prompt with `max_tokens` "
        f"{g['max_tokens']}, temperature {g['temperature']} and a seed of its own; N streams "
        "in a closed loop (each sends its next request when its last one ends; requests "
        "per level: "
        + ", ".join(f"{n}: {c}" for n, c in g["requests_per_level"].items())
        + "). TTFT runs from the call to the first token; tokens/s is every stream's "
        "completion tokens over the level's wall time; *per stream* is the median "
        "stream's own rate after its first token (`bench/generation.py`).",
        "",
        *[f"- {GENERATION_TARGETS[name]}: {t['how']}." for name, t in targets.items()],
        "",
        table(
            [
                "streams",
                "target",
                "TTFT p50",
                "TTFT p99",
                "tokens/s",
                "per stream tokens/s",
                "ok / sent",
            ],
            rows,
        ),
        "",
        *(cpu if cpu_rows else []),
        "The platform's TTFT over the bare runtime's, p50: "
        + ", ".join(f"{n} stream(s) {fmt(v)} ms" for n, v in overhead.items())
        + f"; at one stream {met[g.get('ttft_overhead_met')]} "
        f"(goal ≤ {fmt(g['ttft_overhead_goal_ms'], 0)} ms). The platform's tokens/s at "
        f"{g.get('batching_gain_streams')} streams over at one: "
        f"**{times(g.get('batching_gain'))}**, {met[g.get('batching_gain_met')]} "
        f"(goal ≥ {fmt(g['batching_gain_goal'], 0)}×: continuous batching).",
        "",
        *[
            f"Failed at {lv['concurrency']} stream(s) on {GENERATION_TARGETS[name]}: "
            f"{lv['errors']} request(s), the first with `{lv['first_error']}`.\n"
            for name, t in targets.items()
            for lv in t["levels"]
            if lv["errors"]
        ],
    ]


def _stream_transport(s: dict[str, Any]) -> list[str]:
    t = s.get("stream_transport")
    if not t:
        return []
    names = [n for n in t if isinstance(t[n], dict)]
    rows = [
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
    ]
    return [
        "## Streaming transport",
        "",
        f"How a streamed generation's chunks could travel from the worker to the router, on "
        f"the local emulator (`bench/stream_transport.py`): {t['streams']} streams at once, "
        f"each {t['chunks_per_stream']} chunks written {t['gap_ms']:g} ms apart, a reader per "
        "stream. *Delay* runs from a chunk's write to its reader having it; *calls* are the "
        "AWS calls a stream cost, writer and reader; *setup* is what a stream needs before "
        "its first chunk. The platform uses the results table with the hub "
        "([generation.md](generation.md#why-the-results-table-carries-the-stream)).",
        "",
        table(
            ["transport", "delay p50", "delay p99", "setup p50", "calls per stream",
             "emulator CPU per chunk", "delivered"],
            rows,
        ),
        "",
    ]  # fmt: skip


def _model_limit(s: dict[str, Any]) -> list[str]:
    ml = s.get("model_limit")
    if not ml or "models" not in ml:
        return []
    out = [
        "## 1. Model limit",
        "",
        "The model called directly in one process, no serving layer: the ceiling on this "
        f"machine. Median of {ml['rounds']} rounds of {ml['window_seconds']} s windows per batch "
        "size. *Runtime* is the platform's wrapper (`switchyard_worker.runtimes`), which also "
        "turns the outputs into JSON-ready lists.",
        "",
    ]
    for name, rows in ml["models"].items():
        out += [
            f"**{name}**",
            "",
            table(
                [
                    "batch size",
                    "model inputs/s",
                    "ms per batch",
                    "runtime inputs/s",
                    "runtime / model",
                ],
                [
                    [
                        r["batch_size"],
                        fmt(r["model_inputs_per_s"]),
                        fmt(r["model_ms_per_batch"], 2),
                        fmt(r["runtime_inputs_per_s"]),
                        times(r["runtime_share_of_model"]),
                    ]
                    for r in rows
                ],
            ),
            "",
        ]
    text = ml["models"].get("minilm-embed")
    if text:
        first, last = text[0], text[-1]
        best = max(text, key=lambda r: r["model_inputs_per_s"])
        out += [
            f"Reading: batching is what the model rewards, up to a point. minilm-embed does "
            f"{fmt(first['model_inputs_per_s'])} inputs/s one at a time and at most "
            f"{fmt(best['model_inputs_per_s'])} (batch {best['batch_size']}, "
            f"{times(ratio(best['model_inputs_per_s'], first['model_inputs_per_s']), 1)}); past "
            "that, two cores are simply busy. The runtime wrapper keeps "
            f"{pct(last['runtime_share_of_model'])} of the bare model at batch "
            f"{last['batch_size']}; the rest is turning 384 floats per input into lists.",
            "",
        ]
    out += ["![model limit](img/model_limit.png)", ""]
    return out


def _worker(s: dict[str, Any]) -> list[str]:
    we = s.get("worker_efficiency")
    if not we:
        return []
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
    out = [
        "## 2. Worker efficiency",
        "",
        "The worker's own loop (`Worker.run`: receive, decode, validate, assemble, run, record, "
        "store, delete) fed through an in-memory queue filled before it starts, so it never "
        "waits for work; queues, registry and results are in-memory stand-ins (`bench/"
        "stand_ins.py`), so no AWS round trip is counted here. One input per message. The model "
        "limit is measured again beside the run, at the batch sizes the worker formed, weighted "
        "by the inputs that went through each.",
        "",
        table(
            [
                "model",
                "done",
                "inputs/s",
                "max batch / wait",
                "batches formed (size×count)",
                "model limit at those sizes",
                "worker / limit",
                "model limit at max batch",
                "worker / that",
                "per batch ms: model / output conversion / loop",
                "time outside the model",
            ],
            rows,
        ),
        "",
    ]
    w = we.get("minilm-embed")
    if isinstance(w, dict) and "batch_sizes" in w:
        sizes = w["batch_sizes"]
        full = sizes.get(str(w["max_batch_size"]), sizes.get(w["max_batch_size"], 0))
        short = w["batches"] - full
        why = (
            f"every batch was full ({w['max_batch_size']} inputs)."
            if not short
            else f"{short} of {w['batches']} batches were not full (mean batch "
            f"{fmt(w['mean_batch_size'])} inputs): a batch that is due by `max_wait_ms` runs "
            "with what it holds."
        )
        out += [
            f"Reading: at saturation the worker reaches {times(w.get('efficiency_vs_model'))} of "
            f"what the model does at the batch sizes it formed; "
            f"{pct(w.get('share_outside_model'))} of each batch's time is spent outside the model "
            f"(receive, decode, validate, record, store, delete), and {why}",
            "",
        ]
    d = we.get("digits-cnn")
    if isinstance(d, dict) and d.get("share_outside_model") is not None:
        out += [
            f"For digits-cnn, whose model takes {fmt(d['per_batch_ms']['model'], 2)} ms for a "
            f"batch of {d['typical_batch_size']}, the loop is the cost: "
            f"{pct(d['share_outside_model'])} of the time is outside the model and the worker "
            f"does {times(d.get('efficiency_vs_model'))} of the model's rate; per input it costs "
            f"{fmt(1000 / d['inputs_per_s'], 3)} ms, a fixed price that a light model cannot "
            "hide.",
            "",
        ]
    return out


def _steps_table(steps: list[dict[str, Any]]) -> str:
    return table(
        [
            "offered req/s",
            "sent",
            "ok",
            "202",
            "errors",
            "timeouts",
            "completed req/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "sustained",
            "other work on the machine (tries)",
        ],
        [
            [
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
            for x in steps
        ],
    )


def _end_to_end(s: dict[str, Any], results: dict[str, Any]) -> list[str]:
    e2e = s.get("end_to_end")
    peer = s.get("peer_litserve")
    if not e2e and not peer:
        return []
    out = [
        "## 3. End to end on the local platform, and against a peer (LitServe)",
        "",
        "The local platform as real processes (`switchyard up`: emulator, router under uvicorn, "
        "one worker per model), started afresh for each configuration. An open-loop generator "
        "(`bench/loadgen.py`) sends sync predicts of one sentence at Poisson arrival times at "
        "each offered rate, whether or not earlier requests were answered; latency is counted "
        "from each request's scheduled time. Deadline `x-deadline-ms: 10000`: a 202 counts as "
        "a miss. A rate is *sustained* when every request is answered and p99 < 500 ms; each "
        "ladder stops at the first rate that is not. This machine is shared: a step that "
        "fails while other work takes more than a fifth of it is run again (up to twice, "
        "full mode) once the machine is quiet, and the last column says how much other work "
        "there was during the step kept. The peer is LitServe "
        "(`bench/peer_server.py`) serving the same model files with its own batching set like "
        "the worker (max batch 32, batch timeout 10 ms, one inference worker), hit by the same "
        "generator at the same rates, the same sentences and the same request body.",
        "",
    ]
    for title, key in (
        ("micro-batching on (max_batch_size 32)", "batching_on"),
        ("micro-batching off (max_batch_size 1)", "batching_off"),
    ):
        t = (e2e or {}).get(key)
        if t and t.get("steps"):
            out += [
                f"**Platform, {title}** — platform start-up {fmt(t.get('startup_seconds'))} s;"
                f" sustainable rate **{fmt(t.get('sustainable_rate'), 0)} req/s**",
                "",
                _steps_table(t["steps"]),
                "",
            ]
    if peer and peer.get("steps"):
        out += [
            f"**LitServe {results['machine']['packages'].get('litserve')}** — start-up "
            f"{fmt(peer.get('startup_seconds'))} s; sustainable rate "
            f"**{fmt(peer.get('sustainable_rate'), 0)} req/s**",
            "",
            _steps_table(peer["steps"]),
            "",
        ]
    digits = (e2e or {}).get("digits_batching_on")
    if digits and digits.get("steps"):
        out += [
            f"**Platform, digits-cnn, micro-batching on** — sustainable rate "
            f"**{fmt(digits.get('sustainable_rate'), 0)} req/s**",
            "",
            _steps_table(digits["steps"]),
            "",
        ]
    cmp_ = results.get("comparison")
    if cmp_ and cmp_.get("common_rates"):
        out += [
            "**Side by side at common rates**",
            "",
            table(
                ["offered req/s", "platform p99 ms", "LitServe p99 ms", "platform / LitServe"],
                [
                    [
                        fmt(r["rate"], 0),
                        fmt(r["platform_p99_ms"]),
                        fmt(r["peer_p99_ms"]),
                        times(r["p99_ratio"]),
                    ]
                    for r in cmp_["common_rates"]
                ],
            ),
            "",
        ]
    out += _cpu_table(e2e or {}, peer or {})
    on = (e2e or {}).get("batching_on", {})
    off = (e2e or {}).get("batching_off", {})
    reading = ["Reading:"]
    if on:
        reading.append(
            f"with micro-batching the local platform sustains {fmt(on.get('sustainable_rate'), 0)}"
            f" req/s, without it {fmt(off.get('sustainable_rate'), 0)} req/s "
            f"(gain {times(e2e.get('batching_gain'))})."
        )
    if cmp_:
        reading.append(
            f"LitServe sustains {fmt(cmp_.get('peer_sustainable_rate'), 0)} req/s on the same "
            f"machine: the platform reaches {times(cmp_.get('rate_ratio'))} of it."
        )
    ours_cpu = cpu_step(on) if on else None
    theirs_cpu = cpu_step(peer or {}, ours_cpu["rate"] if ours_cpu else None)
    if ours_cpu:
        cpu = {
            k: v for k, v in ours_cpu["cpu_ms_per_request"].items() if k != "supervisor" and v >= 1
        }
        parts = ", ".join(
            f"{k} {fmt(v, 0)} ms" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])
        )
        reading.append(
            f"The reason is CPU: at {fmt(ours_cpu['rate'], 0)} req/s each answered request costs "
            f"{fmt(ours_cpu['cpu_ms_per_request_total'], 0)} ms of CPU across the platform's "
            f"processes ({parts})"
            + (
                f", where LitServe spends {fmt(theirs_cpu['cpu_ms_per_request_total'], 0)} ms at "
                f"{fmt(theirs_cpu['rate'], 0)} req/s"
                if theirs_cpu
                else ""
            )
            + ". The model itself needs about "
            f"{fmt(_model_ms_one(s), 0)} ms per input one at a time (section 1). The rest is "
            "the emulator serving the queue and table calls, the worker's own loop and AWS "
            "calls around the model, and the router's boto3 calls (the router's own work, "
            "without AWS calls, is under a millisecond: section 6). Batching saves model time "
            "only, and model time is the smaller part"
            + _batching_saving(ours_cpu, off)
            + ", which is why turning micro-batching off costs so little here."
        )
    if digits and digits.get("steps"):
        reading.append(
            f"digits-cnn, a model ~100× cheaper per input, sustains "
            f"{fmt(digits.get('sustainable_rate'), 0)} req/s: there the path, not the model, "
            "sets the ceiling."
        )
    reading.append(
        "Locally every request also pays the emulator, a single Python process doing the work "
        "of SQS and DynamoDB on the same two cores as the router, the worker and the load "
        "generator; section 4 shows how much of each request that is."
    )
    out += [" ".join(reading), "", "![end to end](img/end_to_end.png)", ""]
    return out


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


def _cpu_table(e2e: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    on = e2e.get("batching_on") or {}
    common = cpu_step(on)
    candidates = [
        ("platform, batching on", common),
        ("platform, batching off", cpu_step(e2e.get("batching_off") or {})),
        ("LitServe", cpu_step(peer, common["rate"]) if common else None),
        ("LitServe", cpu_step(peer)),
    ]
    seen: set[tuple[str, float]] = set()
    chosen = []
    for label, x in candidates:
        if x and (label, x["rate"]) not in seen:
            seen.add((label, x["rate"]))
            chosen.append((label, x))
    if not chosen:
        return []
    roles: list[str] = []
    for _, x in chosen:
        roles += [r for r in x["cpu_ms_per_request"] if r not in roles]
    rows = []
    for label, x in chosen:
        cpu = x["cpu_ms_per_request"]
        rows.append(
            [f"{label} at {fmt(x['rate'], 0)} req/s"]
            + [fmt(cpu.get(r), 1) for r in roles]
            + [f"**{fmt(x['cpu_ms_per_request_total'], 1)}**", pct(x.get("cpu_busy_share"))]
        )
    return [
        "**CPU per answered request, by process** (ms of CPU, user + system, from /proc, over "
        "a whole step, idle work included, at each configuration's sustainable rate and for "
        "LitServe also at the platform's; the load generator runs in the suite's own process)."
        " On two cores, 2,000 ms of CPU per second is all there is: the total per request "
        "bounds the rate the whole system can reach.",
        "",
        table(["target"] + roles + ["total", "machine busy"], rows),
        "",
    ]


def _breakdown(s: dict[str, Any]) -> list[str]:
    e2e = s.get("end_to_end") or {}
    on = e2e.get("batching_on") or {}
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
        return []
    names = [st["stage"] for st in parts[0][1]["stages"]]
    header = ["stage"] + [f"{label}: mean ms (share)" for label, _ in parts]
    rows = []
    for i, name in enumerate(names):
        row = [name]
        for _, b in parts:
            st = b["stages"][i]
            row.append(f"{fmt(st['mean_ms'], 2)} ({pct(st['share'])})")
        rows.append(row)
    rows.append(
        ["**client latency**"] + [f"**{fmt(b['client_latency_mean_ms'], 2)}**" for _, b in parts]
    )
    one = parts[0][1]
    largest = max(one["stages"], key=lambda st: st["mean_ms"])
    aws_path = sum(
        st["mean_ms"]
        for st in one["stages"]
        if st["stage"] in ("enqueue", "queue wait", "result write (est.)", "result pick-up")
    )
    return [
        "## 4. Where the time goes",
        "",
        "From the `timings` each answer carries (router, enqueue, queue wait, batch wait, "
        "compute, pick-up; `_durations` in the router), means over the requests (means add up; "
        f"{one['requests']} sequential requests for *one at a time*). The platform records no "
        "separate time for the result write: it lies inside the pick-up time (from the worker's "
        "completion stamp to the router's answer), so it is split out with the worker's "
        "`PutItem` latency measured against an emulator by section 5. *Other in router* is the "
        "rest of the router's own total; *HTTP, server and client* is the client's latency "
        "beyond it.",
        "",
        table(header, rows),
        "",
        f"Reading: the largest cost in the path of one request is **{largest['stage']}** "
        f"({fmt(largest['mean_ms'])} ms, {pct(largest['share'])}); the four steps that go "
        f"through the queue and the results table (enqueue, queue wait, result write, pick-up) "
        f"add {fmt(aws_path)} ms "
        f"({pct(ratio(aws_path, one['client_latency_mean_ms']))}) on the emulator. Pick-up "
        "includes the router's polling of the results table, so it is at least the time to "
        "its next look. Batch wait is the price of micro-batching for a request that arrives "
        "alone: the worker holds it for `max_wait_ms` (10 ms) in case others come, then runs "
        "it; under load the queue wait and pick-up grow instead.",
        "",
        "![breakdown](img/breakdown.png)",
        "",
    ]


def _aws(s: dict[str, Any]) -> list[str]:
    aws = s.get("aws_calls")
    if not aws or "paths" not in aws:
        return []
    p = aws["paths"]
    labels = {
        "sync": "sync predict, one at a time",
        "async_one_at_a_time": "async predict + one GET poll, one at a time",
        "async_burst": "async predict + one GET poll, burst",
        "batch": "batch file (splitter + worker)",
        "repeats": "sync predict, repeated inputs (result cache)",
    }
    rows = []
    for key, label in labels.items():
        if key not in p:
            continue
        x = p[key]
        ops = "; ".join(
            f"{actor}: " + ", ".join(f"{op} {v:g}" for op, v in calls.items())
            for actor, calls in x["per_inference"].items()
        )
        c = x["usd_per_million_inferences"]
        rows.append(
            [
                label,
                f"{x['inferences']} / {x['requests']}",
                ops,
                fmt(x["sqs_requests_per_inference"], 3),
                fmt(x["sqs_empty_receives_per_inference"], 3),
                f"{fmt(x['dynamodb_wru_per_inference'], 2)} / "
                f"{fmt(x['dynamodb_rru_per_inference'], 2)}",
                fmt(x["s3_requests_per_inference"], 3),
                f"${fmt(c['sqs'], 3)}",
                f"${fmt(c['dynamodb_writes'] + c['dynamodb_reads'], 3)}",
                f"${fmt(c['s3'], 3)}",
                f"${fmt(c.get('firehose_prediction_log'), 3)}",
                f"**${fmt(c['total'], 2)}**",
            ]
        )
    pr = aws["prices_usd"]
    la = aws.get("lambda_api_gateway", {})
    la_rows = [
        [
            name,
            fmt(v["lambda_invocations_per_inference"], 4),
            f"${fmt(v['usd_lambda'], 3)}",
            f"${fmt(v['usd_api_gateway'], 3)}",
        ]
        for name, v in la.get("paths", {}).items()
    ]
    idle = p.get("idle_worker", {})
    sync = p.get("sync", {})
    out = [
        "## 5. AWS calls and cost per inference",
        "",
        "Counted with botocore event hooks (`before-parameter-build`, `before-call`, "
        "`after-call`) on the platform's own clients while the real router app (driven "
        "in-process through ASGI), a worker thread (`Worker.run`) and the batch splitter "
        "(`handle_event`) run against a private emulator provisioned like the platform; the "
        "model is the real minilm-embed. Calls are told apart by the thread that made them. "
        "DynamoDB capacity units are computed from the item sizes (1 KB per write unit, 4 KB "
        "per strongly consistent read unit). Per inference = per input (one input per request "
        "except in the batch file). The router learns the tenant from the API key id API "
        "Gateway passes in the request context, with no call. Cache refreshes (routing "
        "document every "
        f"{fmt(aws['cache_refresh']['routing_seconds'], 0)} s through the AppConfig "
        "extension, registry versions every "
        f"{fmt(aws['cache_refresh']['registry_versions_seconds'], 0)} s, per router instance) "
        "are not per inference and are left out.",
        "",
        table(
            [
                "path",
                "inputs / requests",
                "calls per inference (by part)",
                "SQS req",
                "of which empty receives",
                "DynamoDB WRU / RRU",
                "S3 req",
                "SQS $",
                "DynamoDB $",
                "S3 $",
                "Firehose $",
                "$ per million inferences",
            ],
            rows,
        ),
        "",
        f"Prices ({aws['region']}): SQS standard ${pr['sqs_per_million_requests']} per million "
        f"requests; DynamoDB on-demand ${pr['dynamodb_per_million_wru']} per million write "
        f"request units and ${pr['dynamodb_per_million_rru']} per million read request units; "
        f"S3 Standard PUT ${pr['s3_put_per_thousand']} and GET ${pr['s3_get_per_thousand']} per "
        f"1,000; Data Firehose ${pr['firehose_per_gb_ingested']} per GB (records rounded up to "
        f"5 KB); Lambda ${pr['lambda_per_million_requests']} per million requests and "
        f"${pr['lambda_per_gb_second_x86']} per GB-second (x86); API Gateway REST "
        f"${pr['apigateway_rest_per_million']} per million calls. {aws['price_sources']}",
        "",
        f"Router function and API Gateway, priced apart (router memory {la.get('router_memory_mb')}"
        " MB, read from `stacks/`; a sync invocation is billed for the time it waits for the "
        "worker, here the in-process wall time against the emulator):",
        "",
        table(
            [
                "path",
                "Lambda invocations per inference",
                "Lambda $ per million",
                "API Gateway $ per million",
            ],
            la_rows,
        ),
        "",
        f"An idle worker makes {fmt(idle.get('sqs_requests_per_worker_hour'), 0)} SQS requests "
        f"an hour (long polls of the realtime queue and a short poll of the batch queue): "
        f"${fmt(idle.get('usd_per_worker_month'), 2)} per worker-month, whatever the traffic.",
        "",
        _aws_reading(sync, la),
        "",
        *_cache_reading(p.get("repeats")),
        "![AWS cost](img/aws_cost.png)",
        "",
    ]
    return out


def _cache_reading(r: dict[str, Any] | None) -> list[str]:
    if not r:
        return []
    calls = ", ".join(f"{op} {v:g}" for op, v in r["router_calls_per_hit"].items())
    return [
        "**Result cache.** "
        f"{r['requests']} sync predicts of one sentence drawn from {r['distinct_inputs']} "
        "sentences by a Zipf law (s = 1.1, seeded), one at a time "
        f"(`scenario_repeats`): hit rate {fmt(100 * r['hit_rate'], 1)} % (the most any cache "
        f"could give on this draw: {fmt(100 * r['best_possible_hit_rate'], 1)} %, every first "
        "sight of a sentence being a miss). A hit took "
        f"{fmt(r['hit_router_ms_p50'], 2)} ms in the router at p50, a miss "
        f"{fmt(r['miss_router_ms_p50'], 2)} ms (queued, batched, run, stored, read back). "
        f"A hit costs the router {calls} per request and nothing else: "
        f"${fmt(r['usd_per_million_hits'], 3)} per million hits in SQS, DynamoDB, S3 and "
        "Firehose requests; the row above prices the whole mix. A miss pays one read more "
        "than without the cache, and its worker one write per batch to fill the entries.",
        "",
    ]


def _aws_reading(sync: dict[str, Any], la: dict[str, Any]) -> str:
    if not sync:
        return ""
    cost = sync["usd_per_million_inferences"]
    parts = {
        "DynamoDB writes": cost["dynamodb_writes"],
        "SQS requests": cost["sqs"],
        "DynamoDB reads": cost["dynamodb_reads"],
        "S3 requests": cost["s3"],
        "Firehose records": cost.get("firehose_prediction_log", 0.0),
    }
    name, value = max(parts.items(), key=lambda kv: kv[1])
    lam = la.get("paths", {}).get("sync", {})
    front = (lam.get("usd_api_gateway") or 0.0) + (lam.get("usd_lambda") or 0.0)
    return (
        f"Reading: a sync inference costs ${fmt(cost['total'], 2)} per million in AWS requests; "
        f"the largest item is {name} (${fmt(value, 2)}). The results item is written twice "
        f"(queued, then done with its 384 floats packed as float32), "
        f"{fmt(sync['dynamodb_wru_per_inference'], 1)} write units in all, and the router's "
        f"polling reads it {fmt(sync.get('result_polls_per_request'), 1)} times per request. "
        f"Empty receives, made by the worker while it assembles a batch and while it waits, are "
        f"{fmt(sync['sqs_empty_receives_per_inference'], 1)} of the "
        f"{fmt(sync['sqs_requests_per_inference'], 1)} SQS requests per inference one at a time, "
        "and fall away under load (the burst row). API Gateway "
        f"(${fmt(lam.get('usd_api_gateway'), 2)}) and the router function "
        f"(${fmt(lam.get('usd_lambda'), 2)}, billed while it waits) come on top: "
        f"{times(ratio(front, cost['total']), 2)} the queue and table requests. A batch file is "
        "the cheapest path by far: one message, one result and one claim-check object per 64 "
        "inputs."
    )


def _cold(s: dict[str, Any]) -> list[str]:
    c = s.get("cold_start")
    if not c or "cold_start" not in c:
        return []
    cs, w = c["cold_start"], c["warm"]
    return [
        "## 6. Router cold start and warm CPU",
        "",
        f"Cold start: the router function as it deploys (its code asset and the core layer, "
        f"built by the CDK app's bundling code"
        f"{', at /var/task and /opt/python' if cs.get('deployed_paths') else ''}), started "
        f"by the Lambda runtime stand-in: interpreter start, the handler's import (settings "
        f"read, clients built, as at Lambda init), then its first event, an async predict "
        f"(registry, queued record, enqueue) against the emulator; median of {cs['runs']} "
        f"runs.",
        "",
        table(
            [
                "interpreter start",
                "import handler (init)",
                "first request",
                "to first answer",
                "second (warm) request",
            ],
            [
                [
                    f"{fmt(cs['interpreter_ms'])} ms",
                    f"{fmt(cs['import_ms'])} ms",
                    f"{fmt(cs['first_request_ms'])} ms",
                    f"**{fmt(cs['to_first_answer_ms'])} ms**",
                    f"{fmt(cs['second_request_ms'])} ms",
                ]
            ],
        ),
        "",
        f"Warm CPU: the router app in-process on in-memory stand-ins (no AWS calls at all) "
        f"with a stand-in worker that answers each request as it is enqueued; "
        f"`time.process_time()` over {w['requests']} sync predicts, less the stand-ins' and the "
        f"ASGI driver's own CPU.",
        "",
        table(
            ["router CPU per request", "requests per CPU-second", "wall per request in-process"],
            [
                [
                    f"**{fmt(w['router_cpu_ms_per_request'], 3)} ms**",
                    fmt(w["requests_per_cpu_second"], 0),
                    f"{fmt(w['wall_ms_per_request'], 3)} ms",
                ]
            ],
        ),
        "",
        f"Reading: the router's own work is small: {fmt(w['router_cpu_ms_per_request'], 2)} ms "
        f"of CPU per request, against {fmt(cs['to_first_answer_ms'], 0)} ms for a new instance "
        f"to give its first answer, of which the first request (clients and caches built on "
        f"first use) is {fmt(cs['first_request_ms'], 0)} ms and the import "
        f"{fmt(cs['import_ms'], 0)} ms.",
        "",
    ]


def _sections_meta(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            name,
            fmt(meta.get("seconds"), 1),
            meta.get("load_before"),
            meta.get("load_after"),
            meta.get("error") or "ok",
        ]
        for name, meta in results.get("timing", {}).items()
    ]
    return [
        "## How this run went",
        "",
        table(["section", "seconds", "load avg before", "load avg after", "status"], rows),
        "",
        "Reproduce with `make bench` (full: `python -m bench run --out docs`) or "
        "`make bench-quick` (short steps, under three minutes: `python -m bench run --quick "
        "--out <folder>`). Each writes `benchmarks.md`, `benchmarks.json` and `img/*.png` in "
        "its folder.",
        "",
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
