"""Task-id ranges: parse/format, errors, and selecting ids from a real env server's listing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentrl_core.config import EnvConfig
from agentrl_core.tasksets import format_ranges, parse_ranges, resolve_task_ids, select_ids


def test_parse_inclusive_ranges_in_written_order():
    assert parse_ranges("0-3,7, 10-11") == [0, 1, 2, 3, 7, 10, 11]
    assert parse_ranges("300-302,0-1") == [300, 301, 302, 0, 1]
    assert parse_ranges("5") == [5]
    assert len(parse_ranges("0-2419")) == 2420  # AgentGym's ALFWorld train split [0, 2420)


def test_format_is_shortest_sorted_text():
    assert format_ranges([8, 7, 0, 1, 2, 5, 2]) == "0-2,5,7-8"
    assert format_ranges([4]) == "4"
    assert format_ranges([]) == ""


def test_round_trips():
    ids = [0, 1, 2, 3, 9, 10, 12, 40, 41, 42, 43, 99]
    assert format_ranges(ids) == "0-3,9-10,12,40-43,99"
    assert parse_ranges(format_ranges(ids)) == ids
    for text in ("0-99,200,300-310", "7", "1-2,4-5"):
        assert format_ranges(parse_ranges(text)) == text


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty id range"),
        ("   ", "empty id range"),
        ("a-b", "bad id range item 'a-b'"),
        ("1,,2", "bad id range item ''"),
        ("-3", "bad id range item '-3'"),
        ("0-99;200", "bad id range item '0-99;200'"),
        ("5-3", "the end 3 is below the start 5"),
        ("0-5,3-4", r"names id\(s\) 3-4 more than once"),
        ("0-99999999999", "more than 10,000,000 ids"),
    ],
)
def test_bad_text_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ranges(text)


def test_config_validates_ranges():
    assert EnvConfig(name="countdown", train_ids="0-9", test_ids="5000-5009").train_ids == "0-9"
    with pytest.raises(ValidationError, match="env.test_ids: bad id range item 'x'"):
        EnvConfig(test_ids="x")
    with pytest.raises(ValidationError, match="task_file and env.train_ids"):
        EnvConfig(train_ids="0-9", task_file="tasks.parquet")


def test_select_ids_names_missing_ids():
    assert select_ids(range(10), "7,0-2") == [7, 0, 1, 2]
    with pytest.raises(ValueError, match=r"3 requested task id\(s\) are not offered by the server: 10-11,20; "
                                         r"it offers 0-9"):
        select_ids(range(10), "8-11,20")


def test_resolve_against_real_server(countdown_client):
    cfg = EnvConfig(name="countdown", train_ids="0-2,4998-4999", test_ids="5499,5000", train_tasks=3, test_tasks=2)
    assert resolve_task_ids(cfg, countdown_client, "train") == [0, 1, 2, 4998, 4999]
    assert resolve_task_ids(cfg, countdown_client, "test") == [5499, 5000]
    plain = EnvConfig(name="countdown", train_tasks=3, test_tasks=2)
    assert resolve_task_ids(plain, countdown_client, "train") == [0, 1, 2]
    assert resolve_task_ids(plain, countdown_client, "test") == [5000, 5001]


def test_resolve_errors_on_ids_the_server_lacks(countdown_client):
    cfg = EnvConfig(name="countdown", test_ids="4999-5001,9000")
    with pytest.raises(ValueError, match=r"2 requested task id\(s\) are not offered by the env server's "
                                         r"'countdown' test split: 4999,9000; it offers 5000-5499"):
        resolve_task_ids(cfg, countdown_client, "test")
    with pytest.raises(ValueError, match="unknown split 'valid'"):
        resolve_task_ids(cfg, countdown_client, "valid")
