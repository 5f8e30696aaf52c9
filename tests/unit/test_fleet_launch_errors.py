"""Launch errors that are not capacity, pinned with botocore's Stubber: spot not permitted, quotas, refusals."""

import base64
from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from fleet import ec2, lookup, quotas
from shared.core.errors import CapacityShort, LaunchRefused, QuotaShort
from tests.support.fleetkit import stubbed_ec2

CFG = ec2.LaunchConfig(fleet="prod", ami="ami-0abc", subnets=("subnet-a", "subnet-b"), instance_profile="agent")
ENCODED = "You are not authorized to perform this operation. Encoded authorization failure message: AbC123xyz"


def attempt(subnet: str, *, spot: bool, machine_type: str = "g5.xlarge", price: float = 1.006) -> dict[str, Any]:
    """The parameters of one RunInstances attempt (the request itself is pinned in test_fleet_launch.py)."""
    req = ec2.request(machine_type, CFG, subnet=subnet, market="spot" if spot else "on-demand", max_price=price)
    return req | {"ClientToken": ANY, "UserData": ANY}


def launched(iid: str, subnet: str) -> dict[str, Any]:
    """A minimal RunInstances answer."""
    return {"Instances": [{"InstanceId": iid, "SubnetId": subnet}]}


def test_spot_not_permitted_falls_back_to_on_demand_and_says_why() -> None:
    """UnauthorizedOperation on spot → on-demand in the first subnet; AWS's encoded message and how to decode it."""
    client = stubbed_ec2()
    with Stubber(client) as stub:
        stub.add_client_error(
            "run_instances", "UnauthorizedOperation", ENCODED, expected_params=attempt("subnet-a", spot=True)
        )
        stub.add_response("run_instances", launched("i-od", "subnet-a"), attempt("subnet-a", spot=False))
        got = ec2.launch(client, "g5.xlarge", CFG, max_price=1.006, vcpus=4)
        stub.assert_no_pending_responses()
    assert (got.instance_id, got.market, got.subnet_id) == ("i-od", "on-demand", "subnet-a")
    [skip] = got.skipped
    assert skip.kind == "spot_not_permitted" and skip.code == "UnauthorizedOperation"
    assert "not permitted by the IAM policy" in skip.detail and "spot-instances-request" in skip.detail
    assert "AbC123xyz" in skip.detail and "aws sts decode-authorization-message" in skip.detail


def test_unauthorized_on_demand_is_a_refusal_with_the_decode_hint() -> None:
    """Spot and on-demand both UnauthorizedOperation: LaunchRefused naming both, after two calls only."""
    client = stubbed_ec2()
    with Stubber(client) as stub:
        stub.add_client_error(
            "run_instances", "UnauthorizedOperation", ENCODED, expected_params=attempt("subnet-a", spot=True)
        )
        stub.add_client_error(
            "run_instances", "UnauthorizedOperation", ENCODED, expected_params=attempt("subnet-a", spot=False)
        )
        with pytest.raises(LaunchRefused) as refused:
            ec2.launch(client, "g5.xlarge", CFG, max_price=1.006)
        stub.assert_no_pending_responses()
    assert not isinstance(refused.value, QuotaShort) and refused.value.context["code"] == "UnauthorizedOperation"
    assert "on-demand in subnet-a" in refused.value.detail and "decode-authorization-message" in refused.value.detail
    assert "before that, spot: spot launches of g5.xlarge are not permitted" in refused.value.detail


def test_spot_quota_falls_through_to_on_demand() -> None:
    """MaxSpotInstanceCountExceeded is the spot vCPU quota, not capacity: no second subnet, on-demand next."""
    client = stubbed_ec2()
    with Stubber(client) as stub:
        stub.add_client_error("run_instances", "MaxSpotInstanceCountExceeded", "Max spot instance count exceeded",
                              expected_params=attempt("subnet-a", spot=True))  # fmt: skip
        stub.add_response("run_instances", launched("i-od", "subnet-a"), attempt("subnet-a", spot=False))
        got = ec2.launch(client, "g5.xlarge", CFG, max_price=1.006, vcpus=4)
    [skip] = got.skipped
    assert skip.kind == "quota" and got.market == "on-demand"
    assert skip.detail.startswith(
        "spot vCPU quota for G and VT instances is too low: raise Service Quotas code L-3819A6DF (ec2) to at least 4"
    )


def test_both_quotas_short_is_a_quota_error_naming_both_codes() -> None:
    """A new account (GPU quotas 0): spot and on-demand refused for quota → QuotaShort with both codes and vCPUs."""
    client = stubbed_ec2()
    with Stubber(client) as stub:
        stub.add_client_error(
            "run_instances",
            "MaxSpotInstanceCountExceeded",
            expected_params=attempt("subnet-a", spot=True, machine_type="p4d.24xlarge", price=32.77),
        )
        on_demand = attempt("subnet-a", spot=False, machine_type="p4d.24xlarge", price=32.77)
        stub.add_client_error("run_instances", "VcpuLimitExceeded", "You have requested more vCPU capacity",
                              expected_params=on_demand)  # fmt: skip
        with pytest.raises(QuotaShort) as short:
            ec2.launch(client, "p4d.24xlarge", CFG, max_price=32.77, vcpus=96)
        stub.assert_no_pending_responses()
    detail = short.value.detail
    assert (
        "on-demand vCPU quota for P instances is too low: raise Service Quotas code L-417A185B (ec2) to at least 96"
        in detail
    )
    assert "L-7212CCBC" in detail and short.value.context["code"] == "VcpuLimitExceeded"


def test_capacity_short_somewhere_stays_a_capacity_error() -> None:
    """Spot short in both subnets, on-demand quota too low: capacity (retried soon), the quota named too."""
    client = stubbed_ec2()
    with Stubber(client) as stub:
        for subnet in ("subnet-a", "subnet-b"):
            stub.add_client_error(
                "run_instances", "InsufficientInstanceCapacity", expected_params=attempt(subnet, spot=True)
            )
        stub.add_client_error("run_instances", "VcpuLimitExceeded", expected_params=attempt("subnet-a", spot=False))
        with pytest.raises(CapacityShort) as short:
            ec2.launch(client, "g5.xlarge", CFG, max_price=1.006, vcpus=4)
    assert short.value.context["tried"] == ["spot in subnet-a: InsufficientInstanceCapacity",
                                            "spot in subnet-b: InsufficientInstanceCapacity"]  # fmt: skip
    assert "L-DB2E81BA" in short.value.detail


@pytest.mark.parametrize(
    ("instance_type", "market", "code"),
    [
        ("g5.xlarge", "on-demand", "L-DB2E81BA"),
        ("vt1.3xlarge", "on-demand", "L-DB2E81BA"),
        ("p4d.24xlarge", "on-demand", "L-417A185B"),
        ("m5.large", "on-demand", "L-1216C47A"),
        ("g6e.xlarge", "spot", "L-3819A6DF"),
        ("p5.48xlarge", "spot", "L-7212CCBC"),
        ("c7i.large", "spot", "L-34B43A08"),
        ("trn1.2xlarge", "spot", ""),
    ],
)
def test_quota_codes_by_family_and_market(instance_type: str, market: str, code: str) -> None:
    """G and VT, P and the standard families map to their own codes per market; unknown families to none."""
    got, name = quotas.quota_code(instance_type, market)
    assert got == code and name.startswith(f"{market} vCPU quota for ")


def test_quota_message_without_vcpus_still_says_what_to_raise() -> None:
    """No vCPUs in the catalog: the code and a hint, no invented number."""
    assert quotas.quota_message("g5.xlarge", "on-demand", None) == (
        "on-demand vCPU quota for G and VT instances is too low: raise Service Quotas code L-DB2E81BA (ec2) "
        "by the type's vCPUs"
    )


def test_console_tail_decodes_and_falls_back_without_latest() -> None:
    """Latest=True refused on an older (Xen) type → asked again without it; base64 decoded, last 40 lines,
    terminal escapes and control characters removed."""
    text = "".join(f"line {n}\r\n" for n in range(100)) + "\x1b[31mcloud-init: agent failed\x1b[0m\x07\n"
    client = stubbed_ec2()
    with Stubber(client) as stub:
        stub.add_client_error(
            "get_console_output", "UnsupportedOperation", expected_params={"InstanceId": "i-1", "Latest": True}
        )
        output = base64.b64encode(text.encode()).decode()
        stub.add_response("get_console_output", {"InstanceId": "i-1", "Output": output}, {"InstanceId": "i-1"})
        tail = lookup.console_tail(client, "i-1")
        stub.assert_no_pending_responses()
    lines = tail.splitlines()
    assert len(lines) == 40 and lines[0] == "line 61" and lines[-1] == "cloud-init: agent failed"
    assert lookup.tail("x" * 10_000 + "\n") == "x" * lookup.CONSOLE_LINE_CHARS
