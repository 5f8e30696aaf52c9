"""An idempotent retry finds its job: the request hash ignores fields left at their defaults, so a field a later
version adds does not turn a retry into a "different request" (409)."""

from shared.jobs.request import JobRequest
from shared.jobs.store import request_hash

BODY = {"cnns": ["resnet50"], "machines": ["p5.48xlarge"], "batch_sizes": [32, 64]}


class Later(JobRequest):
    """The request as a later version might have it: one more optional field."""

    future_option: float | None = None


def digest(body: dict[str, object], model: type[JobRequest] = JobRequest) -> str:
    """request_hash of a body validated as the API does."""
    return request_hash(model.model_validate(body))


def test_a_field_added_later_at_its_default_leaves_the_hash() -> None:
    """The same body hashes alike with and without a field it never set."""
    assert digest(BODY, Later) == digest(BODY)


def test_what_a_request_asks_still_sets_the_hash() -> None:
    """A changed field changes it; a default spelled out, a range and the list it spans do not."""
    assert digest(BODY | {"nodes": 2}) != digest(BODY)
    assert digest(BODY | {"epochs": 91}) != digest(BODY)
    assert digest(BODY | {"nodes": 1, "epochs": 90}) == digest(BODY)
    assert digest(BODY | {"batch_sizes": {"min": 32, "max": 64, "step": 32}}) == digest(BODY)
