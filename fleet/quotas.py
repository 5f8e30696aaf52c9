"""EC2's vCPU quotas per instance family and market: which Service Quotas code to raise for a type."""

import re

# Service Quotas codes (service "ec2"), counted in vCPUs per region. A new account starts the G, VT
# and P quotas at 0, so its first GPU launch fails with VcpuLimitExceeded or MaxSpotInstanceCountExceeded.
ON_DEMAND = {
    "g": ("L-DB2E81BA", "on-demand vCPU quota for G and VT instances"),
    "p": ("L-417A185B", "on-demand vCPU quota for P instances"),
    "standard": ("L-1216C47A", "on-demand vCPU quota for standard (A, C, D, H, I, M, R, T, Z) instances"),
}
SPOT = {
    "g": ("L-3819A6DF", "spot vCPU quota for G and VT instances"),
    "p": ("L-7212CCBC", "spot vCPU quota for P instances"),
    "standard": ("L-34B43A08", "spot vCPU quota for standard (A, C, D, H, I, M, R, T, Z) instances"),
}
GROUPS = {"g": "g", "vt": "g", "p": "p"} | {letter: "standard" for letter in "acdhimrtz"}


def family(instance_type: str) -> str:
    """The letters a type's name starts with: 'g' for g5.xlarge, 'vt' for vt1.3xlarge, 'p' for p4d.24xlarge."""
    m = re.match(r"[a-z]+", instance_type.lower())
    return m.group(0) if m else ""


def quota_code(instance_type: str, market: str) -> tuple[str, str]:
    """(Service Quotas code, human name) of the vCPU quota a launch of this type counts against.

    market is 'spot' or 'on-demand'. The code is '' for a family this table does not know (DL, F,
    Inf, Trn, X, …): `aws service-quotas list-service-quotas --service-code ec2` names it.
    """
    fam = family(instance_type)
    group = GROUPS.get(fam)
    if group is None:
        return "", f"{market} vCPU quota for {fam.upper() or instance_type} instances"
    return (SPOT if market == "spot" else ON_DEMAND)[group]


def quota_message(instance_type: str, market: str, vcpus: int | None) -> str:
    """What to raise, and to how much, e.g. '… raise Service Quotas code L-DB2E81BA (ec2) to at least 4'."""
    code, name = quota_code(instance_type, market)
    where = f"Service Quotas code {code} (ec2)" if code else "its Service Quotas code (ec2)"
    need = (
        f"to at least {vcpus} (one {instance_type}: {vcpus} vCPUs, on top of what already runs)"
        if vcpus
        else "by the type's vCPUs"
    )
    return f"{name} is too low: raise {where} {need}"
