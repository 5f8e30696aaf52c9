"""The machine catalog refreshed from AWS, stored in the real PostgreSQL.

EC2 DescribeInstanceTypes comes from moto. moto answers DescribeSpotPriceHistory with a fixed
placeholder (0.00001 in every zone, dated 2006) and does not implement the Pricing API, so both are
pinned with botocore's Stubber, which also checks every request parameter.
"""

import argparse
import csv
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from psycopg2 import sql

from cli import catalog as cli_catalog
from fleet import catalog
from shared.core.db import transaction
from shared.core.errors import InvalidRequest, NotFound

REGION = "us-east-1"
CSV = Path(__file__).resolve().parents[2] / "data" / "aws_gpu_instances.csv"
AWS_TYPES = [row["instance_type"] for row in csv.DictReader(CSV.read_text().splitlines())]  # the seeded types


def rows() -> dict[str, dict[str, Any]]:
    """The stored catalog by name."""
    with transaction() as cur:
        cur.execute("SELECT * FROM machine_types")
        return {r["name"]: dict(r) for r in cur.fetchall()}


@pytest.fixture
def saved() -> Iterator[dict[str, dict[str, Any]]]:
    """The catalog as migrated, put back afterwards: other tests price predictions with it."""
    before = rows()
    yield before
    with transaction() as cur:
        cur.execute("DELETE FROM machine_types WHERE NOT (name = ANY(%s))", (list(before),))
        for row in before.values():
            sets = sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder(c)) for c in row if c != "name"
            )
            cur.execute(sql.SQL("UPDATE machine_types SET {} WHERE name = %(name)s").format(sets), row)


class Recent:
    """Equal to a time within a minute of now: spot prices are asked for as of now."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, datetime) and abs(datetime.now(UTC) - other) < timedelta(minutes=1)

    def __repr__(self) -> str:
        return "<now>"


class Ec2:
    """An EC2 client for refresh(): instance types from moto, spot price history from a Stubber."""

    def __init__(self) -> None:
        self.types = boto3.client("ec2", region_name=REGION)
        self.spot = Stubber(boto3.client("ec2", region_name=REGION))

    def get_paginator(self, name: str) -> Any:
        client = self.spot.client if name == "describe_spot_price_history" else self.types
        return client.get_paginator(name)

    def expect_spot(self, name: str, *zones: tuple[str, str, float]) -> None:
        """One DescribeSpotPriceHistory call for `name`, answered with (zone, price, hours ago) entries."""
        now = datetime.now(UTC)
        history = [
            {"AvailabilityZone": zone, "InstanceType": name, "ProductDescription": "Linux/UNIX", "SpotPrice": price,
             "Timestamp": now - timedelta(hours=ago)}
            for zone, price, ago in zones
        ]  # fmt: skip
        expected = {"InstanceTypes": [name], "ProductDescriptions": ["Linux/UNIX"], "StartTime": Recent()}
        self.spot.add_response("describe_spot_price_history", {"SpotPriceHistory": history}, expected)


def product(name: str, usd: str) -> str:
    """A price-list entry as the Pricing API returns it: a JSON string, with a reserved term beside."""
    hourly = {"SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}, "description": name}}
    reserved = {"SKU.4NA7Y494T4.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "0.1"}}}
    terms = {"OnDemand": {"SKU.JRTCKXETXF": {"priceDimensions": hourly}},
             "Reserved": {"SKU.4NA7Y494T4": {"priceDimensions": reserved}}}  # fmt: skip
    return json.dumps({"product": {"attributes": {"instanceType": name, "regionCode": REGION}}, "terms": terms})


def expect_price(stub: Stubber, name: str, *pages: list[str]) -> None:
    """GetProducts calls for `name`, one per page of price-list entries (pages linked by NextToken)."""
    fields = [("instanceType", name), ("regionCode", REGION), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
              ("preInstalledSw", "NA"), ("capacitystatus", "Used"), ("marketoption", "OnDemand")]  # fmt: skip
    filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in fields]
    for i, page in enumerate(pages or ([],)):
        expected: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": filters}
        if i:
            expected["NextToken"] = f"page-{i}"
        response: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": page}
        if i + 1 < len(pages):
            response["NextToken"] = f"page-{i + 1}"
        stub.add_response("get_products", response, expected)


@pytest.fixture
def aws() -> Iterator[tuple[Ec2, Stubber]]:
    """EC2 (moto and a spot Stubber) and a stubbed Pricing client; every stubbed call must be made."""
    with mock_aws():
        ec2 = Ec2()
        pricing = Stubber(boto3.client("pricing", region_name="us-east-1"))
        with ec2.spot, pricing:
            yield ec2, pricing
            ec2.spot.assert_no_pending_responses()
            pricing.assert_no_pending_responses()


def refresh(aws: tuple[Ec2, Stubber], types: list[str] | None) -> list[dict[str, Any]]:
    ec2, pricing = aws
    return catalog.refresh(region=REGION, types=types, ec2=ec2, pricing=pricing.client)


def test_refresh_stores_aws_figures_and_keeps_gpu_peak_figures(saved: dict, aws: tuple[Ec2, Stubber]) -> None:
    ec2, pricing = aws
    expect_price(pricing, "g4dn.xlarge", [product("g4dn.xlarge", "0.6100000000")])
    # The lowest zone wins, each zone at its newest price: us-east-1a's older 0.1 no longer holds.
    ec2.expect_spot(
        "g4dn.xlarge", ("us-east-1a", "0.2500", 1), ("us-east-1a", "0.1000", 30), ("us-east-1b", "0.2031", 2)
    )
    expect_price(pricing, "g5.xlarge", [], [product("g5.xlarge", "1.2120000000")])
    ec2.expect_spot("g5.xlarge", ("us-east-1c", "0.4512", 5))
    start = datetime.now(UTC)
    result = refresh(aws, ["g4dn.xlarge", "g5.xlarge", "g4dn.xlarge"])
    end = datetime.now(UTC)

    after = rows()
    g4, g5 = after["g4dn.xlarge"], after["g5.xlarge"]
    assert (g4["gpu"], g4["gpu_count"], g4["gpu_memory_gib"], g4["vcpus"], g4["memory_gib"]) == ("T4", 1, 16, 4, 16)
    assert g4["price_usd_per_hour"] == Decimal("0.61") and g4["spot_price_usd_per_hour"] == Decimal("0.2031")
    assert g5["price_usd_per_hour"] == Decimal("1.212") and g5["spot_price_usd_per_hour"] == Decimal("0.4512")
    assert g5["gpu_memory_gib"] == Decimal(22888) / 1024 and g5["gpu"] == "A10G"
    for name in ("g4dn.xlarge", "g5.xlarge"):
        row = after[name]
        for kept in ("gpu_fp32_tflops", "gpu_fp16_tflops", "gpu_mem_bandwidth_gbs", "gpu_tdp_watts", "provider"):
            assert row[kept] == saved[name][kept] and row[kept] is not None
        for read in ("specs_read_at", "price_read_at", "spot_price_read_at"):
            assert start <= row[read] <= end, read
        assert row["figures_read_on"] in {start.date(), end.date()}
        assert "us-east-1" in row["source"] and "aws_gpu_instances.csv" in row["source"]
        assert row["price_source"] == "AWS Pricing API, us-east-1, Linux on-demand"
    assert after["g6.xlarge"] == saved["g6.xlarge"]  # not asked for, not touched

    assert [r["name"] for r in result] == ["g4dn.xlarge", "g5.xlarge"]
    assert result[0]["old_price_usd_per_hour"] == 0.526 and result[0]["price_usd_per_hour"] == 0.61
    # The seeded spot price (data/cloud_gpu_machines.csv) is what the refresh replaced.
    assert result[0]["old_spot_price_usd_per_hour"] == float(saved["g4dn.xlarge"]["spot_price_usd_per_hour"])
    assert result[0]["not_refreshed"] == {}
    assert not result[0]["added"]


def test_missing_prices_keep_what_was_read_before(saved: dict, aws: tuple[Ec2, Stubber]) -> None:
    ec2, pricing = aws
    expect_price(pricing, "g4dn.xlarge", [product("g4dn.xlarge", "0.61")])
    ec2.expect_spot("g4dn.xlarge", ("us-east-1a", "0.2", 1))
    refresh(aws, ["g4dn.xlarge"])
    first = rows()["g4dn.xlarge"]

    expect_price(pricing, "g4dn.xlarge", [])
    ec2.expect_spot("g4dn.xlarge")
    # Two different prices for one type: the filters no longer single out one product.
    expect_price(pricing, "p4d.24xlarge", [product("p4d.24xlarge", "21.96"), product("p4d.24xlarge", "32.77")])
    ec2.expect_spot("p4d.24xlarge")
    result = {r["name"]: r for r in refresh(aws, ["g4dn.xlarge", "p4d.24xlarge"])}

    g4, p4 = rows()["g4dn.xlarge"], rows()["p4d.24xlarge"]
    for column in ("price_usd_per_hour", "price_read_at", "price_source", "spot_price_usd_per_hour"):
        assert g4[column] == first[column], column
    assert g4["spot_price_read_at"] == first["spot_price_read_at"] and g4["specs_read_at"] > first["specs_read_at"]
    assert g4["figures_read_on"] == first["price_read_at"].astimezone(UTC).date()
    assert set(result["g4dn.xlarge"]["not_refreshed"]) == {"price_usd_per_hour", "spot_price_usd_per_hour"}
    assert "no price" in result["g4dn.xlarge"]["not_refreshed"]["price_usd_per_hour"]

    # The seed's price stays, never read from AWS; AWS's "A100" keeps the seed's more precise name.
    assert p4["price_usd_per_hour"] == saved["p4d.24xlarge"]["price_usd_per_hour"] == Decimal("21.9576")
    assert p4["price_read_at"] is None and p4["figures_read_on"] is None
    assert p4["spot_price_usd_per_hour"] == saved["p4d.24xlarge"]["spot_price_usd_per_hour"]  # the seed's, kept
    assert p4["specs_read_at"] is not None and p4["gpu"] == "A100-SXM4-40GB" and p4["gpu_count"] == 8
    assert "several different prices" in result["p4d.24xlarge"]["not_refreshed"]["price_usd_per_hour"]
    assert "2025 snapshot" in p4["price_source"] and "EC2 DescribeInstanceTypes" in p4["specs_source"]


def test_unknown_or_unsuitable_types_change_nothing(saved: dict, aws: tuple[Ec2, Stubber]) -> None:
    with pytest.raises(NotFound) as unknown:
        refresh(aws, ["g4dn.xlarge", "g9q.nope"])
    assert unknown.value.context["types"] == ["g9q.nope"] and "g9q.nope" in str(unknown.value)
    with pytest.raises(InvalidRequest, match="no GPU in m5.large"):
        refresh(aws, ["g4dn.xlarge", "m5.large"])
    with pytest.raises(InvalidRequest, match=r"local \(local\)"):
        refresh(aws, ["local"])

    ec2, pricing = aws
    expect_price(pricing, "g4dn.xlarge", [product("g4dn.xlarge", "0.61")])
    ec2.expect_spot("g4dn.xlarge", ("us-east-1a", "0.2", 1))
    expect_price(pricing, "g4dn.2xlarge", [])
    ec2.expect_spot("g4dn.2xlarge", ("us-east-1a", "0.3", 1))
    with pytest.raises(InvalidRequest, match="cannot add g4dn.2xlarge: no on-demand price"):
        refresh(aws, ["g4dn.xlarge", "g4dn.2xlarge"])
    assert rows() == saved


def test_aws_refusal_is_one_clear_error(saved: dict, aws: tuple[Ec2, Stubber]) -> None:
    _, pricing = aws
    pricing.add_client_error("get_products", service_error_code="AccessDeniedException", http_status_code=400)
    with pytest.raises(InvalidRequest, match="AWS refused pricing:GetProducts in us-east-1"):
        refresh(aws, ["g4dn.xlarge"])
    assert rows() == saved


def test_new_type_gets_the_board_power_of_its_gpu(saved: dict, aws: tuple[Ec2, Stubber]) -> None:
    ec2, pricing = aws
    expect_price(pricing, "g4dn.12xlarge", [product("g4dn.12xlarge", "3.912")])
    ec2.expect_spot("g4dn.12xlarge", ("us-east-1d", "1.52", 1))
    (result,) = refresh(aws, ["g4dn.12xlarge"])
    row = rows()["g4dn.12xlarge"]
    assert result["added"] and row["provider"] == "aws" and row["gpu"] == "T4"
    assert (row["gpu_count"], row["gpu_memory_gib"], row["vcpus"], row["memory_gib"]) == (4, 64, 48, 192)
    assert row["gpu_tdp_watts"] == 70 and row["gpu_fp32_tflops"] is None  # peak figures vary by variant
    assert row["price_usd_per_hour"] == Decimal("3.912") and row["spot_price_usd_per_hour"] == Decimal("1.52")


def test_default_is_every_aws_type_in_the_catalog(saved: dict) -> None:
    names = sorted(n for n, r in saved.items() if r["provider"] == "aws")
    assert set(AWS_TYPES) <= set(names)
    ec2 = boto3.client("ec2", region_name=REGION)
    message = "The following supplied instance types do not exist: [p3.2xlarge, p3.8xlarge]"
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_instance_types", "InvalidInstanceType", message, 400,
                              expected_params={"InstanceTypes": names})  # fmt: skip
        with pytest.raises(NotFound) as exc:
            catalog.refresh(region=REGION, types=None, ec2=ec2, pricing=object())
    assert exc.value.context["types"] == ["p3.2xlarge", "p3.8xlarge"]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="traincast")
    cli_catalog.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["catalog", "refresh", *argv])


def test_cli_prints_what_changed_and_errors_in_one_line(
    saved: dict, aws: tuple[Ec2, Stubber], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ec2, pricing = aws
    # The CLI makes its own clients: hand it the prepared ones, and check it asks for the right ones.
    made: list[tuple[str, str]] = []

    def client(service: str, *, region_name: str) -> Any:
        made.append((service, region_name))
        return {"ec2": ec2, "pricing": pricing.client}[service]

    monkeypatch.setattr(catalog.boto3, "client", client)
    expect_price(pricing, "g4dn.xlarge", [product("g4dn.xlarge", "0.61")])
    ec2.expect_spot("g4dn.xlarge")
    assert cli_catalog.run(parse("--types", "g4dn.xlarge", "--region", REGION)) == 0
    out = capsys.readouterr().out
    assert made == [("ec2", REGION), ("pricing", "us-east-1")]
    line = next(x for x in out.splitlines() if x.startswith("g4dn.xlarge "))
    # No spot price read: the seeded one is kept and shown unchanged.
    seeded_spot = f" {float(saved['g4dn.xlarge']['spot_price_usd_per_hour']):.4f} "
    assert "0.5260 → 0.6100" in line and seeded_spot in line and line.endswith("UTC")
    assert "g4dn.xlarge: spot_price_usd_per_hour kept: no Linux/UNIX spot price in us-east-1" in out

    assert cli_catalog.run(parse("--types", "g4dn.xlarge,g9q.nope")) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "g9q.nope" in err and err.count("\n") == 1

    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert parse().region == "eu-west-1" and parse().types is None
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert parse().region == "us-east-1"


def test_without_credentials_the_cli_says_so(
    saved: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    credentials = "ACCESS_KEY_ID SECRET_ACCESS_KEY SESSION_TOKEN PROFILE WEB_IDENTITY_TOKEN_FILE"
    for var in [*credentials.split(), "CONTAINER_CREDENTIALS_RELATIVE_URI", "CONTAINER_CREDENTIALS_FULL_URI"]:
        monkeypatch.delenv(f"AWS_{var}", raising=False)
    # No instance metadata lookup (no network here) and no files: boto3 finds no credentials at all.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    assert cli_catalog.run(parse("--types", "g4dn.xlarge", "--region", REGION)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: AWS refused ec2:DescribeInstanceTypes in us-east-1") and "credentials" in err
    assert rows() == saved
