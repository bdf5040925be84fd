"""JSON chains from Python: every example loads, every must-fail input of
tests/errors fails with its expected message, as in the C++ tests."""
import json

import pytest

import epifuse
from conftest import ROOT

EXAMPLES = sorted((ROOT / "examples" / "chains").glob("*.json"))
ERRORS = sorted((ROOT / "tests" / "errors").glob("*.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_loads_and_round_trips(path):
    chain = epifuse.load(path)
    chain.verify()
    again = epifuse.Chain.from_json(chain.to_json())
    assert json.loads(again.to_json()) == json.loads(chain.to_json())


@pytest.mark.parametrize("path", ERRORS, ids=lambda p: p.stem)
def test_every_must_fail_input_fails_with_its_message(path):
    expect = path.with_suffix(".expect").read_text().splitlines()[0]
    with pytest.raises(epifuse.UserError) as e:
        epifuse.load(path)
    assert expect in str(e.value)


def test_json_errors_name_the_path():
    with pytest.raises(epifuse.UserError, match=r"ops\[0\]\.p"):
        epifuse.Chain.from_json(json.dumps({
            "epifuse": 1, "inputs": {"x": {"dtype": "f32"}},
            "ops": [{"name": "y", "op": "dropout", "args": ["x"], "p": 2}], "outputs": {"y": {"dtype": "f32"}}}))
    with pytest.raises(epifuse.UserError):
        epifuse.Chain.from_json("{not json")
