"""The AWS machine types refreshed from AWS itself: specs, on-demand and spot prices, and when each was read."""

import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from shared import machine_types
from shared.core.db import floats, transaction
from shared.core.errors import InvalidRequest, NotFound, ServiceUnavailable, TraincastError

# The Pricing API is served from a few regions only; us-east-1 answers for every region's prices.
PRICING_REGION = "us-east-1"
# DescribeInstanceTypes takes at most 100 names per call.
TYPES_PER_CALL = 100
MIB_PER_GIB = Decimal(1024)
PEAK_SOURCE = "GPU peak figures and board power: data/aws_gpu_instances.csv"
# Error codes that mean the credentials or their IAM policy must change, not that AWS is unwell.
DENIED_CODES = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure", "ExpiredToken"}
DENIED_CODES |= {"InvalidClientTokenId", "UnrecognizedClientException"}


class Figure(NamedTuple):
    """A price as read from AWS: its value and when, or why there is none."""

    value: Decimal | None
    read_at: datetime | None = None
    missing: str | None = None


def refresh(*, region: str, types: list[str] | None, ec2: Any = None, pricing: Any = None) -> list[dict[str, Any]]:
    """Read specs and prices of AWS GPU types (default: every AWS type in the catalog) and store them."""
    names = _requested(types=types)
    if not names:
        return []
    ec2 = boto3.client("ec2", region_name=region) if ec2 is None else ec2
    pricing = boto3.client("pricing", region_name=PRICING_REGION) if pricing is None else pricing
    # Everything is read before anything is written, so a failure part-way leaves the catalog as it was.
    specs = read_specs(ec2=ec2, names=names, region=region)
    readings = [
        {
            **specs[name],
            "price": _read_price(pricing=pricing, name=name, region=region),
            "spot_price": read_spot(ec2=ec2, name=name, region=region),
        }
        for name in names
    ]
    return _store(readings=readings, region=region)


def _requested(*, types: list[str] | None) -> list[str]:
    """The de-duplicated type names to refresh; only AWS types may be named."""
    if types is None:
        return list(machine_types.aws_prices())
    names = list(dict.fromkeys(t.strip() for t in types if t.strip()))
    others = machine_types.not_aws(names=names)
    if others:
        listed = ", ".join(f"{r['name']} ({r['provider']})" for r in others)
        raise InvalidRequest(f"not AWS machine types, nothing to read from AWS: {listed}", types=names)
    return names


def read_specs(*, ec2: Any, names: list[str], region: str) -> dict[str, dict[str, Any]]:
    """GPU model, count and memory, vCPUs and RAM of each type from EC2 DescribeInstanceTypes."""
    found: dict[str, dict[str, Any]] = {}
    try:
        for start in range(0, len(names), TYPES_PER_CALL):
            pages = ec2.get_paginator("describe_instance_types").paginate(
                InstanceTypes=names[start : start + TYPES_PER_CALL]
            )
            for page in pages:
                for item in page["InstanceTypes"]:
                    found[item["InstanceType"]] = item
    except ClientError as exc:
        if _code(exc) == "InvalidInstanceType":
            unknown = _listed(str(exc)) or names
            raise NotFound(
                f"AWS does not offer instance type(s) {', '.join(unknown)} in {region}; nothing was changed",
                types=unknown,
                region=region,
            ) from exc
        raise _failure(exc, call="ec2:DescribeInstanceTypes", region=region) from exc
    except BotoCoreError as exc:
        raise _failure(exc, call="ec2:DescribeInstanceTypes", region=region) from exc
    read_at = datetime.now(UTC)
    if missing := [n for n in names if n not in found]:
        raise NotFound(f"AWS did not describe {', '.join(missing)} in {region}; nothing was changed", types=missing)
    if gpuless := [n for n in names if not found[n].get("GpuInfo", {}).get("Gpus")]:
        raise InvalidRequest(f"no GPU in {', '.join(gpuless)}: the catalog holds GPU types", types=gpuless)
    specs = {}
    for name in names:
        item = found[name]
        # A GPU instance type carries one GPU model; Gpus[0] describes it, Count says how many.
        gpu = item["GpuInfo"]["Gpus"][0]
        specs[name] = {
            "name": name,
            "aws_gpu": gpu["Name"],
            "gpu_count": gpu["Count"],
            # The column holds the memory of all the GPUs together, as the seed does.
            "gpu_memory_gib": Decimal(gpu["MemoryInfo"]["SizeInMiB"]) * gpu["Count"] / MIB_PER_GIB,
            "vcpus": item["VCpuInfo"]["DefaultVCpus"],
            "memory_gib": Decimal(item["MemoryInfo"]["SizeInMiB"]) / MIB_PER_GIB,
            "specs_read_at": read_at,
        }
    return specs


def _read_price(*, pricing: Any, name: str, region: str) -> Figure:
    """The Linux on-demand USD price per hour of one type in the region, from the Pricing API."""
    filters = [
        {"Type": "TERM_MATCH", "Field": field, "Value": value}
        for field, value in (
            ("instanceType", name),
            ("regionCode", region),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
            ("marketoption", "OnDemand"),
        )
    ]
    prices: set[Decimal] = set()
    request: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": filters}
    try:
        while True:
            page = pricing.get_products(**request)
            for text in page["PriceList"]:
                prices |= _hourly_prices(json.loads(text))
            if not page.get("NextToken"):
                break
            request["NextToken"] = page["NextToken"]
    except (ClientError, BotoCoreError) as exc:
        raise _failure(exc, call="pricing:GetProducts", region=region) from exc
    if len(prices) == 1:
        return Figure(prices.pop().normalize(), datetime.now(UTC))
    # These filters leave one product per type and region; several prices mean they no longer do, and
    # picking one could be wrong by a factor, so the stored price is kept instead.
    why = "several different prices" if prices else "no price"
    return Figure(None, missing=f"the Pricing API gave {why} for Linux on-demand in {region}")


def _hourly_prices(product: dict[str, Any]) -> set[Decimal]:
    """The non-zero USD per hour prices of a price-list product's on-demand terms."""
    return {
        Decimal(dim["pricePerUnit"]["USD"])
        for term in product.get("terms", {}).get("OnDemand", {}).values()
        for dim in term.get("priceDimensions", {}).values()
        if dim.get("unit") == "Hrs" and Decimal(dim.get("pricePerUnit", {}).get("USD", "0")) > 0
    }


def read_spot(*, ec2: Any, name: str, region: str) -> Figure:
    """The lowest current Linux/UNIX spot price of one type over the region's availability zones."""
    newest: dict[str, dict[str, Any]] = {}
    try:
        # With a start time of now AWS returns, per availability zone, the price in effect now.
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=[name], ProductDescriptions=["Linux/UNIX"], StartTime=datetime.now(UTC)
        )
        for page in pages:
            for entry in page["SpotPriceHistory"]:
                zone = entry["AvailabilityZone"]
                if zone not in newest or entry["Timestamp"] > newest[zone]["Timestamp"]:
                    newest[zone] = entry
    except (ClientError, BotoCoreError) as exc:
        raise _failure(exc, call="ec2:DescribeSpotPriceHistory", region=region) from exc
    if not newest:
        return Figure(None, missing=f"no Linux/UNIX spot price in {region}")
    # The lowest zone, because a spot launch may pick its zone; the price there is what a run would pay.
    spot = min(Decimal(e["SpotPrice"]) for e in newest.values())
    return Figure(spot.normalize(), datetime.now(UTC))


def _store(*, readings: list[dict[str, Any]], region: str) -> list[dict[str, Any]]:
    """Upsert every reading in one transaction; a figure not read keeps its stored value, date and source."""
    results = []
    with transaction() as cur:
        old = machine_types.lock(cur, names=[r["name"] for r in readings])
        if unpriced := [r["name"] for r in readings if r["name"] not in old and r["price"].value is None]:
            raise InvalidRequest(
                f"cannot add {', '.join(unpriced)}: no on-demand price in {region}; nothing was changed",
                types=unpriced,
                region=region,
            )
        known_power = machine_types.board_powers(cur)
        for reading in readings:
            # Read by column name built at run time (price_…, spot_price_…), so as a plain dict.
            before: dict[str, Any] = dict(old.get(reading["name"]) or {})
            row = _merged(reading=reading, before=before, region=region, known_power=known_power)
            stored = machine_types.upsert_aws(cur, row=row)
            old_prices = {f"old_{k}": floats(before).get(k) for k in ("price_usd_per_hour", "spot_price_usd_per_hour")}
            missing = {f"{k}_usd_per_hour": reading[k].missing for k in ("price", "spot_price") if reading[k].missing}
            results.append({**floats(stored), "added": not before, **old_prices, "not_refreshed": missing})
    return results


def _merged(
    *, reading: dict[str, Any], before: dict[str, Any], region: str, known_power: list[tuple[str, Any]]
) -> dict[str, Any]:
    """The row to store: fresh figures where AWS gave them, the stored ones elsewhere."""
    row = {key: reading[key] for key in ("name", "gpu_count", "gpu_memory_gib", "vcpus", "memory_gib", "specs_read_at")}
    row["gpu"] = _gpu_name(stored=before.get("gpu"), aws=reading["aws_gpu"])
    row["specs_source"] = f"EC2 DescribeInstanceTypes, {region}"
    sources = {
        "price": f"AWS Pricing API, {region}, Linux on-demand",
        "spot_price": f"EC2 DescribeSpotPriceHistory, {region}, Linux/UNIX, lowest over availability zones",
    }
    for key, source in sources.items():
        figure: Figure = reading[key]
        fresh = figure.value is not None
        row[f"{key}_usd_per_hour"] = figure.value if fresh else before.get(f"{key}_usd_per_hour")
        row[f"{key}_read_at"] = figure.read_at if fresh else before.get(f"{key}_read_at")
        row[f"{key}_source"] = source if fresh else before.get(f"{key}_source")
    # Board power is the GPU's, so a new type with a GPU the catalog knows gets it; AWS does not publish it.
    row["gpu_tdp_watts"] = before["gpu_tdp_watts"] if before else _board_power(gpu=row["gpu"], known=known_power)
    dated = (row["specs_read_at"], row["price_read_at"])
    row["figures_read_on"] = min(dated).astimezone(UTC).date() if all(dated) else None
    row["source"] = (
        "; ".join(
            f"{label}: {row[key]}"
            for label, key in (("specs", "specs_source"), ("on-demand", "price_source"), ("spot", "spot_price_source"))
            if row[key]
        )
        + f"; {PEAK_SOURCE}"
    )
    return row


def _gpu_name(*, stored: str | None, aws: str) -> str:
    """AWS's GPU name, unless the stored one is a more precise variant of it (A100 → A100-SXM4-40GB)."""
    if stored and (stored == aws or stored.startswith(f"{aws}-")):
        return stored
    return aws


def _board_power(*, gpu: str, known: list[tuple[str, Any]]) -> Any:
    """The board power the catalog gives this GPU model, if all its variants there agree on one."""
    watts = {w for name, w in known if name == gpu or name.startswith(f"{gpu}-")}
    return watts.pop() if len(watts) == 1 else None


def _code(exc: ClientError) -> str:
    """AWS's error code."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def _listed(message: str) -> list[str]:
    """The names in AWS's 'The following supplied instance types do not exist: [a, b]'."""
    found = re.search(r"\[([^\]]*)\]", message)
    return [n.strip() for n in found.group(1).split(",") if n.strip()] if found else []


def _failure(exc: Exception, *, call: str, region: str) -> TraincastError:
    """An AWS failure as one of ours: refused access is for a person to fix, the rest may pass."""
    if isinstance(exc, NoCredentialsError) or (isinstance(exc, ClientError) and _code(exc) in DENIED_CODES):
        detail = f"AWS refused {call} in {region}: {exc} (docs/FLEET.md lists the IAM actions needed)"
        return InvalidRequest(detail, call=call, region=region)
    return ServiceUnavailable(f"AWS {call} failed in {region}: {exc}", call=call, region=region)
