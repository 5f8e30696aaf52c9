"""bench/perf_doc.py: a benchmark's section replaces its own figures only, and its ratio rows read now over baseline."""

from pathlib import Path

import pytest

from bench import perf_doc


def test_a_section_is_replaced_in_place_and_a_new_one_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing a section twice keeps one copy, where it was; the sections around it are left as they were."""
    doc = tmp_path / "PERFORMANCE.md"
    doc.write_text(perf_doc.HEADER + "\n## A\n\nold A\n\n## B\n\nkept B\n")
    monkeypatch.setattr(perf_doc, "DOC", doc)
    perf_doc.write_section("A", "new A")
    perf_doc.write_section("C", "first C")
    text = doc.read_text()
    assert text.count("## A") == 1 and "old A" not in text and "kept B" in text
    assert text.index("new A") < text.index("## B") < text.index("first C")


def test_a_ratio_row_is_now_over_the_baseline_of_the_same_run() -> None:
    """The ratio is the first figure over the second, the baseline's note follows its figure."""
    row = perf_doc.ratio_row("start", 11.6, 19.1, 1, " by each child")
    assert row == "| start | 11.6 | 19.1 by each child | 0.61× |"
    assert perf_doc.ratio_row("memory", 1045.4, 1329.0, 0) == "| memory | 1045 | 1329 | 0.79× |"
