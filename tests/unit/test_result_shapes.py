"""The worker's plain-dict shapes of a result agree with the pydantic models that validate and document it."""

from pydantic import BaseModel

from shared.jobs.point import PointDict, Prediction
from shared.jobs.result import (
    Best,
    BestDict,
    Choice,
    ChoiceDict,
    ConstantChoice,
    ConstantChoiceDict,
    Decision,
    DecisionDict,
    InputSummary,
    InputSummaryDict,
    ModelSummary,
    ModelSummaryDict,
    Option,
    OptionDict,
    PricedPhase,
    PricedPhaseDict,
    PricedSchedule,
    PricedScheduleDict,
    Result,
    ResultDict,
)


def test_a_point_dict_has_exactly_the_fields_of_a_prediction() -> None:
    """A field added to one and not the other fails here (a point would be stored without it, or refused)."""
    assert set(PointDict.__annotations__) == set(Prediction.model_fields)


def test_a_result_dict_has_exactly_the_fields_of_a_result() -> None:
    """The same for the result document around the points."""
    assert set(ResultDict.__annotations__) == set(Result.model_fields)


def test_best_choices_and_model_summaries_have_exactly_their_models_fields() -> None:
    """The typed entries of `best` and `models` agree with the pydantic models that validate them."""
    assert set(BestDict.__annotations__) == set(Best.model_fields)
    assert set(ChoiceDict.__annotations__) == set(Choice.model_fields)
    assert set(ModelSummaryDict.__annotations__) == set(ModelSummary.model_fields)


def test_decisions_schedules_and_inputs_have_exactly_their_models_fields() -> None:
    """The typed entries of `decisions`, `schedules` and `inputs` agree with the pydantic models that validate them."""
    pairs: list[tuple[type, type[BaseModel]]] = [
        (DecisionDict, Decision),
        (OptionDict, Option),
        (PricedScheduleDict, PricedSchedule),
        (PricedPhaseDict, PricedPhase),
        (ConstantChoiceDict, ConstantChoice),
        (InputSummaryDict, InputSummary),
    ]
    for typed, model in pairs:
        assert set(typed.__annotations__) == set(model.model_fields), typed.__name__
