"""epifuse.load and Chain.from_json read chains by the CLI's rules
(docs/limits.md): a regular file, at most 1 MiB, no NUL byte, no repeated key."""
import json
import os
import time

import pytest

import epifuse
from conftest import ROOT

ADD_MUL = ROOT / "examples" / "chains" / "add_mul.json"


def test_dev_zero_fails_at_once():
    start = time.monotonic()
    with pytest.raises(epifuse.UserError, match="character device"):
        epifuse.load("/dev/zero")
    assert time.monotonic() - start < 5


def test_a_fifo_fails_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "chain.json"
    os.mkfifo(fifo)
    with pytest.raises(epifuse.UserError, match="FIFO"):
        epifuse.load(fifo)


def test_a_directory_fails(tmp_path):
    with pytest.raises(epifuse.UserError, match="directory"):
        epifuse.load(tmp_path)


def test_text_after_a_nul_is_not_dropped(tmp_path):
    path = tmp_path / "chain.json"
    path.write_bytes(ADD_MUL.read_bytes() + b"\0garbage")
    with pytest.raises(epifuse.UserError, match="NUL byte"):
        epifuse.load(path)
    with pytest.raises(epifuse.UserError, match="NUL byte"):
        epifuse.Chain.from_json(ADD_MUL.read_text() + "\0garbage")


def test_more_than_a_mebibyte_fails_and_is_not_read_to_the_end(tmp_path):
    path = tmp_path / "big.json"
    text = ADD_MUL.read_text()
    path.write_text(text.rstrip()[:-1] + ', "name": "' + "n" * (1 << 20) + '"}')
    with pytest.raises(epifuse.UserError, match="limit of 1048576 bytes"):
        epifuse.load(path)
    with pytest.raises(epifuse.UserError, match="limit of 1048576 bytes"):
        epifuse.Chain.from_json(path.read_text())


def test_a_file_at_the_limit_is_read(tmp_path):
    doc = json.loads(ADD_MUL.read_text())
    text = json.dumps(doc)
    path = tmp_path / "padded.json"
    path.write_text(text + " " * ((1 << 20) - len(text)))
    assert os.path.getsize(path) == 1 << 20
    assert json.loads(epifuse.load(path).to_json()) == json.loads(epifuse.load(ADD_MUL).to_json())


def test_a_repeated_key_fails_as_in_the_cli():
    with pytest.raises(epifuse.UserError, match="duplicate key 'epifuse'"):
        epifuse.Chain.from_json('{"epifuse": 1, "epifuse": 1}')


def test_bytes_load_as_text_does():
    assert epifuse.Chain.from_json(ADD_MUL.read_bytes()).to_json() == epifuse.load(ADD_MUL).to_json()
