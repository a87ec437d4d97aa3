"""SQL helpers: Spark errors explained in one sentence, and results printed as a plain-text grid."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pyspark.errors import PySparkException

from lakehouse.serving.sql import explain_sql_error, format_table

TABLES = ["silver_orders", "gold_revenue_per_minute"]


def spark_error(spark, query: str) -> PySparkException:
    with pytest.raises(PySparkException) as caught:
        spark.sql(query).collect()
    return caught.value


def assert_one_plain_sentence(text: str) -> None:
    assert text.strip() == text and text
    assert "\n" not in text
    assert "SQLSTATE" not in text
    assert not text.startswith("[")
    assert text.endswith((".", "?"))


@pytest.fixture(scope="module")
def people_view(spark):
    name = "sql_test_people"
    spark.createDataFrame([(1, "ann"), (2, "bob")], "id INT, name STRING").createOrReplaceTempView(name)
    yield name
    spark.catalog.dropTempView(name)


def test_missing_table_is_named_with_the_tables_you_can_query(spark):
    """A missing table gives one sentence naming it and listing the known tables."""
    sentence = explain_sql_error(spark_error(spark, "SELECT * FROM no_such_table_xyz"), TABLES)
    assert_one_plain_sentence(sentence)
    assert "no_such_table_xyz" in sentence
    assert "`" not in sentence
    for table in TABLES:
        assert table in sentence


def test_missing_table_without_known_tables_points_at_the_demo(spark):
    """With no tables registered yet the sentence says how to create them."""
    sentence = explain_sql_error(spark_error(spark, "SELECT * FROM gold_nothing"), [])
    assert_one_plain_sentence(sentence)
    assert "gold_nothing" in sentence
    assert "lakehouse demo" in sentence


def test_missing_column_is_named_with_suggestions(spark, people_view):
    """A misspelt column gives one sentence naming it and suggesting the view's real columns."""
    sentence = explain_sql_error(spark_error(spark, f"SELECT nmae FROM {people_view}"), TABLES)
    assert_one_plain_sentence(sentence)
    assert "nmae" in sentence
    assert "name" in sentence.split("nmae", 1)[1]
    assert "`" not in sentence


def test_syntax_error_is_called_a_syntax_error(spark):
    """`SELEC 1` gives one sentence saying it is a syntax error near SELEC."""
    sentence = explain_sql_error(spark_error(spark, "SELEC 1"), TABLES)
    assert_one_plain_sentence(sentence)
    assert "syntax error" in sentence
    assert "SELEC" in sentence


def test_other_errors_lose_their_error_class_and_sqlstate(spark):
    """An error without a dedicated sentence keeps Spark's first line, minus the [CLASS] prefix and SQLSTATE."""
    exc = spark_error(spark, "SELECT CAST('abc' AS INT)")
    assert str(exc).startswith("[") or "SQLSTATE" in str(exc)
    sentence = explain_sql_error(exc, TABLES)
    assert_one_plain_sentence(sentence)
    assert "abc" in sentence


def test_format_table_right_aligns_numbers_and_prints_null():
    """Numeric columns are right-aligned, text left-aligned, and None shows as NULL."""
    text = format_table(("name", "n", "x"), [("a", 1, 2.5), ("bbb", None, 10.0)])
    assert text.splitlines() == [
        "name |    n |    x",
        "-----+------+-----",
        "a    |    1 |  2.5",
        "bbb  | NULL | 10.0",
    ]


def test_format_table_keeps_mixed_columns_left_aligned():
    """A column mixing text and numbers is left-aligned; the header widens a narrow column."""
    text = format_table(("value", "count"), [("7", 3), (12, 4000)])
    assert text.splitlines() == [
        "value | count",
        "------+------",
        "7     |     3",
        "12    |  4000",
    ]


def test_format_table_without_rows_prints_the_header():
    """No rows: just the header and the rule."""
    assert format_table(("a", "bb"), []).splitlines() == ["a | bb", "--+---"]


def test_format_table_right_aligns_spark_decimals(spark):
    """Decimal values, as Spark returns for DECIMAL columns, are numbers and right-aligned."""
    rows = [tuple(r) for r in spark.sql("SELECT CAST(1.5 AS DECIMAL(10, 2)) AS price UNION ALL SELECT 12.25").collect()]
    assert all(isinstance(price, Decimal) for (price,) in rows)
    lines = format_table(("price",), sorted(rows)).splitlines()
    assert lines[2:] == [" 1.50", "12.25"]


def test_a_refusal_of_the_servers_guard_over_spark_connect_is_its_own_sentence():
    """What a Spark Connect client receives for a refused write (as the server sends it) becomes the guard's sentence."""
    from pyspark.errors.exceptions.connect import UnknownException

    sentence = ("This server is read-only and a DELETE statement would change the lake; tables are written only by "
                "their flows, backfills and maintenance commands.")
    refused = UnknownException(message=f"(lakehouse.serving.ReadOnlyGuard$ReadOnlyViolation) {sentence}",
                               errorClass="LAKEHOUSE_READ_ONLY", sql_state="42501")
    assert explain_sql_error(refused, TABLES) == sentence
    assert_one_plain_sentence(explain_sql_error(refused, TABLES))
