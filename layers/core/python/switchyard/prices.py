"""What the platform's AWS services cost: a price table for ``switchyard plan``.

List prices in us-east-1 (US East, N. Virginia), USD, on-demand, free tiers
ignored. A price is a number per unit, or tiers: ``[[width, price], ...]`` in the
same unit, each tier's width the units it covers in a month (the last one's may be
``inf``), as AWS bills API Gateway, Lambda, SQS and Firehose at volume. A profile's
``[prices]`` table replaces any of them (``instances_per_hour`` adds to the types
here); see :data:`PRICE_SOURCES` for where each came from.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

Price = float | list[tuple[float, float]]

PRICES_AS_OF = "2026-11-27"
PRICE_SOURCES = (
    "AWS list prices for us-east-1 at the time of writing (2026-11-27): API Gateway REST "
    "(tiers: first 333 million calls a month $3.50 per million, next 667 million $2.80, next "
    "19 billion $2.38, over 20 billion $1.51); Lambda x86 ($0.20 per million requests; "
    "$0.0000166667 per GB-second for the first 6 billion GB-seconds a month, $0.000015 for "
    "the next 9 billion, $0.0000133334 beyond); SQS standard queues ($0.40 per million "
    "requests up to 100 billion a month, $0.30 for the next 100 billion, $0.24 beyond; each "
    "64 KB of a payload a request); DynamoDB on-demand ($0.625 per million write request "
    "units, $0.125 per million read request units, the prices since the November 2024 "
    "reduction); S3 Standard ($0.005 per thousand PUT, COPY, POST or LIST requests, $0.0004 "
    "per thousand GET and other requests); Data Firehose Direct PUT ($0.029 per GB for the "
    "first 500 TB a month, $0.025 "
    "for the next 1.5 PB, $0.020 for the next 3 PB; each record rounded up to 5 KB); EC2 "
    "on-demand Linux per instance-hour. The tiers were read from AWS's pricing pages and "
    "whitepapers; bench/aws_calls.py prices the measured calls with the same first tiers. "
    "Free tiers are ignored."
)


# us-east-1 on-demand Linux, USD per hour, for the types switchyard.quotas knows.
INSTANCE_PRICES = {
    "g4dn.xlarge": 0.526,
    "g4dn.2xlarge": 0.752,
    "g5.xlarge": 1.006,
    "g5.2xlarge": 1.212,
    "g5.4xlarge": 1.624,
    "g6.xlarge": 0.8048,
    "g6.2xlarge": 0.9776,
    "g6.4xlarge": 1.3232,
    "c7i.large": 0.08925,
    "c7i.xlarge": 0.1785,
    "c7i.2xlarge": 0.357,
    "m7i.xlarge": 0.2016,
    "m7i.2xlarge": 0.4032,
}


class PriceTable(BaseModel):
    """The prices a plan multiplies its counts by (USD, us-east-1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    apigateway_rest_per_million: Price = Field(
        default=[(333.0, 3.50), (667.0, 2.80), (19_000.0, 2.38), (math.inf, 1.51)],
        description="REST API calls, per million (tiers in millions a month)",
    )
    lambda_per_million_requests: Price = Field(default=0.20, description="Invocations")
    lambda_per_gb_second: Price = Field(
        default=[(6e9, 0.0000166667), (9e9, 0.000015), (math.inf, 0.0000133334)],
        description="Duration, x86 (tiers in GB-seconds a month)",
    )
    sqs_per_million_requests: Price = Field(
        default=[(100_000.0, 0.40), (100_000.0, 0.30), (math.inf, 0.24)],
        description="Standard queue requests, per million (tiers in millions a month)",
    )
    dynamodb_per_million_wru: Price = Field(default=0.625, description="On-demand writes")
    dynamodb_per_million_rru: Price = Field(default=0.125, description="On-demand reads")
    s3_put_per_thousand: Price = Field(
        default=0.005, description="S3 Standard PUT, COPY, POST and LIST requests, per thousand"
    )
    s3_get_per_thousand: Price = Field(
        default=0.0004, description="S3 Standard GET and other requests, per thousand"
    )
    firehose_per_gb: Price = Field(
        default=[(500_000.0, 0.029), (1_500_000.0, 0.025), (3_000_000.0, 0.020)],
        description="Direct PUT ingestion, records rounded up to 5 KB (tiers in GB a month; "
        "past the last tier its price goes on)",
    )
    instances_per_hour: dict[str, float] = Field(
        default_factory=lambda: dict(INSTANCE_PRICES),
        description="EC2 on-demand Linux, per instance-hour (added to the defaults)",
    )

    @field_serializer(
        "apigateway_rest_per_million",
        "lambda_per_gb_second",
        "sqs_per_million_requests",
        "firehose_per_gb",
        when_used="json",
    )
    def _inf_as_text(self, price: Price) -> Any:
        """A last tier's width of ``inf`` as ``"inf"`` in JSON (which has no infinity:
        it would be written null), read back as ``inf`` (a manifest passed as JSON)."""
        if isinstance(price, float):
            return price
        return [[width if math.isfinite(width) else "inf", usd] for width, usd in price]

    @field_validator("instances_per_hour", mode="after")
    @classmethod
    def _with_defaults(cls, given: dict[str, float]) -> dict[str, float]:
        return {**INSTANCE_PRICES, **given}

    @field_validator(
        "apigateway_rest_per_million",
        "lambda_per_million_requests",
        "lambda_per_gb_second",
        "sqs_per_million_requests",
        "dynamodb_per_million_wru",
        "dynamodb_per_million_rru",
        "s3_put_per_thousand",
        "s3_get_per_thousand",
        "firehose_per_gb",
        mode="after",
    )
    @classmethod
    def _tiers_make_sense(cls, price: Price) -> Price:
        if isinstance(price, float):
            if price < 0:
                raise ValueError("a price is not negative")
            return price
        if not price:
            raise ValueError("tiers are at least one [width, price]")
        for width, usd in price:
            if width <= 0 or usd < 0:
                raise ValueError("each tier [width, price] has a width > 0 and a price >= 0")
        return price


def cost(units: float, price: Price) -> float:
    """What ``units`` cost in a month at ``price`` (a number per unit, or tiers, the
    last one's price going on past its width)."""
    if isinstance(price, int | float):
        return units * price
    total, left = 0.0, units
    for i, (width, usd) in enumerate(price):
        last = i == len(price) - 1
        take = left if last else min(left, width)
        total += take * usd
        left -= take
        if left <= 0:
            break
    return total


def first_price(price: Price) -> float:
    """What one more unit costs at the start of a month: the price, or the first
    tier's (what one request is charged: its share of a month's volume is too small
    to move it past a tier)."""
    return float(price) if isinstance(price, int | float) else price[0][1]
