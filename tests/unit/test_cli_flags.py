"""`predict` refusals name the flags a CLI user types, not the request's JSON fields."""

import pytest

from cli.flags import named


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        ("Invalid request: nodes.0: Input should be greater than or equal to 1",
         "Invalid request: --nodes: Input should be greater than or equal to 1"),
        ("Invalid request: image_size: Input should be greater than or equal to 8",
         "Invalid request: --image-size: Input should be greater than or equal to 8"),
        ("Invalid request: input.network_gbps: Input should be greater than or equal to 0.1",
         "Invalid request: --network-gbps: Input should be greater than or equal to 0.1"),
        ("Invalid request: batch_sizes.step: Input should be greater than or equal to 1",
         "Invalid request: --batch-sizes (the range's step): Input should be greater than or equal to 1"),
        ("Invalid request: unknown CNN(s): resnet5 (did you mean 'resnet50'?); see GET /v1/cnns",
         "Invalid request: unknown CNN(s): resnet5 (did you mean 'resnet50'?); see `traincast cnns`"),
        ("Invalid request: unknown machine type(s): nope; see GET /v1/machines",
         "Invalid request: unknown machine type(s): nope; see `traincast machines list`"),
        ("Invalid request: schedule.1.epochs: Input should be greater than or equal to 1; gpus.2: Input should be "
         "greater than or equal to 1", "Invalid request: --schedule: Input should be greater than or equal to 1; "
         "--gpus: Input should be greater than or equal to 1"),
    ],
)  # fmt: skip
def test_where_a_refusal_points_is_the_flag(refusal: str, said: str) -> None:
    assert named(refusal) == said


def test_words_that_are_not_where_the_refusal_points_stay() -> None:
    """A field's name in prose, an unknown path and the message's own title are left as they are."""
    for text in (
        "Invalid request: request body: at most 8 nodes of 2 gpus each; got 16 nodes",
        "Invalid request: unknown CNN(s): resnet5 (did you mean 'resnet50'?)",
        "Invalid request: num_classes: Input should be greater than or equal to 1",
    ):
        assert named(text) == text
