"""What a stored CNN variant is made of: the signatures it uses, each with its spec and how many times."""

from typing import Any, NamedTuple


class Member(NamedTuple):
    """One conv or op signature a CNN variant uses: its stored id, its spec (the canonical description), its count."""

    signature_id: int
    spec: dict[str, Any]
    uses: int  # how many times one step runs it (`count` would hide tuple.count)
