"""The `lakehouse` command line: help texts, and user errors reported as one sentence with exit code 2."""

from __future__ import annotations

import logging
import os

import pytest

from lakehouse.cli import main as cli

SUBCOMMANDS = ("setup", "kafka", "topics", "produce", "run", "sql", "history", "ui", "demo", "settings")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No LAKEHOUSE_* variable from the outside; home (and so logs) under tmp_path; logging restored after."""
    for name in list(os.environ):
        if name.startswith("LAKEHOUSE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield monkeypatch
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def help_text(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as caught:
        cli.build_parser().parse_args(argv)
    assert caught.value.code == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def description_of(text: str) -> str:
    """The paragraphs argparse prints between the usage block and the argument sections."""
    blocks = [b.strip() for b in text.strip().split("\n\n")]
    assert blocks[0].startswith("usage: lakehouse")
    sections = ("options:", "positional arguments:", "faults injected")
    return "\n\n".join(b for b in blocks[1:] if not b.startswith(sections))


def test_top_level_help_exits_zero_and_describes_the_tool(capsys):
    """`lakehouse --help` exits 0, describes the lakehouse and lists every subcommand."""
    out = help_text(capsys, ["--help"])
    assert "Kafka" in description_of(out) and "Delta" in description_of(out)
    for name in SUBCOMMANDS:
        assert f"\n    {name} " in out, name


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_subcommand_help_exits_zero_and_prints_a_description(capsys, command):
    """`lakehouse <command> --help` exits 0 and prints a description of what the command does."""
    out = help_text(capsys, [command, "--help"])
    assert out.startswith(f"usage: lakehouse {command}")
    assert len(description_of(out).split()) >= 3, f"`lakehouse {command} --help` prints no description:\n{out}"


def test_produce_help_documents_the_fault_options(capsys):
    """`lakehouse produce --help` lists each fault share with its default."""
    out = help_text(capsys, ["produce", "--help"])
    for option in ("--malformed", "--duplicates", "--late", "--out-of-order", "--seed", "--count"):
        assert option in out


def test_missing_subcommand_is_a_usage_error(capsys):
    """Running with no subcommand exits 2 with one line that points at --help."""
    with pytest.raises(SystemExit) as caught:
        cli.build_parser().parse_args([])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "`lakehouse --help`" in err and len(err.splitlines()) == 1


def test_settings_with_a_bad_port_prints_one_error_line(clean_env, capsys):
    """A non-numeric LAKEHOUSE_KAFKA_PORT makes `lakehouse settings` return 2 with one `error:` line."""
    clean_env.setenv("LAKEHOUSE_KAFKA_PORT", "notaport")
    assert cli.main(["settings"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error:")
    assert "LAKEHOUSE_KAFKA_PORT" in lines[0]
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_settings_lists_every_variable_with_its_value(clean_env, capsys, tmp_path):
    """`lakehouse settings` returns 0 and prints each LAKEHOUSE_* variable with the value in force."""
    clean_env.setenv("LAKEHOUSE_KAFKA_PORT", "19092")
    assert cli.main(["settings"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[0].strip(): line.split("|")[1].strip() for line in out.splitlines()[2:]}
    assert rows["LAKEHOUSE_KAFKA_PORT"] == "19092"
    assert rows["LAKEHOUSE_KAFKA_BOOTSTRAP"] == "127.0.0.1:19092"
    assert rows["LAKEHOUSE_LAKE_ROOT"] == f"{tmp_path}/home/lake"
    assert (tmp_path / "home" / "logs" / "lakehouse.log").exists()


def test_a_reader_that_stops_early_gets_no_traceback(clean_env, tmp_path):
    """`lakehouse settings | head -1`: once the reader has gone, a quiet end with SIGPIPE's status, not a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    lakehouse = Path(sys.executable).with_name("lakehouse")
    proc = subprocess.Popen([str(lakehouse), "settings"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()    # the reader is gone before the table is written: its first write finds a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_produce_with_an_invalid_share_fails_before_touching_kafka(clean_env, capsys):
    """`lakehouse produce --malformed 2` returns 2 with one error line and never builds a producer."""
    from lakehouse.streaming import producer as streaming_producer

    attempts = []
    clean_env.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    clean_env.setattr(streaming_producer, "produce", lambda *a, **k: attempts.append("produce"))
    clean_env.setattr(streaming_producer, "Producer", lambda *a, **k: attempts.append("Producer"))
    assert cli.main(["produce", "--malformed", "2"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error:")
    assert "--malformed" in lines[0] and "'2'" in lines[0] and "from 0 to 1" in lines[0]
    assert "Traceback" not in captured.err
    assert attempts == []


def test_sql_with_a_missing_table_prints_one_error_line(clean_env, capfd, spark):
    """`lakehouse sql` on a missing table returns 2 with one `error:` line on stderr and no trace or log dump."""
    assert cli.main(["sql", "SELECT * FROM no_such_table_cli"]) == 2
    captured = capfd.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines and lines[-1].startswith("error:") and "no_such_table_cli" in lines[-1]
    assert len(lines) == 1, f"{len(captured.err)} characters on stderr:\n{captured.err[:500]}"


@pytest.mark.parametrize(
    "argv, named, allowed",
    [
        (["produce", "--count", "-5"], "--count: '-5'", "integer from 1 to"),
        (["produce", "--count", "ten"], "--count: 'ten'", "integer from 1 to"),
        (["produce", "--rate", "-1"], "--rate: '-1'", "number from 0 to"),
        (["produce", "--rate", "inf"], "--rate: 'inf'", "number from 0 to"),
        (["produce", "--event-rate", "0"], "--event-rate: '0'", "above 0"),
        (["produce", "--late", "nan"], "--late: 'nan'", "share from 0 to 1"),
        (["produce", "--duplicates", "0.6", "--malformed", "0.6"], "duplicate and malformed", "more than 1"),
        (["sql", "SELECT 1", "--limit", "-1"], "--limit: '-1'", "integer from 1 to"),
        (["ui", "--port", "99999"], "--port: '99999'", "integer from 1 to 65535"),
        (["ui", "--host", "no such host"], "--host: 'no such host'", "host name or an IP address"),
        (["demo", "--events", "0"], "--events: '0'", "integer from 1 to"),
    ],
)
def test_a_bad_option_is_one_sentence_naming_option_value_and_range(clean_env, capsys, argv, named, allowed):
    """Each bad option value makes `lakehouse` return 2 with one `error:` line, before any work is done."""
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error:") and named in lines[0] and allowed in lines[0], lines[0]
    assert captured.out == ""


@pytest.mark.parametrize(
    "variable, value",
    [
        ("LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS", "-1"),
        ("LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER", "-3"),
        ("LAKEHOUSE_SPARK_UI", "maybe"),
        ("LAKEHOUSE_GOLD_WATERMARK", "banana"),
    ],
)
def test_a_bad_setting_stops_any_command_with_one_line(clean_env, capsys, variable, value):
    """A bad LAKEHOUSE_* value returns 2 with one line naming the variable and the value."""
    clean_env.setenv(variable, value)
    assert cli.main(["settings"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {variable}=") and value in lines[0], lines


def test_settings_masks_spark_conf_values_whose_key_names_a_secret(clean_env, capsys):
    """`lakehouse settings` shows **** for password/secret/key/token/credential keys, any case; others as set."""
    clean_env.setenv("LAKEHOUSE_SPARK_CONF", ";".join([
        "spark.hadoop.fs.s3a.access.key=AKIAEXAMPLE", "spark.hadoop.fs.s3a.secret.key=s3cr3t-value",
        "spark.ssl.keyStorePassword=hunter2", "spark.x.AuthToken=tok-123", "spark.y.CREDENTIALS=cred-9",
        "spark.hadoop.fs.s3a.endpoint=http://minio:9000",
    ]))
    assert cli.main(["settings"]) == 0
    out = capsys.readouterr().out
    for secret in ("AKIAEXAMPLE", "s3cr3t-value", "hunter2", "tok-123", "cred-9"):
        assert secret not in out
    row = next(line for line in out.splitlines() if line.startswith("LAKEHOUSE_SPARK_CONF"))
    assert "spark.hadoop.fs.s3a.access.key=****" in row and "spark.x.AuthToken=****" in row
    assert "spark.y.CREDENTIALS=****" in row and "spark.ssl.keyStorePassword=****" in row
    assert "spark.hadoop.fs.s3a.endpoint=http://minio:9000" in row
