"""The bench's PNG plots under ``img/``, drawn from the figures a run recorded; the
page (``bench/report.py``) links each one where its section is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

IMG = "img"

# The first request at zero, split into the platform's own stamps: key in the figures,
# and the name the plot and the page give it.
PHASES = {
    "decision": "decision",
    "process_start": "process start",
    "model_load": "model load",
    "first_batch": "first batch and answer",
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
        bars.append((f"at {rate:,.0f} req/s", at_rate))
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
