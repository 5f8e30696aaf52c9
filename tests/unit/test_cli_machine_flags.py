"""`machines add` refusals name the flags a CLI user types, not the API's field names."""

from cli.machines import as_flags


def test_field_names_become_flags_and_other_words_stay() -> None:
    refusal = (
        "Invalid request: request body: gpu 'RTX 9999' is not one Traincast knows by its figures: give "
        "gpu_memory_gib, gpu_fp32_tflops, gpu_sm_count, or name a GPU of data/gpus.csv to take its figures"
    )
    assert as_flags(refusal) == (
        "Invalid request: request body: gpu 'RTX 9999' is not one Traincast knows by its figures: give "
        "--gpu-memory-gib, --gpu-fp32-tflops, --gpu-sm-count, or name a GPU of data/gpus.csv to take its figures"
    )
    assert as_flags("price_usd_per_hour: Input should be greater than or equal to 0") == (
        "--price-usd-per-hour: Input should be greater than or equal to 0"
    )


def test_a_field_inside_a_longer_word_is_left_alone() -> None:
    assert as_flags("gpu_memory_gibs and my_gpu_count_x") == "gpu_memory_gibs and my_gpu_count_x"
